package wal

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
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
	n := l.retainedFromLocked(ret, now)
	drop := slices.Clone(l.segs[:n])
	l.segs = l.segs[n:]
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

// retainedFromLocked is how many segments, from the front, retention ret
// deletes at now (unix ns): while the log is larger than ret.Bytes or the
// front segment's newest record is older than ret.Age. Never the active
// segment. l.mu is held.
func (l *Log) retainedFromLocked(ret Retention, now int64) int {
	var total int64
	for _, s := range l.segs {
		total += s.size.Load()
	}
	n := 0
	for ; n < len(l.segs)-1; n++ {
		s := l.segs[n]
		overBytes := ret.Bytes > 0 && total > ret.Bytes
		tooOld := ret.Age > 0 && now-s.lastTS > int64(ret.Age)
		if !overBytes && !tooOld {
			break
		}
		total -= s.size.Load()
	}
	return n
}

// RetentionCut returns the offset below which retention ret, applied at
// now, deletes whole segments: the base offset of the oldest segment that
// would remain (FirstOffset when nothing would go). It deletes nothing:
// an owner that must first let go of what it holds below the cut (the
// shard's sessions) then calls RemoveBefore(cut, time.Time{}), which
// deletes exactly those segments (appends only add segments at the end).
// The rule is ApplyRetention's with ret instead of Options.Retention, so
// the owner may change it while the log is open.
func (l *Log) RetentionCut(ret Retention, now time.Time) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.segs) == 0 {
		return l.next
	}
	if ret.Bytes <= 0 && ret.Age <= 0 {
		return l.segs[0].base
	}
	return l.segs[l.retainedFromLocked(ret, now.UnixNano())].base
}
