package wal

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// ApplyRetention deletes whole segments from the front of the log while the
// log is larger than Retention.Bytes or the segment's newest record is older
// than Retention.Age. The active segment is never deleted. Readers already
// inside a deleted segment finish it (the file stays open until they leave).
func (l *Log) ApplyRetention() (removed int, err error) {
	l.maint.Lock()
	defer l.maint.Unlock()
	ret := l.opts.Retention
	if ret.Bytes == 0 && ret.Age == 0 {
		return 0, nil
	}
	now := l.opts.Now().UnixNano()

	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return 0, ErrClosed
	}
	var total int64
	for _, s := range l.segs {
		total += s.size.Load()
	}
	var drop []*segment
	for len(l.segs) > 1 {
		s := l.segs[0]
		overBytes := ret.Bytes > 0 && total > ret.Bytes
		tooOld := ret.Age > 0 && now-s.lastTS > int64(ret.Age)
		if !overBytes && !tooOld {
			break
		}
		drop = append(drop, s)
		total -= s.size.Load()
		l.segs = l.segs[1:]
	}
	l.mu.Unlock()

	var errs []error
	for _, s := range drop {
		l.log.Info("wal: retention removes segment", slog.String("segment", s.path),
			slog.Uint64("base", s.base), slog.Int64("bytes", s.size.Load()))
		if err := l.removeSegmentFiles(s); err != nil {
			errs = append(errs, fmt.Errorf("wal: retention: %w", err))
		}
		s.release()
	}
	if len(drop) > 0 {
		if err := syncDir(l.opts.FS, l.opts.Dir); err != nil {
			errs = append(errs, fmt.Errorf("wal: retention: sync dir: %w", err))
		}
	}
	return len(drop), errors.Join(errs...)
}

// RemoveBefore deletes whole sealed segments from the front of the log
// whose every record lies below off (the owner's consumers, the shard's
// sessions, need nothing below off any more) and, unless keepSince is
// zero, whose newest record is older than keepSince (history kept for
// replay). The active segment is never deleted. Readers inside a deleted
// segment finish it.
func (l *Log) RemoveBefore(off uint64, keepSince time.Time) (removed int, err error) {
	l.maint.Lock()
	defer l.maint.Unlock()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return 0, ErrClosed
	}
	var drop []*segment
	for len(l.segs) > 1 && l.segs[0].next <= off && (keepSince.IsZero() || l.segs[0].lastTS < keepSince.UnixNano()) {
		drop = append(drop, l.segs[0])
		l.segs = l.segs[1:]
	}
	l.mu.Unlock()
	var errs []error
	for _, s := range drop {
		if err := l.removeSegmentFiles(s); err != nil {
			errs = append(errs, fmt.Errorf("wal: remove before %d: %w", off, err))
		}
		s.release()
	}
	if len(drop) > 0 {
		if err := syncDir(l.opts.FS, l.opts.Dir); err != nil {
			errs = append(errs, fmt.Errorf("wal: remove before: sync dir: %w", err))
		}
	}
	return len(drop), errors.Join(errs...)
}
