package replica

import (
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// FileState is a StateMachine whose state lives in files too large for a
// snapshot's data (a tenant's store). A follower too far behind for the
// leader's log gets those files with the snapshot: the leader checkpoints
// them (Checkpoint, in its loop, between two applied entries), streams them
// on a connection of their own, and the follower installs them (Install)
// before it persists the snapshot. The checkpoint may be newer than the
// snapshot (it is taken when the snapshot is sent): entries after the
// snapshot are applied to it again, so Apply must skip what the state
// already holds, as it must after a restart.
type FileState interface {
	StateMachine
	// Checkpoint writes a copy of the state as of the last applied index
	// into dir (created, on the same filesystem as the state: hard links
	// are welcome).
	Checkpoint(dir string) error
	// Install replaces the state with a checkpoint received whole and
	// fsynced in dir (it may move it) and the snapshot's data, atomically
	// as far as a crash can tell.
	Install(dir string, data []byte) error
}

// Snapshot stream frame kinds (on a dedicated connection; doc.go).
const (
	kindSnapBegin byte = 4 // index 8 B
	kindSnapChunk byte = 5 // path len 2 B | path | offset 8 B | bytes
	kindSnapEnd   byte = 6 // files 4 B | bytes 8 B | raftpb.Message (MsgSnap)
)

const (
	snapChunkBytes = 1 << 20
	// snapIOTimeout bounds each write of a stream and the wait for the
	// follower to have read it all.
	snapIOTimeout = 30 * time.Second
)

// ErrSnapStream is a snapshot stream the follower refuses (bad path, a
// chunk out of order, missing files).
var ErrSnapStream = errors.New("replica: bad snapshot stream")

func (g *Group) outDir(to uint64) string {
	return filepath.Join(g.h.groupDir(g.id), "out", strconv.FormatUint(to, 10))
}

type snapResult struct {
	to  uint64
	err error
}

// takeSnapshots (loop) starts a stream for every MsgSnap of msgs and
// returns the other messages.
func (g *Group) takeSnapshots(fs FileState, msgs []*pb.Message) []*pb.Message {
	if !slices.ContainsFunc(msgs, func(m *pb.Message) bool { return m.GetType() == pb.MsgSnap }) {
		return msgs
	}
	out := make([]*pb.Message, 0, len(msgs))
	for _, m := range msgs {
		if m.GetType() == pb.MsgSnap {
			g.sendSnapshot(fs, m)
			continue
		}
		out = append(out, m)
	}
	return out
}

// sendSnapshot (loop) checkpoints the state and streams it to m.To with m
// last; the result comes back on snapc and becomes ReportSnapshot.
func (g *Group) sendSnapshot(fs FileState, m *pb.Message) {
	to := m.GetTo()
	if g.streaming[to] {
		return // raft waits for the stream already running
	}
	dir := g.outDir(to)
	err := os.RemoveAll(dir)
	if err == nil {
		err = fs.Checkpoint(dir)
	}
	if err != nil {
		g.log.Warn("replica: snapshot checkpoint", "peer", to, "err", err)
		_ = os.RemoveAll(dir)
		g.streaming[to] = true
		go func() { // reported after this Ready, like a failed stream
			select {
			case g.snapc <- snapResult{to, err}:
			case <-g.donec:
			}
		}()
		return
	}
	g.streaming[to] = true
	g.h.snapshotsSent.Add(1)
	go func() {
		start := time.Now()
		n, err := g.h.tr.stream(g.h.peerKey(to), g.id, func(send func(kind byte, payload []byte) error) (int64, error) {
			return streamDir(dir, m, send)
		})
		_ = os.RemoveAll(dir)
		if err != nil {
			g.log.Warn("replica: snapshot stream", "peer", to, "err", err)
		} else {
			g.log.Info("replica: snapshot streamed", "peer", to, "index", m.GetSnapshot().GetMetadata().GetIndex(),
				"bytes", n, "took", time.Since(start).Round(time.Millisecond))
		}
		select {
		case g.snapc <- snapResult{to, err}:
		case <-g.donec:
		}
	}()
}

// snapDone (loop) reports a finished stream to raft.
func (g *Group) snapDone(r snapResult) {
	delete(g.streaming, r.to)
	st := raft.SnapshotFinish
	if r.err != nil {
		st = raft.SnapshotFailure
	}
	g.rn.ReportSnapshot(r.to, st)
}

// streamDir sends every file under dir in chunks, then the MsgSnap.
func streamDir(dir string, m *pb.Message, send func(kind byte, payload []byte) error) (int64, error) {
	if err := send(kindSnapBegin, binary.BigEndian.AppendUint64(nil, m.GetSnapshot().GetMetadata().GetIndex())); err != nil {
		return 0, err
	}
	var files, total int64
	var buf []byte
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		files++
		if need := 2 + len(rel) + 8 + snapChunkBytes; cap(buf) < need {
			buf = make([]byte, 0, need)
		}
		for off := int64(0); ; {
			b := binary.BigEndian.AppendUint16(buf[:0], uint16(len(rel)))
			b = append(b, rel...)
			b = binary.BigEndian.AppendUint64(b, uint64(off))
			n, rerr := io.ReadFull(f, b[len(b):len(b)+snapChunkBytes])
			if n > 0 || off == 0 {
				if err := send(kindSnapChunk, b[:len(b)+n]); err != nil {
					return err
				}
			}
			off += int64(n)
			total += int64(n)
			if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
				return nil
			}
			if rerr != nil {
				return rerr
			}
		}
	})
	if err != nil {
		return total, err
	}
	body, err := proto.Marshal(m)
	if err != nil {
		return total, err
	}
	end := binary.BigEndian.AppendUint32(nil, uint32(files))
	end = binary.BigEndian.AppendUint64(end, uint64(total))
	return total, send(kindSnapEnd, append(end, body...))
}
