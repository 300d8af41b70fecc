package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"time"

	"berth.dev/broker/internal/wal"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Record kinds of the raft log, the first byte of a WAL record's key.
// NEVER CHANGE: bytes on disk (doc.go draws the keys).
const (
	recEntry         byte = 1 // key: kind | term | index | entry type; payload: entry data
	recHardState     byte = 2 // key: kind | term | vote | commit
	recSnapRestored  byte = 3 // key: kind | index | term; the log was replaced by this snapshot
	recSnapCompacted byte = 4 // key: kind | index | term; entries up to index live in this snapshot
)

const (
	entryKeySize = 1 + 8 + 8 + 1
	hsKeySize    = 1 + 8 + 8 + 8
	snapKeySize  = 1 + 8 + 8
)

// ErrLogCorrupt is a raft log whose records do not form a log: a gap, an
// unknown record kind, a snapshot marker without its file.
var ErrLogCorrupt = errors.New("replica: corrupt raft log")

// LogStore is a group's durable raft storage: every entry, HardState and
// snapshot marker is a record of a wal.Log (the segmented, checksummed WAL
// the tenant shards use), snapshots are files beside it, and reads are served
// from a raft.MemoryStorage rebuilt on open. It is used by one goroutine, the
// group's loop.
type LogStore struct {
	*raft.MemoryStorage
	wal    *wal.Log
	snaps  snapDir
	policy wal.Policy
	log    *slog.Logger

	hs        *pb.HardState // the last HardState written
	snapIndex uint64
	// offs[i] is the WAL offset of the record holding entry snapIndex+1+i
	// (its newest version): what compaction may cut below.
	offs []uint64
	// memBytes is the entry data held in the MemoryStorage: exact after
	// open and Compact, and between them counts an entry raft overwrote
	// as well as its replacement (a compaction comes sooner, never later).
	memBytes int64
	batch    []wal.Entry
	keys     []byte
}

// openLogStore opens (or creates) the raft log in dir and replays it. When
// the log is empty and voters is not, it is bootstrapped with a snapshot at
// index 1 holding the initial configuration, the same on every voter.
func openLogStore(dir string, policy wal.Policy, segmentBytes int64, voters []uint64, log *slog.Logger) (*LogStore, error) {
	sd := snapDir{filepath.Join(dir, "snap")}
	if err := os.MkdirAll(sd.dir, 0o755); err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	w, err := wal.Open(wal.Options{Dir: filepath.Join(dir, "log"), Fsync: policy, SegmentBytes: segmentBytes, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("replica: open raft log: %w", err)
	}
	s := &LogStore{MemoryStorage: raft.NewMemoryStorage(), wal: w, snaps: sd, policy: policy, log: log}
	if err := s.replay(); err != nil {
		w.Close()
		return nil, err
	}
	if w.NextOffset() == w.FirstOffset() && len(voters) > 0 {
		boot := &pb.Snapshot{Metadata: &pb.SnapshotMetadata{
			Index: new(uint64(1)), Term: new(uint64(1)), ConfState: &pb.ConfState{Voters: voters},
		}}
		if err := s.Save(&pb.HardState{Term: new(uint64(1)), Commit: new(uint64(1))}, nil, boot, true); err != nil {
			w.Close()
			return nil, err
		}
	}
	return s, nil
}

// replay rebuilds the in-memory log from the WAL: the newest snapshot
// marker, the entries after it (a later record for an index replaces the
// earlier one and everything after it, as raft truncated it), the newest
// HardState.
func (s *LogStore) replay() error {
	r, err := s.wal.ReadFrom(s.wal.FirstOffset())
	if err != nil {
		return fmt.Errorf("replica: replay: %w", err)
	}
	defer r.Close()
	var (
		ents     []*pb.Entry
		hs       *pb.HardState
		snapIdx  uint64
		start    uint64 // index of ents[0]
		haveSnap bool
	)
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("replica: replay: %w", err)
		}
		k := rec.Key
		switch {
		case len(k) == entryKeySize && k[0] == recEntry:
			idx := binary.BigEndian.Uint64(k[9:17])
			if idx <= snapIdx {
				continue
			}
			// Segments cut below a compaction may leave the first entries
			// before the marker that covers the ones removed: a run may start
			// anywhere, and must be whole from the snapshot on at the end.
			if len(ents) == 0 || idx < start {
				ents, s.offs, start = ents[:0], s.offs[:0], idx
			}
			pos := idx - start
			if pos > uint64(len(ents)) {
				return fmt.Errorf("%w: entry %d after %d", ErrLogCorrupt, idx, start+uint64(len(ents))-1)
			}
			e := &pb.Entry{
				Term: new(binary.BigEndian.Uint64(k[1:9])), Index: new(idx),
				Type: pb.EntryType(k[17]).Enum(), Data: append([]byte(nil), rec.Payload...),
			}
			ents = append(ents[:pos], e)
			s.offs = append(s.offs[:pos], rec.Offset)
		case len(k) == hsKeySize && k[0] == recHardState:
			hs = &pb.HardState{
				Term: new(binary.BigEndian.Uint64(k[1:9])), Vote: new(binary.BigEndian.Uint64(k[9:17])),
				Commit: new(binary.BigEndian.Uint64(k[17:25])),
			}
		case len(k) == snapKeySize && (k[0] == recSnapRestored || k[0] == recSnapCompacted):
			idx := binary.BigEndian.Uint64(k[1:9])
			if k[0] == recSnapRestored {
				ents, s.offs = nil, nil
			} else if len(ents) > 0 && start <= idx {
				n := min(uint64(len(ents)), idx-start+1)
				ents, s.offs, start = ents[n:], s.offs[n:], idx+1
			}
			snapIdx, haveSnap = idx, true
		default:
			return fmt.Errorf("%w: record at offset %d has an unknown key", ErrLogCorrupt, rec.Offset)
		}
	}
	if len(ents) > 0 && start != snapIdx+1 {
		return fmt.Errorf("%w: entries start at %d, the snapshot is at %d", ErrLogCorrupt, start, snapIdx)
	}
	if haveSnap {
		snap, err := s.snaps.load(snapIdx)
		if err != nil {
			return errors.Join(ErrLogCorrupt, err)
		}
		if err := s.MemoryStorage.ApplySnapshot(snap); err != nil {
			return fmt.Errorf("replica: replay: %w", err)
		}
		s.snapIndex = snapIdx
	}
	if err := s.MemoryStorage.Append(ents); err != nil {
		return fmt.Errorf("replica: replay: %w", err)
	}
	s.memBytes = entryBytes(ents)
	if hs != nil {
		// A snapshot is committed state: the commit index is at least its index.
		hs.Commit = new(max(hs.GetCommit(), snapIdx))
		s.MemoryStorage.SetHardState(hs)
		s.hs = hs
	}
	return nil
}

// Save persists one Ready's snapshot, entries and HardState, in that order,
// as one WAL write (group commit: every entry of the Ready in one batch),
// then fsyncs when mustSync and the policy is always, or whenever the term or
// vote changed (a vote is never forgotten, whatever the policy).
func (s *LogStore) Save(hs *pb.HardState, ents []*pb.Entry, snap *pb.Snapshot, mustSync bool) error {
	hasSnap := snap != nil && !raft.IsEmptySnap(snap)
	hasHS := hs != nil && !raft.IsEmptyHardState(hs)
	n, keyBytes := len(ents), len(ents)*entryKeySize
	if hasSnap {
		if err := s.snaps.save(snap); err != nil {
			return err
		}
		n, keyBytes = n+1, keyBytes+snapKeySize
	}
	if hasHS {
		n, keyBytes = n+1, keyBytes+hsKeySize
	}
	if n == 0 {
		return nil
	}
	if cap(s.keys) < keyBytes {
		s.keys = make([]byte, 0, keyBytes)
	}
	keys, batch := s.keys[:0], s.batch[:0]
	if hasSnap {
		keys, batch = appendSnapRecord(keys, batch, recSnapRestored, snap.GetMetadata())
	}
	for _, e := range ents {
		k := len(keys)
		keys = append(keys, recEntry)
		keys = binary.BigEndian.AppendUint64(keys, e.GetTerm())
		keys = binary.BigEndian.AppendUint64(keys, e.GetIndex())
		keys = append(keys, byte(e.GetType()))
		batch = append(batch, wal.Entry{Key: keys[k:], Payload: e.GetData(), Count: 1})
	}
	if hasHS {
		keys, batch = appendHardState(keys, batch, hs)
	}
	s.keys, s.batch = keys, batch
	first, err := s.wal.AppendBatch(batch)
	if err != nil {
		return fmt.Errorf("replica: append: %w", err)
	}
	voteChanged := hasHS && (s.hs == nil || hs.GetTerm() != s.hs.GetTerm() || hs.GetVote() != s.hs.GetVote())
	if (mustSync && s.policy == wal.SyncAlways) || voteChanged || hasSnap {
		if err := s.wal.Sync(); err != nil {
			return fmt.Errorf("replica: fsync: %w", err)
		}
	}
	off := first
	if hasSnap {
		if err := s.MemoryStorage.ApplySnapshot(snap); err != nil {
			return fmt.Errorf("replica: %w", err)
		}
		s.snapIndex, s.offs, s.memBytes = snap.GetMetadata().GetIndex(), s.offs[:0], 0
		off++
	}
	if len(ents) > 0 {
		if err := s.MemoryStorage.Append(ents); err != nil {
			return fmt.Errorf("replica: %w", err)
		}
		s.memBytes += entryBytes(ents)
		pos := ents[0].GetIndex() - s.snapIndex - 1
		s.offs = s.offs[:min(pos, uint64(len(s.offs)))]
		for range ents {
			s.offs = append(s.offs, off)
			off++
		}
	}
	if hasHS {
		s.hs = proto.Clone(hs).(*pb.HardState)
		s.MemoryStorage.SetHardState(s.hs)
	}
	return nil
}

func appendSnapRecord(keys []byte, batch []wal.Entry, kind byte, md *pb.SnapshotMetadata) ([]byte, []wal.Entry) {
	k := len(keys)
	keys = append(keys, kind)
	keys = binary.BigEndian.AppendUint64(keys, md.GetIndex())
	keys = binary.BigEndian.AppendUint64(keys, md.GetTerm())
	return keys, append(batch, wal.Entry{Key: keys[k:], Count: 1})
}

func appendHardState(keys []byte, batch []wal.Entry, hs *pb.HardState) ([]byte, []wal.Entry) {
	k := len(keys)
	keys = append(keys, recHardState)
	keys = binary.BigEndian.AppendUint64(keys, hs.GetTerm())
	keys = binary.BigEndian.AppendUint64(keys, hs.GetVote())
	keys = binary.BigEndian.AppendUint64(keys, hs.GetCommit())
	return keys, append(batch, wal.Entry{Key: keys[k:], Count: 1})
}

// entryBytes is the data of ents.
func entryBytes(ents []*pb.Entry) int64 {
	var n int64
	for _, e := range ents {
		n += int64(len(e.GetData()))
	}
	return n
}

// MemBytes is the entry data the group holds in memory.
func (s *LogStore) MemBytes() int64 { return s.memBytes }

// Compact makes a snapshot at index (applied, with the state machine's
// data), writes its file and marker durably, keeps up to keep entries (and
// keepBytes of their data) before it in memory for followers that lag a
// little, and deletes the WAL segments and snapshot files nothing needs
// any more.
func (s *LogStore) Compact(index uint64, cs *pb.ConfState, data []byte, keep uint64, keepBytes int64) error {
	if index <= s.snapIndex {
		return nil
	}
	snap, err := s.MemoryStorage.CreateSnapshot(index, cs, data)
	if err != nil {
		return fmt.Errorf("replica: snapshot: %w", err)
	}
	if err := s.snaps.save(snap); err != nil {
		return err
	}
	// The marker and a fresh HardState go after every record still needed, so
	// cutting below the first needed entry never loses either.
	keys, batch := appendSnapRecord(s.keys[:0], s.batch[:0], recSnapCompacted, snap.GetMetadata())
	if s.hs != nil {
		keys, batch = appendHardState(keys, batch, s.hs)
	}
	s.keys, s.batch = keys, batch
	marker, err := s.wal.AppendBatch(batch)
	if err != nil {
		return fmt.Errorf("replica: append: %w", err)
	}
	if err := s.wal.Sync(); err != nil {
		return fmt.Errorf("replica: fsync: %w", err)
	}
	drop := index - s.snapIndex
	cut := marker
	if drop < uint64(len(s.offs)) {
		cut = min(cut, s.offs[drop])
	}
	s.offs = s.offs[min(drop, uint64(len(s.offs))):]
	s.snapIndex = index
	if to := s.keepFrom(index, keep, keepBytes); to > 0 {
		if err := s.MemoryStorage.Compact(to); err != nil && !errors.Is(err, raft.ErrCompacted) {
			return fmt.Errorf("replica: compact: %w", err)
		}
	}
	s.memBytes = s.heldBytes()
	if err := s.wal.Roll(); err != nil {
		return fmt.Errorf("replica: roll: %w", err)
	}
	if _, err := s.wal.RemoveBefore(cut, time.Time{}); err != nil {
		return err
	}
	return s.snaps.removeBelow(index)
}

// keepFrom is the index the MemoryStorage compacts to (entries up to it
// go) so that at most keep entries up to index, and keepBytes of their
// data, stay; 0 when nothing goes.
func (s *LogStore) keepFrom(index, keep uint64, keepBytes int64) uint64 {
	first, _ := s.MemoryStorage.FirstIndex()
	lo := first
	if index > keep {
		lo = max(lo, index-keep+1)
	}
	ents, _ := s.MemoryStorage.Entries(lo, index+1, math.MaxUint64)
	kept, n := int64(0), 0
	for i := len(ents) - 1; i >= 0; i-- {
		if kept += int64(len(ents[i].GetData())); kept > keepBytes {
			break
		}
		n++
	}
	return index - uint64(n) // keep entries index-n+1 .. index
}

// heldBytes counts the entry data in the MemoryStorage.
func (s *LogStore) heldBytes() int64 {
	first, _ := s.MemoryStorage.FirstIndex()
	last, _ := s.MemoryStorage.LastIndex()
	if last < first {
		return 0
	}
	ents, _ := s.MemoryStorage.Entries(first, last+1, math.MaxUint64)
	return entryBytes(ents)
}

// Size is the raft log's bytes on disk (WAL segments; snapshots excluded).
func (s *LogStore) Size() int64 { return s.wal.Size() }

// Close syncs and closes the WAL.
func (s *LogStore) Close() error { return s.wal.Close() }
