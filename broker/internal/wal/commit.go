package wal

import (
	"fmt"
	"log/slog"
	"time"
)

// AppendSync appends one record and, under SyncAlways, returns only once it
// is durable (group commit with every other concurrent caller). Under
// SyncInterval and SyncNever it is Append. When the append succeeded but the
// fsync failed it returns the offset and the error: the record must not be
// acknowledged.
func (l *Log) AppendSync(key, payload []byte, count uint32) (uint64, error) {
	off, err := l.Append(key, payload, count)
	if err != nil || l.opts.Fsync != SyncAlways {
		return off, err
	}
	return off, l.WaitDurable(off)
}

// WaitDurable blocks until the record at offset off has been fsynced,
// whatever the policy. Concurrent callers share one fsync: the first one in
// becomes the leader and fsyncs everything written so far; the others wait
// for its result. If the fsync fails every waiter not yet covered gets the
// error, and the error is sticky.
func (l *Log) WaitDurable(off uint64) error {
	l.smu.Lock()
	defer l.smu.Unlock()
	for {
		if l.durable > off {
			return nil
		}
		if l.serr != nil {
			return l.serr
		}
		if !l.syncing {
			if err := l.leadLocked(off); err != nil && l.durable <= off {
				return err
			}
			continue
		}
		l.scond.Wait()
	}
}

// leadLocked runs one fsync as leader. It is called and returns with smu
// held, but releases it during the fsync.
func (l *Log) leadLocked(off uint64) error {
	l.syncing = true
	l.smu.Unlock()
	target, err := l.syncActive(off)
	l.smu.Lock()
	l.syncing = false
	if err == nil && target > l.durable {
		l.durable = target
	}
	l.scond.Broadcast()
	return err
}

// syncActive fsyncs the active segment (sealed ones were fsynced when they
// were sealed) and returns the offset below which everything is durable.
// Errors other than an out-of-range offset are made sticky.
func (l *Log) syncActive(off uint64) (uint64, error) {
	l.mu.Lock()
	if l.err != nil {
		defer l.mu.Unlock()
		return 0, l.err
	}
	if len(l.segs) == 0 {
		l.mu.Unlock()
		return 0, ErrClosed
	}
	target := l.next
	if off >= target {
		l.mu.Unlock()
		return 0, fmt.Errorf("%w: offset %d not appended yet (next %d)", ErrOutOfRange, off, target)
	}
	s := l.active()
	s.acquire()
	l.mu.Unlock()

	start := time.Now()
	err := s.f.Sync()
	if l.opts.OnFsync != nil {
		l.opts.OnFsync(time.Since(start))
	}
	s.release()
	if err != nil {
		err = fmt.Errorf("wal: fsync %s: %w", s.path, err)
		l.mu.Lock()
		l.failLocked(err)
		err = l.err
		l.mu.Unlock()
		return 0, err
	}
	return target, nil
}

// markDurable records that every offset below target is fsynced.
func (l *Log) markDurable(target uint64) {
	l.smu.Lock()
	if target > l.durable {
		l.durable = target
		l.scond.Broadcast()
	}
	l.smu.Unlock()
}

// Sync fsyncs everything appended so far.
func (l *Log) Sync() error {
	l.mu.Lock()
	next := l.next
	l.mu.Unlock()
	if next == 0 {
		return nil
	}
	return l.WaitDurable(next - 1)
}

// Durable returns the offset below which every record is fsynced.
func (l *Log) Durable() uint64 {
	l.smu.Lock()
	defer l.smu.Unlock()
	return l.durable
}

// syncLoop is the SyncInterval goroutine; Close stops it and waits.
func (l *Log) syncLoop() {
	defer close(l.done)
	t := time.NewTicker(l.opts.FsyncInterval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			if err := l.Sync(); err != nil {
				l.log.Error("wal: interval fsync failed", slog.Any("err", err))
				return
			}
		}
	}
}
