package wal

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
)

// CompactStats says what a Compact did.
type CompactStats struct {
	SegmentsRewritten int
	SegmentsRemoved   int // left empty by compaction
	RecordsDropped    int
	BytesBefore       int64
	BytesAfter        int64
}

// Compact rewrites the sealed segments of a keyed log (the retained store:
// key = topic, empty payload = tombstone) so that only the newest record of
// each key remains. Offsets are preserved, leaving gaps. Records without a
// key are always kept. A tombstone in a sealed segment is dropped too: the
// older records it deletes are in the same or older sealed segments, which
// are rewritten first, oldest first, so a crash between two rewrites never
// resurrects a deleted key. The active segment is read (its keys supersede
// older ones) but never rewritten.
//
// Each segment is rewritten crash-safely: new file, fsync, old index
// removed, rename over the old file, directory fsync, new index.
func (l *Log) Compact() (CompactStats, error) {
	l.maint.Lock()
	defer l.maint.Unlock()
	var st CompactStats

	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return st, ErrClosed
	}
	segs := append([]*segment(nil), l.segs...)
	for _, s := range segs {
		s.acquire()
	}
	activeEnd := l.active().size.Load()
	l.mu.Unlock()
	defer func() {
		for _, s := range segs {
			s.release()
		}
	}()
	sealed, active := segs[:len(segs)-1], segs[len(segs)-1]
	if len(sealed) == 0 {
		return st, nil
	}

	newest := make(map[string]uint64)
	var sc scanner
	for _, s := range segs {
		end := s.size.Load()
		if s == active {
			end = activeEnd
		}
		sc.reset(s.f, 0, end)
		for {
			h, rec, pos, err := sc.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return st, &CorruptionError{Segment: s.path, Offset: h.offset, Pos: pos, Err: err}
			}
			if h.keyLen > 0 {
				newest[string(rec[HeaderSize:HeaderSize+h.keyLen])] = h.offset
			}
		}
	}

	for _, s := range sealed {
		st.BytesBefore += s.size.Load()
		ns, dropped, err := l.rewrite(s, newest, &sc)
		if err != nil {
			return st, err
		}
		st.RecordsDropped += dropped
		if dropped == 0 {
			st.BytesAfter += s.size.Load()
			continue
		}
		l.swapSegment(s, ns)
		if ns == nil {
			st.SegmentsRemoved++
		} else {
			st.SegmentsRewritten++
			st.BytesAfter += ns.size.Load()
		}
	}
	l.log.Info("wal: compacted", slog.Int("rewritten", st.SegmentsRewritten),
		slog.Int("removed", st.SegmentsRemoved), slog.Int("records_dropped", st.RecordsDropped),
		slog.Int64("bytes_before", st.BytesBefore), slog.Int64("bytes_after", st.BytesAfter))
	return st, nil
}

// keep says whether a record survives compaction.
func keep(h header, rec []byte, newest map[string]uint64) bool {
	if h.keyLen == 0 {
		return true
	}
	if h.payLen == 0 {
		return false // tombstone: see Compact
	}
	return newest[string(rec[HeaderSize:HeaderSize+h.keyLen])] == h.offset
}

// rewrite copies the surviving records of s into a new segment. It returns
// (nil, 0, nil) when nothing would be dropped, and a nil segment with
// dropped > 0 when nothing survives (the files are then removed).
func (l *Log) rewrite(s *segment, newest map[string]uint64, sc *scanner) (*segment, int, error) {
	size := s.size.Load()
	dropped := 0
	sc.reset(s.f, 0, size)
	for {
		h, rec, pos, err := sc.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, 0, &CorruptionError{Segment: s.path, Offset: h.offset, Pos: pos, Err: err}
		}
		if !keep(h, rec, newest) {
			dropped++
		}
	}
	if dropped == 0 {
		return nil, 0, nil
	}
	fsys := l.opts.FS
	tmp := s.path + ".tmp"
	f, err := fsys.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o644)
	if err != nil {
		return nil, 0, fmt.Errorf("wal: compact: %w", err)
	}
	ns := newSegment(s.base, s.path, f)
	ns.sealed.Store(true)
	out := make([]byte, 0, scanBufSize)
	var written int64
	flush := func() error {
		_, err := f.Write(out)
		out = out[:0]
		return err
	}
	fail := func(err error) (*segment, int, error) {
		ns.release()
		_ = fsys.Remove(tmp)
		return nil, 0, fmt.Errorf("wal: compact %s: %w", s.path, err)
	}
	sc.reset(s.f, 0, size)
	for {
		h, rec, _, err := sc.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(err)
		}
		if !keep(h, rec, newest) {
			continue
		}
		ns.track(h, written, l.opts.IndexInterval)
		written += int64(len(rec))
		if len(out)+len(rec) > cap(out) {
			if err := flush(); err != nil {
				return fail(err)
			}
		}
		if len(rec) > cap(out) {
			if _, err := f.Write(rec); err != nil {
				return fail(err)
			}
			continue
		}
		out = append(out, rec...)
	}
	if err := flush(); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	ns.size.Store(written)
	idxPath := indexPath(s.path)
	if err := fsys.Remove(idxPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fail(err)
	}
	if written == 0 {
		ns.release()
		_ = fsys.Remove(tmp)
		if err := fsys.Remove(s.path); err != nil {
			return nil, 0, fmt.Errorf("wal: compact: %w", err)
		}
		return nil, dropped, syncDir(fsys, l.opts.Dir)
	}
	if err := fsys.Rename(tmp, s.path); err != nil {
		return fail(err)
	}
	if err := syncDir(fsys, l.opts.Dir); err != nil {
		ns.release()
		return nil, 0, fmt.Errorf("wal: compact: sync dir: %w", err)
	}
	if err := writeIndex(fsys, idxPath, ns.idx.data); err != nil {
		l.log.Warn("wal: compact: writing index (rebuilt on next open)", slog.String("segment", s.path), slog.Any("err", err))
	}
	return ns, dropped, nil
}

// swapSegment replaces old by ns (or removes it when ns is nil).
func (l *Log) swapSegment(old, ns *segment) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, s := range l.segs {
		if s != old {
			continue
		}
		if ns == nil {
			l.segs = append(l.segs[:i:i], l.segs[i+1:]...)
		} else {
			l.segs[i] = ns
		}
		old.release()
		return
	}
	if ns != nil {
		ns.release() // the log was closed meanwhile
	}
}
