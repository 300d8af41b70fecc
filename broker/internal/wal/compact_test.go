package wal

import (
	"errors"
	"fmt"
	"os"
	"testing"
)

// retained appends key=value records (empty value = tombstone).
func retained(t *testing.T, l *Log, kv ...string) []uint64 {
	t.Helper()
	var offs []uint64
	for i := 0; i < len(kv); i += 2 {
		off, err := l.Append([]byte(kv[i]), []byte(kv[i+1]), 1)
		if err != nil {
			t.Fatal(err)
		}
		offs = append(offs, off)
	}
	return offs
}

func TestCompact(t *testing.T) {
	dir := t.TempDir()
	o := Options{Dir: dir, SegmentBytes: 200, IndexInterval: 1, Fsync: SyncNever}
	l := openLog(t, o)
	// Records are 33 + 3 + 2..3 bytes: 5 per 200-byte segment.
	retained(t, l,
		"t/a", "a0", "t/b", "b0", "t/c", "c0", "t/a", "a1", "t/d", "d0", // segment 0
		"t/b", "b1", "t/c", "", "t/e", "e0", "t/a", "a2", "t/f", "f0", // segment 5: t/c deleted
		"t/e", "e1", "t/d", "", // active segment 10
	)
	if _, err := l.Append(nil, []byte("unkeyed"), 1); err != nil {
		t.Fatal(err)
	}
	if segs := l.Segments(); fmt.Sprint(segs) != "[0 5 10]" {
		t.Fatalf("segments = %v, want [0 5 10]", segs)
	}
	st, err := l.Compact()
	if err != nil {
		t.Fatal(err)
	}
	// Segment 0: every key has a newer record -> removed. Segment 5: b1, a2, f0 stay.
	if st.SegmentsRemoved != 1 || st.SegmentsRewritten != 1 || st.RecordsDropped != 7 {
		t.Fatalf("stats = %+v", st)
	}
	exp := []want{
		{5, 1, "t/b", "b1"}, {8, 1, "t/a", "a2"}, {9, 1, "t/f", "f0"},
		{10, 1, "t/e", "e1"}, {11, 1, "t/d", ""}, {12, 1, "", "unkeyed"},
	}
	checkRecords(t, l, 5, exp)
	checkRecords(t, l, 6, exp[1:]) // 6 and 7 are gaps now
	loc, err := l.Locate(6)
	if err != nil || loc.Offset != 8 {
		t.Fatalf("Locate(6) in a gap = %d, %v; want the record at 8", loc.Offset, err)
	}
	loc.Release()
	if _, err := os.Stat(segPath(dir, 0)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("emptied segment still on disk: %v", err)
	}
	if l.FirstOffset() != 5 || l.NextOffset() != 13 {
		t.Fatalf("FirstOffset %d NextOffset %d", l.FirstOffset(), l.NextOffset())
	}
	// A second pass finds nothing to do.
	if st, err := l.Compact(); err != nil || st.RecordsDropped != 0 {
		t.Fatalf("second Compact = %+v, %v", st, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopen: offsets and index survive (the index is verified, not rebuilt).
	l2 := openLog(t, o)
	checkRecords(t, l2, 5, exp)
	if err := l2.Verify(); err != nil {
		t.Fatal(err)
	}
	off, err := l2.Append([]byte("t/g"), []byte("g0"), 1)
	if err != nil || off != 13 {
		t.Fatalf("Append after compaction = %d, %v", off, err)
	}
}

// TestCompactCrashBetweenRenameAndIndex: a crash after the compacted .wal is
// renamed into place but before its index is written leaves no index; Open
// rebuilds it. (The old index is removed before the rename.)
func TestCompactCrashBetweenRenameAndIndex(t *testing.T) {
	dir := t.TempDir()
	o := Options{Dir: dir, SegmentBytes: 200, IndexInterval: 1, Fsync: SyncNever}
	l := openLog(t, o)
	retained(t, l, "k", "1", "k", "2", "k", "3", "j", "1", "j", "2", "k", "4", "x", "x")
	if _, err := l.Compact(); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if err := os.Remove(segPath(dir, 0)[:len(segPath(dir, 0))-4] + ".idx"); err != nil {
		t.Fatal(err)
	}
	l2 := openLog(t, o)
	checkRecords(t, l2, 0, []want{{4, 1, "j", "2"}, {5, 1, "k", "4"}, {6, 1, "x", "x"}})
}

// TestCompactKeepsReaders: a reader inside a segment being compacted keeps
// reading the old file.
func TestCompactKeepsReaders(t *testing.T) {
	l := openLog(t, Options{SegmentBytes: 200, Fsync: SyncNever})
	retained(t, l, "k", "1", "k", "2", "k", "3", "k", "4", "k", "5", "k", "6")
	r, err := l.ReadFrom(0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if st, err := l.Compact(); err != nil || st.RecordsDropped == 0 {
		t.Fatalf("Compact = %+v, %v", st, err)
	}
	for i := range 6 {
		rec, err := r.Next()
		if err != nil || string(rec.Payload) != fmt.Sprint(i+1) {
			t.Fatalf("record %d: %q, %v", i, rec.Payload, err)
		}
	}
}
