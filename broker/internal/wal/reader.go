package wal

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
)

// Reader iterates records from an offset onwards. It holds a reference on
// the segment it is in, so retention and compaction never pull the file out
// from under it. A Reader is not safe for concurrent use; Close it.
type Reader struct {
	l    *Log
	seg  *segment
	sc   scanner
	from uint64
	next uint64 // offset after the last record seen: where damage is reported
	// entry is the offset of the unchecked index entry the scanner starts
	// at, checkEntry set until the first record confirms it.
	entry      uint64
	checkEntry bool
}

// ReadFrom returns a Reader positioned at the record that covers off (a
// batch record is returned whole), or the first record after off when off
// falls in a gap left by compaction. off == NextOffset gives a Reader at the
// end that sees records appended later.
func (l *Log) ReadFrom(off uint64) (*Reader, error) {
	s, entry, pos, err := l.seek(off)
	if err != nil {
		return nil, err
	}
	r := &Reader{l: l, seg: s, from: off, next: off, entry: entry, checkEntry: pos > 0 && s.unchecked}
	r.sc.reset(s.f, pos, s.size.Load())
	return r, nil
}

// entryWrong reports whether the first record read after a seek (h, or the
// error reading it) shows that the index entry the Reader started from
// does not point at its record; then it has distrusted the segment's index
// and moved the scanner to the segment's first record. A wrong entry that
// pointed at another record's header would otherwise skip records
// silently. Only entries Open did not check are checked, once per Reader.
func (r *Reader) entryWrong(h header, err error) bool {
	if !r.checkEntry {
		return false
	}
	r.checkEntry = false
	if err == nil && h.magic == Magic && h.offset == r.entry {
		return false
	}
	r.seg.distrustIndex(&r.l.opts, err)
	r.sc.reset(r.seg.f, 0, r.seg.size.Load())
	return true
}

// distrustIndex makes lookups in the segment start at its first record and
// removes its .idx, which the next Open rebuilds.
func (s *segment) distrustIndex(o *Options, cause error) {
	if !s.badIndex.CompareAndSwap(false, true) {
		return
	}
	o.Logger.Warn("wal: index entry does not match its segment; reading from the segment's start, rebuilt on the next open",
		slog.String("segment", s.path), slog.Any("cause", cause))
	if err := o.FS.Remove(indexPath(s.path)); err != nil && !errors.Is(err, os.ErrNotExist) {
		o.Logger.Warn("wal: removing a wrong index", slog.String("segment", s.path), slog.Any("err", err))
	}
}

// seek finds the segment for off and the index entry to scan from (the
// record's offset and position), and takes a reference on the segment.
func (l *Log) seek(off uint64) (*segment, uint64, int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.segs) == 0 {
		return nil, 0, 0, ErrClosed
	}
	if off < l.segs[0].base || off > l.next {
		return nil, 0, 0, fmt.Errorf("%w: %d not in [%d, %d]", ErrOutOfRange, off, l.segs[0].base, l.next)
	}
	i := len(l.segs) - 1
	for i > 0 && l.segs[i].base > off {
		i--
	}
	s := l.segs[i]
	s.acquire()
	if s.badIndex.Load() {
		return s, 0, 0, nil
	}
	entry, pos := s.idx.lookup(off)
	return s, entry, pos, nil
}

// advance moves to the segment after the current one, if there is one.
func (r *Reader) advance() bool {
	r.l.mu.Lock()
	var ns *segment
	for _, s := range r.l.segs {
		if s.base > r.seg.base {
			ns = s
			break
		}
	}
	if ns != nil {
		ns.acquire()
	}
	r.l.mu.Unlock()
	if ns == nil {
		return false
	}
	r.seg.release()
	r.seg = ns
	r.sc.reset(ns.f, 0, ns.size.Load())
	return true
}

// Next returns the next record. Key and Payload are views valid until the
// next call. At the end of the log it returns io.EOF; calling Next again
// later returns records appended since. A damaged record returns a
// *CorruptionError; it is never skipped.
func (r *Reader) Next() (Record, error) {
	if r.seg == nil {
		return Record{}, ErrClosed
	}
	for {
		r.sc.end = r.seg.size.Load()
		h, rec, pos, err := r.sc.next()
		if r.entryWrong(h, err) {
			continue
		}
		if err == io.EOF {
			if r.moreAfterEOF() {
				continue
			}
			return Record{}, io.EOF
		}
		if err != nil {
			return Record{}, r.corruption(h, pos, err)
		}
		r.next = h.offset + uint64(h.count)
		if r.next <= r.from {
			continue
		}
		k := rec[HeaderSize : HeaderSize+h.keyLen]
		p := rec[HeaderSize+h.keyLen : HeaderSize+h.keyLen+h.payLen]
		return Record{Offset: h.offset, Count: h.count, Timestamp: h.ts, Key: k, Payload: p}, nil
	}
}

// moreAfterEOF is called when the scanner reached its end: it reports
// whether there is more to read, moving to the next segment when the current
// one is sealed and consumed.
func (r *Reader) moreAfterEOF() bool {
	if r.sc.pos < r.seg.size.Load() {
		return true // appended since the scanner's end was set
	}
	if !r.seg.sealed.Load() {
		return false
	}
	if r.sc.pos < r.seg.size.Load() {
		return true // appended just before the seal
	}
	return r.advance()
}

func (r *Reader) corruption(h header, pos int64, err error) error {
	if errors.Is(err, ErrUnsupportedVersion) {
		return fmt.Errorf("%s at byte %d: %w", r.seg.path, pos, err)
	}
	off := h.offset
	if h.magic != Magic || off < r.next {
		off = r.next // the header itself is damaged: report the offset expected there
	}
	return &CorruptionError{Segment: r.seg.path, Offset: off, Pos: pos, Err: err}
}

// NextLocation is the zero-copy form of Next: it reads only the record's
// header (no checksum check) and returns where its key and payload lie in
// the segment file, for Sendfile. The Location is valid until the next call;
// do not Release it.
func (r *Reader) NextLocation() (Location, error) {
	if r.seg == nil {
		return Location{}, ErrClosed
	}
	for {
		r.sc.end = r.seg.size.Load()
		h, pos, err := r.sc.nextHeader()
		if r.entryWrong(h, err) {
			continue
		}
		if err == io.EOF {
			if r.moreAfterEOF() {
				continue
			}
			return Location{}, io.EOF
		}
		if err != nil {
			return Location{}, r.corruption(h, pos, err)
		}
		r.next = h.offset + uint64(h.count)
		if r.next <= r.from {
			continue
		}
		return r.seg.location(h, pos)
	}
}

// Close releases the reader's segment.
func (r *Reader) Close() error {
	if r.seg != nil {
		r.seg.release()
		r.seg = nil
	}
	return nil
}

// Location says where one record lies in its segment file, so its payload
// can be sent from the file to a socket by the kernel (Sendfile).
type Location struct {
	File        *os.File
	Segment     string // path of the .wal file
	Offset      uint64
	Count       uint32
	Timestamp   int64
	Pos         int64 // byte position of the record header
	KeySize     uint32
	PayloadSize uint32

	seg *segment // held reference when returned by Locate
}

// KeyPos is the byte position of the key in File.
func (loc Location) KeyPos() int64 { return loc.Pos + HeaderSize }

// PayloadPos is the byte position of the payload in File.
func (loc Location) PayloadPos() int64 { return loc.Pos + HeaderSize + int64(loc.KeySize) }

// Release gives back the segment reference taken by Locate. Call it once,
// after the last use of File.
func (loc *Location) Release() {
	if loc.seg != nil {
		loc.seg.release()
		loc.seg = nil
	}
}

func (s *segment) location(h header, pos int64) (Location, error) {
	f := osFile(s.f)
	if f == nil {
		return Location{}, ErrNotOSFile
	}
	return Location{
		File: f, Segment: s.path, Offset: h.offset, Count: h.count, Timestamp: h.ts,
		Pos: pos, KeySize: h.keyLen, PayloadSize: h.payLen,
	}, nil
}

// Locate finds the record covering off (or the first one after a gap left
// by compaction) and returns its file position without reading its body.
// The caller must Release the Location.
func (l *Log) Locate(off uint64) (Location, error) {
	r, err := l.ReadFrom(off)
	if err != nil {
		return Location{}, err
	}
	loc, err := r.NextLocation()
	if err != nil {
		r.Close()
		if errors.Is(err, io.EOF) {
			return Location{}, fmt.Errorf("%w: %d", ErrOutOfRange, off)
		}
		return Location{}, err
	}
	loc.seg, r.seg = r.seg, nil // the Location now holds the reference
	return loc, nil
}

// NextHeld is NextLocation whose Location holds its own reference on the
// segment: it stays valid (the file open) after the Reader moves on or is
// closed, until Release. It allocates nothing.
func (r *Reader) NextHeld() (Location, error) {
	loc, err := r.NextLocation()
	if err != nil {
		return loc, err
	}
	r.seg.acquire()
	loc.seg = r.seg
	return loc, nil
}
