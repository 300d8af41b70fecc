package wal

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
)

// segment is one .wal file and its index. The Log holds one reference;
// readers and Locate hold more, so a segment removed by retention or
// replaced by compaction stays readable until its last user releases it.
type segment struct {
	base   uint64
	path   string // .wal path
	f      File
	size   atomic.Int64 // bytes of whole records; final once sealed
	sealed atomic.Bool
	refs   atomic.Int32

	// Guarded by Log.mu while the segment is active; fixed once sealed.
	idx         index
	next        uint64 // offset after the last record (base when empty)
	firstTS     int64
	lastTS      int64
	lastIndexed int64 // position of the last indexed record, -1 if none

	// unchecked: the index was loaded from its .idx with only its first
	// and last entries checked; a Reader checks each other entry it
	// starts from (Reader.checkEntry). Fixed once sealed. badIndex is set
	// when one was wrong: lookups then start at the segment's first record.
	unchecked bool
	badIndex  atomic.Bool
}

func segmentName(base uint64) string {
	return fmt.Sprintf("%0*d%s", baseDigits, base, SegmentSuffix)
}

func indexPath(walPath string) string {
	return strings.TrimSuffix(walPath, SegmentSuffix) + IndexSuffix
}

// parseSegmentName returns the base offset of a "NNN...N.wal" name.
func parseSegmentName(name string) (uint64, bool) {
	digits, ok := strings.CutSuffix(name, SegmentSuffix)
	if !ok || len(digits) != baseDigits {
		return 0, false
	}
	base, err := strconv.ParseUint(digits, 10, 64)
	return base, err == nil
}

func newSegment(base uint64, path string, f File) *segment {
	s := &segment{base: base, path: path, f: f, next: base, lastIndexed: -1}
	s.refs.Store(1)
	return s
}

func (s *segment) acquire() { s.refs.Add(1) }

func (s *segment) release() {
	if s.refs.Add(-1) == 0 {
		_ = s.f.Close()
		s.idx.release()
	}
}

// track records one record at pos in the segment's bookkeeping and indexes
// it when IndexInterval bytes have passed since the last indexed record.
func (s *segment) track(h header, pos, interval int64) {
	if s.lastIndexed < 0 {
		s.firstTS = h.ts
	}
	if s.lastIndexed < 0 || pos-s.lastIndexed >= interval {
		s.idx.add(h.offset, pos)
		s.lastIndexed = pos
	}
	s.next = h.offset + uint64(h.count)
	s.lastTS = h.ts
}

// reserveIndex gives the heap index room for a full segment so that appends
// do not grow it.
func (s *segment) reserveIndex(segBytes, interval int64) {
	n := min(segBytes/interval+2, 1<<16)
	s.idx = index{data: make([]byte, 0, n*IndexEntrySize)}
}

// scanResult is what scanning a segment found.
type scanResult struct {
	valid int64 // bytes of whole valid records from position 0
	bad   error // why scanning stopped before end (nil at a clean end)
}

// scanAll reads every record from pos to end, verifying checksums and offset
// order, tracking each into s. It stops at the first bad record.
func (s *segment) scanAll(sc *scanner, pos, end, interval int64) scanResult {
	sc.reset(s.f, pos, end)
	for {
		h, _, at, err := sc.next()
		if err == io.EOF {
			return scanResult{valid: at}
		}
		if err == nil && (h.offset < s.next || h.count == 0) {
			err = fmt.Errorf("%w: offset %d count %d after offset %d", ErrCorrupt, h.offset, h.count, s.next)
		}
		if err != nil {
			return scanResult{valid: at, bad: err}
		}
		s.track(h, at, interval)
	}
}

func (s *segment) corruption(pos int64, err error) error {
	if errors.Is(err, ErrUnsupportedVersion) {
		return fmt.Errorf("%s at byte %d: %w", s.path, pos, err)
	}
	return &CorruptionError{Segment: s.path, Offset: s.next, Pos: pos, Err: err}
}

// openSealed opens a sealed (not tail) segment: its index is mapped and
// its ends checked against the .wal, or rebuilt by a full verified scan.
func openSealed(o *Options, base uint64, path string) (*segment, error) {
	f, err := o.FS.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	s := newSegment(base, path, f)
	st, err := f.Stat()
	if err != nil {
		s.release()
		return nil, err
	}
	size := st.Size()
	s.size.Store(size)
	s.sealed.Store(true)
	var sc scanner
	if err := s.useIndex(o, &sc, size); err == nil {
		return s, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		o.Logger.Warn("wal: rebuilding index", slog.String("segment", path), slog.Any("err", err))
	}
	s.idx.release()
	s.next, s.lastIndexed, s.firstTS, s.lastTS = base, -1, 0, 0
	res := s.scanAll(&sc, 0, size, o.IndexInterval)
	if res.bad != nil {
		err := s.corruption(res.valid, res.bad)
		s.release()
		return nil, err
	}
	if err := writeIndex(o.FS, indexPath(path), s.idx.data); err != nil {
		o.Logger.Warn("wal: writing rebuilt index", slog.String("segment", path), slog.Any("err", err))
	}
	return s, nil
}

// useIndex maps the .idx, checks its shape and that its first and last
// entries point at the record headers they name, then scans from the last
// entry to the end. The entries between are not read here: checking them
// all reads every sealed segment whole (with the default IndexInterval an
// entry every 4 KiB), so opening a large log on a cold or busy disk took
// as long as reading it. A Reader checks the entry it starts from instead
// (Reader.checkEntry).
func (s *segment) useIndex(o *Options, sc *scanner, size int64) error {
	idx, err := loadIndex(o.FS, indexPath(s.path))
	if err != nil {
		return err
	}
	s.idx = idx
	if err := idx.checkShape(s.base, size); err != nil {
		return err
	}
	if idx.len() == 0 {
		return fmt.Errorf("%w: empty", errIndex)
	}
	var buf [HeaderSize]byte
	n := idx.len()
	ends := index{data: idx.data[:IndexEntrySize]}
	if n > 1 {
		ends.data = append(ends.data[:IndexEntrySize:IndexEntrySize], idx.data[(n-1)*IndexEntrySize:]...)
	}
	if err := ends.verify(s.f, buf[:]); err != nil {
		return err
	}
	s.unchecked = n > 2
	lastOff, lastPos := idx.entry(n - 1)
	first := s.idx
	s.idx = index{} // scanAll must not append to a mapped index
	s.next = lastOff
	res := s.scanAll(sc, lastPos, size, 1<<62)
	s.idx = first
	if res.bad != nil || res.valid != size {
		return fmt.Errorf("%w: records after the last entry: %v", errIndex, res.bad)
	}
	s.lastIndexed = lastPos
	var fh [HeaderSize]byte
	if _, err := s.f.ReadAt(fh[:], 0); err == nil {
		s.firstTS = decodeHeader(fh[:]).ts
	}
	return nil
}

// openTail opens the last segment for appending, scans it and truncates a
// torn tail. A bad record followed by a valid one is corruption.
func openTail(o *Options, base uint64, path string) (*segment, error) {
	f, err := o.FS.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		return nil, err
	}
	s := newSegment(base, path, f)
	st, err := f.Stat()
	if err != nil {
		s.release()
		return nil, err
	}
	size := st.Size()
	s.reserveIndex(max(o.SegmentBytes, size), o.IndexInterval)
	var sc scanner
	res := s.scanAll(&sc, 0, size, o.IndexInterval)
	if res.bad != nil {
		if errors.Is(res.bad, ErrUnsupportedVersion) || validRecordAfter(&sc, s.f, res.valid, size) {
			err := s.corruption(res.valid, res.bad)
			s.release()
			return nil, err
		}
		o.Logger.Warn("wal: truncating torn tail",
			slog.String("segment", path), slog.Int64("at", res.valid),
			slog.Int64("dropped_bytes", size-res.valid), slog.Uint64("next_offset", s.next),
			slog.Any("cause", res.bad))
		if err := f.Truncate(res.valid); err != nil {
			s.release()
			return nil, fmt.Errorf("wal: truncate torn tail of %s: %w", path, err)
		}
	}
	s.size.Store(res.valid)
	if err := f.Sync(); err != nil {
		s.release()
		return nil, fmt.Errorf("wal: fsync %s: %w", path, err)
	}
	return s, nil
}

// validRecordAfter reports whether the damaged record at pos has a readable
// length and a whole valid record follows it: then the damage is not a torn
// tail but corruption in the middle.
func validRecordAfter(sc *scanner, f File, pos, end int64) bool {
	var hb [HeaderSize]byte
	if end-pos < HeaderSize {
		return false
	}
	if _, err := f.ReadAt(hb[:], pos); err != nil {
		return false
	}
	next := pos + decodeHeader(hb[:]).size()
	if next <= pos || next >= end {
		return false
	}
	sc.reset(f, next, end)
	_, _, _, err := sc.next()
	return err == nil
}

func createSegment(o *Options, base uint64) (*segment, error) {
	path := filepath.Join(o.Dir, segmentName(base))
	f, err := o.FS.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("wal: create segment: %w", err)
	}
	if err := syncDir(o.FS, o.Dir); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("wal: sync dir: %w", err)
	}
	s := newSegment(base, path, f)
	s.reserveIndex(o.SegmentBytes, o.IndexInterval)
	return s, nil
}
