package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// countingReaderAt counts ReadAt calls.
type countingReaderAt struct {
	f     *os.File
	reads atomic.Int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	c.reads.Add(1)
	return c.f.ReadAt(p, off)
}

// TestIndexVerifyChunks checks index.verify with read buffers from one
// header to the whole segment: a good index passes with one read per
// buffer-full of entries, and a wrong offset or position in any entry is
// found wherever it falls in a read.
func TestIndexVerifyChunks(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, Options{Dir: dir, SegmentBytes: 8000, IndexInterval: 200, Fsync: SyncNever})
	appendN(t, l, 60, 80)
	if err := l.Roll(); err != nil { // seals segment 0, writing its index
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(filepath.Join(dir, "00000000000000000000.idx"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(segPath(dir, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := len(orig) / IndexEntrySize
	if n < 10 {
		t.Fatalf("only %d index entries", n)
	}
	for _, bufSize := range []int{HeaderSize, 500, 3000, 1 << 20} {
		r := &countingReaderAt{f: f}
		good := index{data: orig}
		if err := good.verify(r, make([]byte, bufSize)); err != nil {
			t.Fatalf("buffer %d: good index: %v", bufSize, err)
		}
		reads := r.reads.Load()
		t.Logf("buffer %d: %d entries verified in %d reads", bufSize, n, reads)
		switch {
		case bufSize == HeaderSize && reads != int64(n):
			t.Errorf("buffer of one header: %d reads, want one per entry (%d)", reads, n)
		case bufSize == 1<<20 && reads != 1:
			t.Errorf("buffer larger than the segment: %d reads, want 1", reads)
		case reads < 1 || reads > int64(n):
			t.Errorf("buffer %d: %d reads for %d entries", bufSize, reads, n)
		}
		for k := range n {
			for _, field := range []string{"offset", "position"} {
				bad := index{data: append([]byte(nil), orig...)}
				e := bad.data[k*IndexEntrySize:]
				if field == "offset" {
					binary.BigEndian.PutUint64(e, binary.BigEndian.Uint64(e)+1)
				} else {
					binary.BigEndian.PutUint32(e[8:], binary.BigEndian.Uint32(e[8:])+1)
				}
				err := bad.verify(&countingReaderAt{f: f}, make([]byte, bufSize))
				if !errors.Is(err, errIndex) {
					t.Fatalf("buffer %d: entry %d with a wrong %s: err = %v, want errIndex", bufSize, k, field, err)
				}
			}
		}
	}
}

// TestOpenVerifiesIndexInFewReads opens a log of sealed 1 MiB segments of
// small records: checking their indexes (one entry per 4 KiB) takes a few
// reads per segment, not one per entry.
func TestOpenVerifiesIndexInFewReads(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, Options{Dir: dir, SegmentBytes: 1 << 20, Fsync: SyncNever})
	exp := appendN(t, l, 30000, 100)
	if err := l.Roll(); err != nil { // an empty tail: every segment with data is sealed
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var sealed, indexEntries int
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), IndexSuffix) {
			sealed++
			indexEntries += int(fileSize(t, filepath.Join(dir, e.Name()))) / IndexEntrySize
		}
	}
	if sealed < 3 {
		t.Fatalf("only %d sealed segments", sealed)
	}
	fsys := newFaultFS()
	l2 := openLog(t, Options{Dir: dir, SegmentBytes: 1 << 20, FS: fsys})
	reads := fsys.reads.Load()
	t.Logf("open: %d sealed segments, %d index entries, %d reads of .wal files", sealed, indexEntries, reads)
	// Per sealed segment: the entries (one read: the segment is 1 MiB), the
	// records after the last entry, the first record's timestamp.
	if max := int64(4 * sealed); reads > max {
		t.Fatalf("open read .wal files %d times, want at most %d (%d index entries)", reads, max, indexEntries)
	}
	for _, from := range []uint64{0, 7777, 15000, 29999} {
		checkRecords(t, l2, from, exp[from:])
	}
}

// TestOpenReadsLittleOfSealedSegments opens a log of sealed 1 MiB segments
// of small records: Open reads a few headers and the records after each
// segment's last index entry, not the segments whole (it read every byte of
// them when it checked every index entry, one per 4 KiB).
func TestOpenReadsLittleOfSealedSegments(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, Options{Dir: dir, SegmentBytes: 1 << 20, Fsync: SyncNever})
	exp := appendN(t, l, 30000, 100)
	if err := l.Roll(); err != nil {
		t.Fatal(err)
	}
	size := l.Size()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	sealed := 0
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), IndexSuffix) {
			sealed++
		}
	}
	fsys := newFaultFS()
	l2 := openLog(t, Options{Dir: dir, SegmentBytes: 1 << 20, FS: fsys})
	read := fsys.read.Load()
	t.Logf("open: %d sealed segments, %d bytes in the log, %d bytes of .wal files read in %d reads", sealed, size, read, fsys.reads.Load())
	if limit := int64(sealed) * 16 << 10; read > limit {
		t.Fatalf("open read %d bytes of .wal files, want at most %d (16 KiB per sealed segment; the log is %d bytes)", read, limit, size)
	}
	for _, from := range []uint64{0, 7777, 15000, 29999} {
		checkRecords(t, l2, from, exp[from:])
	}
}

// TestWrongIndexEntryFoundOnRead damages an index entry Open does not
// check so that it points at the next record's header, which would skip a
// record without a word: a Reader (Next and Locate) starting from it finds
// out, reads from the segment's start instead and removes the index, and
// the next Open rebuilds it.
func TestWrongIndexEntryFoundOnRead(t *testing.T) {
	src := t.TempDir()
	o := Options{Dir: src, SegmentBytes: 8000, IndexInterval: 200, Fsync: SyncNever}
	l := openLog(t, o)
	exp := appendN(t, l, 60, 80)
	if err := l.Roll(); err != nil {
		t.Fatal(err)
	}
	idxPath := filepath.Join(src, "00000000000000000000.idx")
	orig, err := os.ReadFile(idxPath)
	if err != nil {
		t.Fatal(err)
	}
	x := index{data: orig}
	k := x.len() / 2
	off, pos := x.entry(k)
	_, nextPos := x.entry(k + 1)
	loc, err := l.Locate(off + 1) // the record after the entry's
	if err != nil {
		t.Fatal(err)
	}
	loc.Release()
	if loc.Pos <= pos || loc.Pos >= nextPos {
		t.Fatalf("record %d at byte %d is not between entries %d (byte %d) and %d (byte %d)", off+1, loc.Pos, k, pos, k+1, nextPos)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	damaged := bytes.Clone(orig)
	binary.BigEndian.PutUint32(damaged[k*IndexEntrySize+8:], uint32(loc.Pos))

	for _, via := range []string{"Next", "Locate"} {
		t.Run(via, func(t *testing.T) {
			dir := copyDir(t, src)
			p := filepath.Join(dir, "00000000000000000000.idx")
			if err := os.WriteFile(p, damaged, 0o644); err != nil {
				t.Fatal(err)
			}
			o := o
			o.Dir = dir
			l := openLog(t, o)
			if via == "Locate" {
				loc, err := l.Locate(off)
				if err != nil {
					t.Fatal(err)
				}
				loc.Release()
				if loc.Offset != off {
					t.Fatalf("Locate(%d) found record %d", off, loc.Offset)
				}
			}
			checkRecords(t, l, off, exp[off:])
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the wrong index is still there (%v)", err)
			}
			for _, from := range []uint64{0, off - 1, off + 1, 59} {
				checkRecords(t, l, from, exp[from:])
			}
			l.Close()
			openLog(t, o).Close()
			if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, orig) {
				t.Fatalf("the index rebuilt by the next open differs from the original (%v)", err)
			}
		})
	}
}
