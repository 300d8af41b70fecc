package wal

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCheckpointIsAConsistentCopy: a checkpoint opens as a log with the
// records the original had when it was taken and the same next offset;
// sealed segments are hard links, the active one a copy that later
// appends and removals of the original do not touch.
func TestCheckpointIsAConsistentCopy(t *testing.T) {
	l := openLog(t, Options{SegmentBytes: 1024})
	exp := appendN(t, l, 40, 100)
	if len(l.Segments()) < 3 {
		t.Fatalf("want several segments, have %d", len(l.Segments()))
	}
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := l.Checkpoint(dir); err != nil {
		t.Fatal(err)
	}
	segs := l.Segments()
	same := func(base uint64) bool {
		a, err := os.Stat(segPath(l.opts.Dir, base))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.Stat(filepath.Join(dir, segmentName(base)))
		if err != nil {
			t.Fatal(err)
		}
		return os.SameFile(a, b)
	}
	if !same(segs[0]) || same(segs[len(segs)-1]) {
		t.Fatal("want sealed segments hard-linked and the active one copied")
	}
	appendN(t, l, 10, 100) // after the checkpoint: not in it
	if _, err := l.RemoveBefore(segs[len(segs)-1], time.Time{}); err != nil {
		t.Fatal(err)
	}
	c := openLog(t, Options{Dir: dir, SegmentBytes: 1024})
	if c.NextOffset() != exp[len(exp)-1].off+1 {
		t.Fatalf("checkpoint ends at %d, want %d", c.NextOffset(), exp[len(exp)-1].off+1)
	}
	checkRecords(t, c, 0, exp)
	// The copy is a log of its own: appending to it leaves the original be.
	if _, err := c.Append([]byte("k"), []byte("v"), 1); err != nil {
		t.Fatal(err)
	}
	if got, want := l.NextOffset(), exp[len(exp)-1].off+11; got != want {
		t.Fatalf("original at %d, want %d", got, want)
	}
}
