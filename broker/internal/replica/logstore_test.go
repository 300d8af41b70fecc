package replica

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"testing"

	"berth.dev/broker/internal/wal"
	"github.com/google/go-cmp/cmp"
	pb "go.etcd.io/raft/v3/raftpb"
)

func ent(index, term uint64, data string) *pb.Entry {
	return &pb.Entry{Index: new(index), Term: new(term), Type: pb.EntryNormal.Enum(), Data: []byte(data)}
}

type entView struct {
	Index, Term uint64
	Data        string
}

func view(t *testing.T, s *LogStore) []entView {
	t.Helper()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if last < first {
		return nil
	}
	ents, err := s.Entries(first, last+1, math.MaxUint64)
	if err != nil {
		t.Fatal(err)
	}
	var v []entView
	for _, e := range ents {
		v = append(v, entView{e.GetIndex(), e.GetTerm(), string(e.GetData())})
	}
	return v
}

func openStore(t *testing.T, dir string) *LogStore {
	t.Helper()
	s, err := openLogStore(dir, wal.SyncAlways, 1024, []uint64{1, 2, 3}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestLogStoreReplay: what Save wrote comes back on open, with raft's
// truncation of a conflicting tail, the newest HardState and the bootstrap
// configuration.
func TestLogStoreReplay(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Save(&pb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(uint64(1))},
		[]*pb.Entry{ent(2, 2, "a"), ent(3, 2, "b"), ent(4, 2, "c")}, nil, true))
	// A new leader of term 3 overwrites 3 and 4 (never committed) and goes on.
	must(s.Save(&pb.HardState{Term: new(uint64(3)), Vote: new(uint64(2)), Commit: new(uint64(2))},
		[]*pb.Entry{ent(3, 3, "B"), ent(4, 3, "C"), ent(5, 3, "D")}, nil, true))
	must(s.Save(&pb.HardState{Term: new(uint64(3)), Vote: new(uint64(2)), Commit: new(uint64(4))}, nil, nil, true))
	want := view(t, s)
	must(s.Close())

	s = openStore(t, dir)
	defer s.Close()
	if diff := cmp.Diff(want, view(t, s)); diff != "" {
		t.Errorf("entries after reopen (-before +after):\n%s", diff)
	}
	wantEnts := []entView{{2, 2, "a"}, {3, 3, "B"}, {4, 3, "C"}, {5, 3, "D"}}
	if diff := cmp.Diff(wantEnts, view(t, s)); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
	hs, cs, _ := s.InitialState()
	if hs.GetTerm() != 3 || hs.GetVote() != 2 || hs.GetCommit() != 4 {
		t.Errorf("HardState = %v, want term 3 vote 2 commit 4", hs)
	}
	if diff := cmp.Diff([]uint64{1, 2, 3}, cs.GetVoters()); diff != "" {
		t.Errorf("voters (-want +got):\n%s", diff)
	}
}

// TestLogStoreCompaction: a compaction keeps the snapshot and the entries
// after it across a reopen and deletes whole segments below them.
func TestLogStoreCompaction(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	for i := uint64(2); i <= 200; i += 11 { // Readies of 11 entries: many 1 KiB segments
		var ents []*pb.Entry
		for j := i; j < i+11 && j <= 200; j++ {
			ents = append(ents, ent(j, 1, fmt.Sprintf("entry-%03d", j)))
		}
		if err := s.Save(&pb.HardState{Term: new(uint64(1)), Commit: new(min(i+10, 200))}, ents, nil, true); err != nil {
			t.Fatal(err)
		}
	}
	segsBefore := len(s.wal.Segments())
	cs := &pb.ConfState{Voters: []uint64{1, 2, 3}}
	if err := s.Compact(150, cs, []byte("state@150"), 10, math.MaxInt64); err != nil {
		t.Fatal(err)
	}
	if first, _ := s.FirstIndex(); first != 141 {
		t.Errorf("in memory the log starts at %d, want 141 (10 kept for catch-up)", first)
	}
	if err := s.Save(nil, []*pb.Entry{ent(201, 2, "after")}, nil, true); err != nil {
		t.Fatal(err)
	}
	t.Logf("segments: %d before compaction, %d after", segsBefore, len(s.wal.Segments()))
	if len(s.wal.Segments()) >= segsBefore {
		t.Errorf("compaction removed no segment (%d before, %d after)", segsBefore, len(s.wal.Segments()))
	}
	s.Close()

	s = openStore(t, dir)
	defer s.Close()
	snap, _ := s.Snapshot()
	if snap.GetMetadata().GetIndex() != 150 || string(snap.GetData()) != "state@150" {
		t.Errorf("snapshot = %d %q, want 150 %q", snap.GetMetadata().GetIndex(), snap.GetData(), "state@150")
	}
	got := view(t, s)
	if len(got) != 51 || got[0].Index != 151 || got[50] != (entView{201, 2, "after"}) {
		t.Errorf("entries after reopen: %d from %v to %v, want 151..201", len(got), got[0], got[len(got)-1])
	}
	if hs, _, _ := s.InitialState(); hs.GetCommit() != 200 {
		t.Errorf("commit after reopen = %d, want 200", hs.GetCommit())
	}
	files, _ := filepath.Glob(filepath.Join(dir, "snap", "*.snap"))
	if len(files) != 1 {
		t.Errorf("snapshot files = %v, want only the newest", files)
	}
}

// TestLogStoreTornTail: a write torn by a crash loses only the unsynced
// tail; what was saved before it comes back.
func TestLogStoreTornTail(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	if err := s.Save(nil, []*pb.Entry{ent(2, 1, "kept")}, nil, true); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(nil, []*pb.Entry{ent(3, 1, "torn")}, nil, true); err != nil {
		t.Fatal(err)
	}
	s.Close()
	segs, _ := filepath.Glob(filepath.Join(dir, "log", "*"+wal.SegmentSuffix))
	tail := segs[len(segs)-1]
	fi, err := os.Stat(tail)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(tail, fi.Size()-3); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir)
	defer s.Close()
	if diff := cmp.Diff([]entView{{2, 1, "kept"}}, view(t, s)); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
}

// TestLogStoreMissingSnapshot: a marker whose snapshot file is gone is
// corruption, not an empty state.
func TestLogStoreMissingSnapshot(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	s.Close()
	files, _ := filepath.Glob(filepath.Join(dir, "snap", "*.snap"))
	for _, f := range files {
		os.Remove(f)
	}
	_, err := openLogStore(dir, wal.SyncAlways, 1024, nil, slog.New(slog.DiscardHandler))
	if !errors.Is(err, ErrLogCorrupt) {
		t.Fatalf("open without the snapshot file: %v, want ErrLogCorrupt", err)
	}
}
