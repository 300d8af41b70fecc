package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"syscall"
)

// index is a sparse offset → byte position table (see doc.go). For sealed
// segments loaded on Open, data is a read-only mmap of the .idx file; for
// segments built in this process it is heap memory.
type index struct {
	data   []byte
	mapped bool
}

func (x *index) len() int { return len(x.data) / IndexEntrySize }

func (x *index) entry(i int) (off uint64, pos int64) {
	e := x.data[i*IndexEntrySize:]
	return binary.BigEndian.Uint64(e), int64(binary.BigEndian.Uint32(e[8:]))
}

// add appends one entry. Callers reserve capacity up front, so steady-state
// appends do not allocate.
func (x *index) add(off uint64, pos int64) {
	var e [IndexEntrySize]byte
	binary.BigEndian.PutUint64(e[:], off)
	binary.BigEndian.PutUint32(e[8:], uint32(pos))
	x.data = append(x.data, e[:]...)
}

// lookup returns the greatest entry whose offset is <= target: the
// record's offset and byte position, or (0, 0) when target precedes every
// entry.
func (x *index) lookup(target uint64) (uint64, int64) {
	n := x.len()
	i := sort.Search(n, func(i int) bool {
		off, _ := x.entry(i)
		return off > target
	})
	if i == 0 {
		return 0, 0
	}
	return x.entry(i - 1)
}

func (x *index) release() {
	if x.mapped && x.data != nil {
		_ = syscall.Munmap(x.data)
	}
	x.data, x.mapped = nil, false
}

// errIndex marks an index that does not match its segment; Open rebuilds it.
var errIndex = errors.New("wal: index inconsistent with segment")

// checkShape validates what can be checked without reading the segment.
func (x *index) checkShape(base uint64, walSize int64) error {
	if len(x.data)%IndexEntrySize != 0 {
		return fmt.Errorf("%w: size %d is not a multiple of %d", errIndex, len(x.data), IndexEntrySize)
	}
	if walSize > 0 && x.len() == 0 {
		return fmt.Errorf("%w: empty index for non-empty segment", errIndex)
	}
	var prevOff uint64
	var prevPos int64
	for i := range x.len() {
		off, pos := x.entry(i)
		switch {
		case i == 0 && (pos != 0 || off < base):
			return fmt.Errorf("%w: first entry (%d, %d)", errIndex, off, pos)
		case i > 0 && (off <= prevOff || pos <= prevPos):
			return fmt.Errorf("%w: entry %d not increasing", errIndex, i)
		case pos+RecordOverhead > walSize:
			return fmt.Errorf("%w: entry %d points past the segment", errIndex, i)
		}
		prevOff, prevPos = off, pos
	}
	return nil
}

// loadIndex maps path read-only. A missing or empty file returns an empty
// index and the error from open/stat.
func loadIndex(fsys FS, path string) (index, error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return index{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return index{}, err
	}
	size := st.Size()
	if size == 0 {
		return index{}, nil
	}
	if of := osFile(f); of != nil {
		data, err := syscall.Mmap(int(of.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
		if err != nil {
			return index{}, fmt.Errorf("wal: mmap %s: %w", path, err)
		}
		return index{data: data, mapped: true}, nil
	}
	data := make([]byte, size)
	if _, err := f.ReadAt(data, 0); err != nil {
		return index{}, err
	}
	return index{data: data}, nil
}

// writeIndex writes data to path crash-safely: temp file, fsync, rename.
func writeIndex(fsys FS, path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := fsys.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(tmp, path)
	}
	if err != nil {
		_ = fsys.Remove(tmp)
	}
	return err
}

// verify checks that every entry points at a record header with the magic
// and the entry's offset. Open runs it on a sealed segment's first and last
// entries only (the entries between are checked as reads use them,
// Reader.checkEntry). Entries are read in order, as many per read as
// fit in buf (len(buf) >= HeaderSize): the headers an index of a segment
// of small records points at are 4 KiB apart, and one pread per entry
// made opening a large log take hundreds of thousands of syscalls. A read
// spans from one entry's header to the last header that fits, so entries
// far apart still cost one small read each. The caller has run checkShape.
func (x *index) verify(f io.ReaderAt, buf []byte) error {
	n := x.len()
	for i := 0; i < n; {
		_, start := x.entry(i)
		j := i + 1 // entries i..j-1 are read together
		for j < n {
			_, pos := x.entry(j)
			if pos+HeaderSize-start > int64(len(buf)) {
				break
			}
			j++
		}
		_, last := x.entry(j - 1)
		want := last + HeaderSize - start
		if m, err := f.ReadAt(buf[:want], start); int64(m) < want {
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("%w: entry %d: %v", errIndex, i, err)
		}
		for ; i < j; i++ {
			off, pos := x.entry(i)
			if h := decodeHeader(buf[pos-start:]); h.magic != Magic || h.offset != off {
				return fmt.Errorf("%w: entry %d does not point at offset %d", errIndex, i, off)
			}
		}
	}
	return nil
}
