package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
)

// TestTornTailEveryByte cuts the last record at every byte position: Open
// must truncate back to the previous record, and the log must accept
// appends afterwards.
func TestTornTailEveryByte(t *testing.T) {
	src := t.TempDir()
	l := openLog(t, Options{Dir: src})
	exp := appendN(t, l, 3, 40)
	prevEnd := fileSize(t, segPath(src, 0))
	last, err := l.Append([]byte("last-key"), []byte("the record that will be torn"), 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	fullEnd := fileSize(t, segPath(src, 0))
	for cut := prevEnd + 1; cut < fullEnd; cut++ {
		dir := copyDir(t, src)
		if err := os.Truncate(segPath(dir, 0), cut); err != nil {
			t.Fatal(err)
		}
		l, err := Open(Options{Dir: dir, Logger: testLogger(t)})
		if err != nil {
			t.Fatalf("cut at %d: Open: %v", cut, err)
		}
		if got := l.NextOffset(); got != last {
			t.Fatalf("cut at %d: NextOffset = %d, want %d", cut, got, last)
		}
		checkRecords(t, l, 0, exp)
		if got := fileSize(t, segPath(dir, 0)); got != prevEnd {
			t.Fatalf("cut at %d: file is %d bytes after recovery, want %d", cut, got, prevEnd)
		}
		off, err := l.Append([]byte("after"), []byte("recovery"), 1)
		if err != nil || off != last {
			t.Fatalf("cut at %d: Append after recovery = %d, %v", cut, off, err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBitFlips: damage in the last record is a torn tail (truncated); damage
// followed by valid records, or anywhere in a sealed segment, is corruption.
func TestBitFlips(t *testing.T) {
	src := t.TempDir()
	l := openLog(t, Options{Dir: src, SegmentBytes: 1000, IndexInterval: 1})
	exp := appendN(t, l, 12, 60) // 99-byte records (key-0..key-9) / 100-byte: 10 per segment
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	segs := []uint64{0, exp[10].off}
	if _, err := os.Stat(segPath(src, segs[1])); err != nil {
		t.Fatalf("expected a second segment at %d: %v", segs[1], err)
	}
	tailSize := fileSize(t, segPath(src, segs[1]))
	recSize := tailSize / 2                                // key-10, key-11
	sealedRec := int64(RecordOverhead + len("key-0") + 60) // key-0 .. key-9

	t.Run("last record of the tail is truncated", func(t *testing.T) {
		dir := copyDir(t, src)
		flipBit(t, segPath(dir, segs[1]), tailSize-recSize+HeaderSize+3)
		l := openLog(t, Options{Dir: dir})
		if got := l.NextOffset(); got != exp[11].off {
			t.Fatalf("NextOffset = %d, want %d", got, exp[11].off)
		}
		checkRecords(t, l, 0, exp[:11])
	})
	t.Run("bad magic at the tail is truncated", func(t *testing.T) {
		dir := copyDir(t, src)
		f, err := os.OpenFile(segPath(dir, segs[1]), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt(make([]byte, recSize), tailSize-recSize) // zero-filled block after a crash
		f.Close()
		l := openLog(t, Options{Dir: dir})
		checkRecords(t, l, 0, exp[:11])
	})
	t.Run("damage followed by a valid record in the tail", func(t *testing.T) {
		dir := copyDir(t, src)
		flipBit(t, segPath(dir, segs[1]), HeaderSize+2)
		_, err := Open(Options{Dir: dir, Logger: testLogger(t)})
		var ce *CorruptionError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || !errors.Is(err, ErrChecksum) {
			t.Fatalf("Open = %v, want a *CorruptionError (checksum)", err)
		}
		if ce.Offset != exp[10].off || ce.Pos != 0 {
			t.Fatalf("corruption reported at offset %d byte %d, want offset %d byte 0", ce.Offset, ce.Pos, exp[10].off)
		}
	})
	t.Run("middle of a sealed segment, index intact", func(t *testing.T) {
		dir := copyDir(t, src)
		flipBit(t, segPath(dir, 0), 4*sealedRec+HeaderSize+int64(len("key-4"))+5) // payload of offset 4
		l := openLog(t, Options{Dir: dir})
		got, err := readAll(t, l, 0)
		var ce *CorruptionError
		if !errors.As(err, &ce) || ce.Offset != 4 {
			t.Fatalf("read = %v, want *CorruptionError at offset 4", err)
		}
		if len(got) != 4 {
			t.Fatalf("read %d good records before the damage, want 4", len(got))
		}
		if err := l.Verify(); !errors.As(err, &ce) || ce.Offset != 4 {
			t.Fatalf("Verify = %v, want *CorruptionError at offset 4", err)
		}
	})
	t.Run("bad magic in a sealed segment", func(t *testing.T) {
		// Every record is indexed, but Open checks only the first and the
		// last entries: a read through the damaged one finds it (and
		// reads from the segment's start, which reports the damage),
		// whether it starts before it or at it.
		dir := copyDir(t, src)
		flipBit(t, segPath(dir, 0), 6*sealedRec) // magic of offset 6
		l := openLog(t, Options{Dir: dir})
		for _, from := range []uint64{0, 6} {
			got, err := readAll(t, l, from)
			var ce *CorruptionError
			if !errors.As(err, &ce) || ce.Offset != 6 || ce.Pos != 6*sealedRec || !errors.Is(err, ErrBadMagic) {
				t.Fatalf("read from %d = %v, want *CorruptionError (bad magic) at offset 6", from, err)
			}
			if len(got) != 6-int(from) {
				t.Fatalf("read from %d: %d good records before the damage", from, len(got))
			}
		}
		var ce *CorruptionError
		if err := l.Verify(); !errors.As(err, &ce) || ce.Offset != 6 {
			t.Fatalf("Verify = %v, want *CorruptionError at offset 6", err)
		}
	})
	t.Run("bad magic in a sealed segment, sparse index", func(t *testing.T) {
		dir := copyDir(t, src)
		os.Remove(filepath.Join(dir, "00000000000000000000.idx"))
		l := openLog(t, Options{Dir: dir, IndexInterval: 300}) // rebuilds: entries at offsets 0, 4, 8
		l.Close()
		flipBit(t, segPath(dir, 0), 6*sealedRec)
		l = openLog(t, Options{Dir: dir, IndexInterval: 300})
		got, err := readAll(t, l, 2)
		var ce *CorruptionError
		if !errors.As(err, &ce) || ce.Offset != 6 || ce.Pos != 6*sealedRec || !errors.Is(err, ErrBadMagic) {
			t.Fatalf("read = %v, want *CorruptionError (bad magic) at offset 6", err)
		}
		if len(got) != 4 {
			t.Fatalf("read %d good records before the damage, want 4", len(got))
		}
	})
	t.Run("middle of a sealed segment, index missing", func(t *testing.T) {
		dir := copyDir(t, src)
		flipBit(t, segPath(dir, 0), 4*sealedRec+HeaderSize+1)
		os.Remove(filepath.Join(dir, "00000000000000000000.idx"))
		_, err := Open(Options{Dir: dir, Logger: testLogger(t)})
		var ce *CorruptionError
		if !errors.As(err, &ce) || ce.Offset != 4 || ce.Pos != 4*sealedRec {
			t.Fatalf("Open = %v, want *CorruptionError at offset 4 byte %d", err, 4*sealedRec)
		}
	})
	t.Run("sealed segment cut short", func(t *testing.T) {
		dir := copyDir(t, src)
		os.Truncate(segPath(dir, 0), 9*sealedRec+10)
		os.Remove(filepath.Join(dir, "00000000000000000000.idx"))
		_, err := Open(Options{Dir: dir, Logger: testLogger(t)})
		if !errors.Is(err, ErrCorrupt) || !errors.Is(err, ErrTornRecord) {
			t.Fatalf("Open = %v, want corruption (torn record in a sealed segment)", err)
		}
	})
}

// TestWrongMagicRejected: a record with another format version's magic and a
// valid checksum is rejected at once, never truncated away.
func TestWrongMagicRejected(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, Options{Dir: dir})
	appendN(t, l, 2, 10)
	l.Close()
	path := segPath(dir, 0)
	b, _ := os.ReadFile(path)
	b[0] = Magic + 1
	n := HeaderSize + len("key-0") + 10
	binary.BigEndian.PutUint32(b[n:], crc32.Checksum(b[:n], castagnoli))
	os.WriteFile(path, b, 0o644)
	_, err := Open(Options{Dir: dir, Logger: testLogger(t)})
	if !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("Open = %v, want ErrUnsupportedVersion", err)
	}
	if got := fileSize(t, path); got != int64(len(b)) {
		t.Fatalf("the segment was changed: %d bytes, want %d", got, len(b))
	}
}

// TestIndexRebuilt damages a sealed segment's index in several ways: Open
// rebuilds it and every lookup still lands on the right record.
func TestIndexRebuilt(t *testing.T) {
	src := t.TempDir()
	l := openLog(t, Options{Dir: src, SegmentBytes: 4000, IndexInterval: 200})
	exp := appendN(t, l, 60, 80)
	l.Close()
	idx := filepath.Join(src, "00000000000000000000.idx")
	orig, err := os.ReadFile(idx)
	if err != nil {
		t.Fatal(err)
	}
	if len(orig) < 3*IndexEntrySize {
		t.Fatalf("index has only %d bytes", len(orig))
	}
	wrongPos := bytes.Clone(orig)
	binary.BigEndian.PutUint32(wrongPos[IndexEntrySize+8:], binary.BigEndian.Uint32(wrongPos[IndexEntrySize+8:])+99)
	wrongOff := bytes.Clone(orig)
	binary.BigEndian.PutUint64(wrongOff[2*IndexEntrySize:], 1)
	tests := []struct {
		name   string
		damage func(path string) error
	}{
		{"deleted", os.Remove},
		{"empty", func(p string) error { return os.WriteFile(p, nil, 0o644) }},
		{"short", func(p string) error { return os.WriteFile(p, orig[:len(orig)-5], 0o644) }},
		{"missing last entries", func(p string) error { return os.WriteFile(p, orig[:IndexEntrySize], 0o644) }},
		{"entry points at the wrong byte", func(p string) error { return os.WriteFile(p, wrongPos, 0o644) }},
		{"entry names the wrong offset", func(p string) error { return os.WriteFile(p, wrongOff, 0o644) }},
		{"garbage", func(p string) error { return os.WriteFile(p, bytes.Repeat([]byte{0xFF}, len(orig)), 0o644) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyDir(t, src)
			if err := tt.damage(filepath.Join(dir, "00000000000000000000.idx")); err != nil {
				t.Fatal(err)
			}
			l := openLog(t, Options{Dir: dir, SegmentBytes: 4000, IndexInterval: 200})
			for from := range uint64(len(exp)) { // through every entry
				checkRecords(t, l, from, exp[from:])
			}
			l.Close()
			// An entry Open does not check (one between the first and the
			// last) is found by the first read through it: the index goes,
			// and the next Open rebuilds it.
			openLog(t, Options{Dir: dir, SegmentBytes: 4000, IndexInterval: 200}).Close()
			got, err := os.ReadFile(filepath.Join(dir, "00000000000000000000.idx"))
			if tt.name != "missing last entries" && (err != nil || !bytes.Equal(got, orig)) {
				t.Fatalf("rebuilt index differs from the original (%v)", err)
			}
		})
	}
}
