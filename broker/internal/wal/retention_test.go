package wal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"
)

func TestRetentionBytes(t *testing.T) {
	dir := t.TempDir()
	// 3 records of 140 bytes per segment (420 bytes).
	l := openLog(t, Options{Dir: dir, SegmentBytes: 450, Retention: Retention{Bytes: 1000}, Fsync: SyncNever})
	exp := appendN(t, l, 14, 100) // segments 0, 3, 6, 9, 12 (active, 2 records)
	removed, err := l.ApplyRetention()
	if err != nil {
		t.Fatal(err)
	}
	// 4*420 + 280 = 1960 bytes; dropping 0, 3 and 6 leaves 700 <= 1000.
	if removed != 3 {
		t.Fatalf("removed %d segments, want 3 (segments now %v)", removed, l.Segments())
	}
	if got := l.FirstOffset(); got != 9 {
		t.Fatalf("FirstOffset = %d, want 9", got)
	}
	if size := l.Size(); size > 1000 {
		t.Fatalf("Size = %d after retention, above 1000", size)
	}
	for _, base := range []uint64{0, 3, 6} {
		if _, err := os.Stat(segPath(dir, base)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("segment %d still on disk: %v", base, err)
		}
	}
	checkRecords(t, l, 9, exp[9:])
	if _, err := l.ReadFrom(2); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("ReadFrom a deleted offset = %v, want ErrOutOfRange", err)
	}
}

func TestRetentionNeverRemovesActive(t *testing.T) {
	l := openLog(t, Options{SegmentBytes: 1 << 20, Retention: Retention{Bytes: 10, Age: time.Nanosecond}, Fsync: SyncNever})
	exp := appendN(t, l, 5, 100)
	removed, err := l.ApplyRetention()
	if err != nil || removed != 0 {
		t.Fatalf("ApplyRetention = %d, %v; the only segment is active", removed, err)
	}
	checkRecords(t, l, 0, exp)
}

func TestRetentionAge(t *testing.T) {
	clock := newFakeClock()
	l := openLog(t, Options{SegmentBytes: 450, Retention: Retention{Age: time.Hour}, Now: clock.Now, Fsync: SyncNever})
	appendN(t, l, 6, 100) // segments 0 and 3, written "now"
	clock.Advance(30 * time.Minute)
	exp := appendN(t, l, 6, 100) // segments 6 and 9, half an hour later (9 active)
	clock.Advance(45 * time.Minute)
	removed, err := l.ApplyRetention()
	if err != nil {
		t.Fatal(err)
	}
	if removed != 2 || l.FirstOffset() != 6 {
		t.Fatalf("removed %d, FirstOffset %d; want the two 75-minute-old segments gone", removed, l.FirstOffset())
	}
	for i := range exp {
		exp[i].off = uint64(6 + i)
	}
	checkRecords(t, l, 6, exp)
}

// TestRetentionWhileReading: a reader inside a segment that retention
// deletes finishes reading it.
func TestRetentionWhileReading(t *testing.T) {
	l := openLog(t, Options{SegmentBytes: 450, Retention: Retention{Bytes: 500}, Fsync: SyncNever})
	exp := appendN(t, l, 9, 100)
	r, err := l.ReadFrom(0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if n, err := l.ApplyRetention(); err != nil || n == 0 {
		t.Fatalf("ApplyRetention = %d, %v", n, err)
	}
	for i := 1; i < 3; i++ {
		rec, err := r.Next()
		if err != nil || string(rec.Payload) != exp[i].payload {
			t.Fatalf("record %d after its segment was deleted: %v", i, err)
		}
	}
	// The reader then continues with what is still in the log.
	rec, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if rec.Offset != l.FirstOffset() {
		t.Fatalf("after the deleted segment the reader is at %d, want %d", rec.Offset, l.FirstOffset())
	}
	for {
		if _, err := r.Next(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
}

// TestRemoveBefore: sealed segments wholly below the offset go, the one
// holding it and the active one stay, and reading from the kept offset
// still works.
func TestRemoveBefore(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(Options{Dir: dir, SegmentBytes: 256, Fsync: SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 40 {
		if _, err := l.Append(nil, []byte(fmt.Sprintf("record-%02d-padding-padding", i)), 1); err != nil {
			t.Fatal(err)
		}
	}
	segs := l.Segments()
	if len(segs) < 4 {
		t.Fatalf("only %d segments", len(segs))
	}
	keep := segs[2] + 1 // inside the third segment
	if n, err := l.RemoveBefore(keep, time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("removed %d segments still in the kept history: %v", n, err)
	}
	removed, err := l.RemoveBefore(keep, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if removed != 2 || l.FirstOffset() != segs[2] {
		t.Fatalf("removed %d, first offset %d; want 2 and %d", removed, l.FirstOffset(), segs[2])
	}
	r, err := l.ReadFrom(keep)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rec, err := r.Next()
	if err != nil || rec.Offset != keep {
		t.Fatalf("read %d: %v", rec.Offset, err)
	}
	if n, err := l.RemoveBefore(l.NextOffset()+100, time.Now().Add(time.Second)); err != nil || len(l.Segments()) != 1 || n == 0 {
		t.Fatalf("removing everything: %d removed, %d segments left, %v; want only the active one left", n, len(l.Segments()), err)
	}
}

// RetentionCut names the cut ApplyRetention would make under a retention
// given at the call (not Options), deletes nothing, and RemoveBefore(cut)
// then deletes exactly those segments.
func TestRetentionCut(t *testing.T) {
	clock := newFakeClock()
	l := openLog(t, Options{SegmentBytes: 450, Now: clock.Now, Fsync: SyncNever})
	appendN(t, l, 6, 100) // segments 0 and 3
	clock.Advance(time.Hour)
	exp := appendN(t, l, 8, 100) // segments 6, 9 and 12 (active, 2 records)
	tests := []struct {
		name string
		ret  Retention
		want uint64
	}{
		{"unbounded", Retention{}, 0},
		{"bytes fit", Retention{Bytes: 1 << 20}, 0},
		{"bytes", Retention{Bytes: 1000}, 9},
		{"bytes below the active segment", Retention{Bytes: 1}, 12},
		{"age", Retention{Age: 30 * time.Minute}, 6},
		{"age and bytes", Retention{Age: 30 * time.Minute, Bytes: 1000}, 9},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := l.RetentionCut(tc.ret, clock.Now()); got != tc.want {
				t.Fatalf("RetentionCut(%+v) = %d, want %d", tc.ret, got, tc.want)
			}
			if got := l.FirstOffset(); got != 0 {
				t.Fatalf("FirstOffset = %d after RetentionCut, want 0: it deletes nothing", got)
			}
		})
	}
	cut := l.RetentionCut(Retention{Bytes: 1000}, clock.Now())
	if n, err := l.RemoveBefore(cut, time.Time{}); err != nil || n != 3 {
		t.Fatalf("RemoveBefore(%d) = %d, %v; want 3 segments", cut, n, err)
	}
	checkRecords(t, l, 9, exp[3:])
}
