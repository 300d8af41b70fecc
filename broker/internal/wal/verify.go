package wal

import "io"

// Verify reads every record of every segment and checks its checksum and
// offset order. It returns the first *CorruptionError, or nil.
func (l *Log) Verify() error {
	l.mu.Lock()
	segs := append([]*segment(nil), l.segs...)
	for _, s := range segs {
		s.acquire()
	}
	l.mu.Unlock()
	defer func() {
		for _, s := range segs {
			s.release()
		}
	}()
	var sc scanner
	for _, s := range segs {
		sc.reset(s.f, 0, s.size.Load())
		var next uint64
		for {
			h, _, pos, err := sc.next()
			if err == io.EOF {
				break
			}
			if err == nil && (h.offset < next || h.count == 0) {
				err = ErrCorrupt
			}
			if err != nil {
				return &CorruptionError{Segment: s.path, Offset: next, Pos: pos, Err: err}
			}
			next = h.offset + uint64(h.count)
		}
	}
	return nil
}
