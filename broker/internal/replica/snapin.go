package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// inDir is where a group's received snapshot checkpoints go: one
// <from>-<random>.tmp directory per stream, renamed to <index> once whole.
func inDir(groupDir string) string { return filepath.Join(groupDir, "in") }

// snapIn is a snapshot being received from one peer for one group; its
// frames come in order on one connection, which owns it (connState).
type snapIn struct {
	dir    string // <group>/in/<from>-<random>.tmp, this stream's own
	index  uint64
	path   string   // file being written
	f      *os.File // open for path
	size   int64
	files  int64
	total  int64
	failed error
}

// receiveSnapshot handles a snapshot stream frame (the connection's
// goroutine; it may block on the disk). On the end frame the files are
// fsynced, moved to <group>/in/<index> and the MsgSnap handed to the loop.
// A stream that ends without its end frame is removed by connEnded.
func (h *Host) receiveSnapshot(cs *connState, from uint64, kind byte, g *Group, payload []byte) {
	in := cs.snaps[g.id]
	switch kind {
	case kindSnapBegin:
		if in != nil {
			in.abandon()
		}
		in = &snapIn{}
		if cs.snaps == nil {
			cs.snaps = map[uint64]*snapIn{}
		}
		cs.snaps[g.id] = in
		if len(payload) != 8 {
			in.failed = fmt.Errorf("%w: begin frame", ErrSnapStream)
			return
		}
		in.index = binary.BigEndian.Uint64(payload)
		g.noteCommit(in.index) // committed at the leader; this node is behind until it has it
		if err := os.MkdirAll(inDir(g.dir()), 0o755); err != nil {
			in.failed = err
		} else if in.dir, err = os.MkdirTemp(inDir(g.dir()), strconv.FormatUint(from, 10)+"-*.tmp"); err != nil {
			in.failed = err
		}
	case kindSnapChunk:
		if in == nil {
			h.tr.badMessages.Add(1)
			return
		}
		if in.failed == nil {
			in.failed = in.chunk(payload)
		}
	case kindSnapEnd:
		delete(cs.snaps, g.id)
		if in == nil {
			h.tr.badMessages.Add(1)
			return
		}
		m, err := in.finish(payload, from, h.cfg.NodeID)
		if err != nil {
			h.tr.badMessages.Add(1)
			h.log.Warn("replica: snapshot stream refused", "peer", from, "group", g.id, "err", err)
			in.abandon()
			return
		}
		h.snapshotsReceived.Add(1)
		select { // the loop must see it: wait rather than drop
		case g.recvc <- inMsg{m: m}:
		case <-g.donec:
		case <-time.After(snapIOTimeout):
		}
	}
}

// connEnded implements frameHandler: the snapshot streams a connection
// carried and did not finish (the sender died, the host closes) leave no
// open file and no directory behind.
func (h *Host) connEnded(cs *connState) {
	for group, in := range cs.snaps {
		h.log.Info("replica: snapshot stream cut short", "group", group, "index", in.index, "bytes", in.total)
		in.abandon()
	}
	clear(cs.snaps)
}

func (in *snapIn) close() {
	if in.f != nil {
		in.f.Close()
		in.f = nil
	}
}

// abandon closes the stream's file and removes what it received.
func (in *snapIn) abandon() {
	in.close()
	if in.dir != "" {
		_ = os.RemoveAll(in.dir)
	}
}

// removeUnfinished deletes the directories of streams a crash cut short
// (the group is not open yet: no stream writes there).
func removeUnfinished(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".tmp") {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// chunk writes one chunk; a file's chunks come in order, files one after
// the other.
func (in *snapIn) chunk(p []byte) error {
	if len(p) < 2 {
		return fmt.Errorf("%w: short chunk", ErrSnapStream)
	}
	n := int(binary.BigEndian.Uint16(p))
	if len(p) < 2+n+8 {
		return fmt.Errorf("%w: short chunk", ErrSnapStream)
	}
	rel, off, data := string(p[2:2+n]), int64(binary.BigEndian.Uint64(p[2+n:])), p[2+n+8:]
	if !filepath.IsLocal(rel) || strings.Contains(rel, "\\") {
		return fmt.Errorf("%w: path %q", ErrSnapStream, rel)
	}
	if rel != in.path {
		if err := in.sealFile(); err != nil {
			return err
		}
		if off != 0 {
			return fmt.Errorf("%w: %s starts at %d", ErrSnapStream, rel, off)
		}
		path := filepath.Join(in.dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		in.path, in.f, in.size = rel, f, 0
		in.files++
	}
	if off != in.size {
		return fmt.Errorf("%w: %s chunk at %d, have %d", ErrSnapStream, rel, off, in.size)
	}
	if _, err := in.f.Write(data); err != nil {
		return err
	}
	in.size += int64(len(data))
	in.total += int64(len(data))
	return nil
}

func (in *snapIn) sealFile() error {
	if in.f == nil {
		return nil
	}
	err := in.f.Sync()
	err = errors.Join(err, in.f.Close())
	in.f = nil
	return err
}

// finish checks the end frame against what came, makes the files and
// their directories durable and moves them to in/<index>.
func (in *snapIn) finish(p []byte, from, self uint64) (*pb.Message, error) {
	err := in.failed
	if err == nil {
		err = in.sealFile()
	}
	in.close()
	if err != nil {
		return nil, err
	}
	if len(p) < 12 {
		return nil, fmt.Errorf("%w: end frame", ErrSnapStream)
	}
	files, total := int64(binary.BigEndian.Uint32(p)), int64(binary.BigEndian.Uint64(p[4:]))
	if files != in.files || total != in.total {
		return nil, fmt.Errorf("%w: %d files, %d bytes received; %d, %d sent", ErrSnapStream, in.files, in.total, files, total)
	}
	m := new(pb.Message)
	if err := proto.Unmarshal(p[12:], m); err != nil || m.GetType() != pb.MsgSnap || m.GetFrom() != from ||
		m.GetTo() != self || m.GetSnapshot().GetMetadata().GetIndex() != in.index {
		return nil, fmt.Errorf("%w: end frame's message", ErrSnapStream)
	}
	if err := syncTree(in.dir); err != nil {
		return nil, err
	}
	final := filepath.Join(filepath.Dir(in.dir), strconv.FormatUint(in.index, 10))
	if err := os.RemoveAll(final); err != nil {
		return nil, err
	}
	if err := os.Rename(in.dir, final); err != nil {
		return nil, err
	}
	return m, syncDir(filepath.Dir(final))
}

// syncTree fsyncs every directory under (and including) dir.
func syncTree(dir string) error {
	return filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		return syncDir(path)
	})
}

// installSnapshot (loop) installs the received checkpoint of a snapshot
// raft accepted, before the snapshot is persisted: a crash in between
// leaves the state ahead of the raft log, which applying again tolerates,
// never a raft log ahead of its state. It reports false when no
// checkpoint came with the snapshot (the state must hold it already).
func (g *Group) installSnapshot(fs FileState, snap *pb.Snapshot) (bool, error) {
	idx := snap.GetMetadata().GetIndex()
	dir := filepath.Join(inDir(g.dir()), strconv.FormatUint(idx, 10))
	if _, err := os.Stat(dir); err != nil {
		return false, nil
	}
	if err := fs.Install(dir, snap.GetData()); err != nil {
		return false, fmt.Errorf("replica: install snapshot %d: %w", idx, err)
	}
	g.h.snapshotsInstalled.Add(1)
	g.log.Info("replica: snapshot installed", "index", idx)
	removeInBelow(inDir(g.dir()), idx)
	return true, nil
}

// removeInBelow deletes received checkpoints at or below index.
func removeInBelow(dir string, index uint64) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if i, err := strconv.ParseUint(e.Name(), 10, 64); err == nil && i <= index {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

func (g *Group) dir() string { return g.h.groupDir(g.id) }
