package wal

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// Log is a segmented write-ahead log. All methods are safe for concurrent
// use. Appends are serialized; fsyncs are group-committed (see commit.go).
type Log struct {
	opts Options
	log  *slog.Logger

	mu     sync.Mutex
	segs   []*segment // by base offset; the last one is active
	next   uint64     // offset the next record gets
	buf    []byte     // encode buffer, reused by every append
	err    error      // sticky: set by a failed fsync or unrecoverable write
	closed bool

	smu     sync.Mutex // guards the group-commit state below
	scond   *sync.Cond
	durable uint64 // every offset below it is fsynced
	syncing bool   // a leader is in fsync
	serr    error  // sticky fsync error (or ErrClosed after Close)

	maint sync.Mutex // serializes Compact and ApplyRetention

	stop chan struct{}
	done chan struct{}
}

// Entry is one record of an AppendBatch.
type Entry struct {
	Key     []byte
	Payload []byte
	Count   uint32
}

// Open opens or creates the log in o.Dir and recovers it: sealed segments'
// indexes are checked or rebuilt, the tail segment is scanned and a torn
// tail truncated.
func Open(o Options) (*Log, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	if err := o.FS.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	l := &Log{opts: o, log: o.Logger}
	l.scond = sync.NewCond(&l.smu)
	if err := l.recover(); err != nil {
		for _, s := range l.segs {
			s.release()
		}
		return nil, err
	}
	l.durable = l.next
	if o.Fsync == SyncInterval {
		l.stop, l.done = make(chan struct{}), make(chan struct{})
		go l.syncLoop()
	}
	return l, nil
}

func (l *Log) recover() error {
	o := &l.opts
	entries, err := o.FS.ReadDir(o.Dir)
	if err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	var bases []uint64
	for _, e := range entries {
		name := e.Name()
		if strings.HasSuffix(name, ".tmp") {
			l.log.Info("wal: removing leftover temp file", slog.String("file", name))
			if err := o.FS.Remove(filepath.Join(o.Dir, name)); err != nil {
				return fmt.Errorf("wal: %w", err)
			}
			continue
		}
		if base, ok := parseSegmentName(name); ok {
			bases = append(bases, base)
		}
	}
	slices.Sort(bases)
	for i, base := range bases {
		path := filepath.Join(o.Dir, segmentName(base))
		var s *segment
		if i == len(bases)-1 {
			_ = o.FS.Remove(indexPath(path)) // the tail's index is rebuilt by the scan
			s, err = openTail(o, base, path)
		} else {
			s, err = openSealed(o, base, path)
		}
		if err != nil {
			return err
		}
		if n := len(l.segs); n > 0 && l.segs[n-1].next > base {
			s.release()
			return &CorruptionError{Segment: path, Offset: base, Err: fmt.Errorf("%w: segment overlaps the previous one (ends at %d)", ErrCorrupt, l.segs[n-1].next)}
		}
		l.segs = append(l.segs, s)
		l.next = s.next
	}
	if len(l.segs) == 0 {
		s, err := createSegment(o, 0)
		if err != nil {
			return err
		}
		l.segs = append(l.segs, s)
	}
	return nil
}

func (l *Log) active() *segment { return l.segs[len(l.segs)-1] }

func (l *Log) checkLimits(key, payload []byte, count uint32) error {
	switch {
	case len(key) > l.opts.MaxKeySize:
		return ErrKeyTooLarge
	case len(payload) > l.opts.MaxPayloadSize:
		return ErrPayloadTooLarge
	case count == 0 || count > l.opts.MaxBatchCount:
		return ErrBadCount
	}
	return nil
}

func (l *Log) writableLocked() error {
	if l.closed {
		return ErrClosed
	}
	return l.err
}

// Append writes one record covering count offsets and returns its first
// offset. It does not wait for fsync: use AppendSync or WaitDurable. The
// steady-state path allocates nothing.
func (l *Log) Append(key, payload []byte, count uint32) (uint64, error) {
	if err := l.checkLimits(key, payload, count); err != nil {
		return 0, err
	}
	size := RecordOverhead + len(key) + len(payload)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writableLocked(); err != nil {
		return 0, err
	}
	now := l.opts.Now().UnixNano()
	if err := l.maybeRollLocked(int64(size), now); err != nil {
		return 0, err
	}
	buf := l.bufLocked(size)
	off := l.next
	encodeRecord(buf, now, off, key, payload, count)
	s := l.active()
	pos := s.size.Load()
	if err := l.writeLocked(s, buf, pos); err != nil {
		return 0, err
	}
	s.track(header{ts: now, offset: off, count: count}, pos, l.opts.IndexInterval)
	l.next = s.next
	s.size.Store(pos + int64(size))
	return off, nil
}

// AppendBatch writes several records with one write and returns the first
// offset; record i gets the offset after record i-1's last.
func (l *Log) AppendBatch(entries []Entry) (uint64, error) {
	if len(entries) == 0 {
		return 0, ErrEmptyBatch
	}
	size := 0
	for _, e := range entries {
		if err := l.checkLimits(e.Key, e.Payload, e.Count); err != nil {
			return 0, err
		}
		size += RecordOverhead + len(e.Key) + len(e.Payload)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writableLocked(); err != nil {
		return 0, err
	}
	now := l.opts.Now().UnixNano()
	if err := l.maybeRollLocked(int64(size), now); err != nil {
		return 0, err
	}
	buf := l.bufLocked(size)
	first, off, n := l.next, l.next, 0
	for _, e := range entries {
		m := RecordOverhead + len(e.Key) + len(e.Payload)
		encodeRecord(buf[n:n+m], now, off, e.Key, e.Payload, e.Count)
		n += m
		off += uint64(e.Count)
	}
	s := l.active()
	pos := s.size.Load()
	if err := l.writeLocked(s, buf, pos); err != nil {
		return 0, err
	}
	off, n = first, 0
	for _, e := range entries {
		s.track(header{ts: now, offset: off, count: e.Count}, pos+int64(n), l.opts.IndexInterval)
		n += RecordOverhead + len(e.Key) + len(e.Payload)
		off += uint64(e.Count)
	}
	l.next = s.next
	s.size.Store(pos + int64(size))
	return first, nil
}

func (l *Log) bufLocked(size int) []byte {
	if cap(l.buf) < size {
		l.buf = make([]byte, size)
	}
	return l.buf[:size]
}

// writeLocked writes buf at the end of s (at pos). On failure the partial
// write is cut off again; if even that fails the log refuses further
// appends.
func (l *Log) writeLocked(s *segment, buf []byte, pos int64) error {
	n, err := s.f.Write(buf)
	if err == nil && n != len(buf) {
		err = io.ErrShortWrite
	}
	if err == nil {
		return nil
	}
	err = fmt.Errorf("wal: append to %s: %w", s.path, err)
	if terr := s.f.Truncate(pos); terr != nil {
		l.failLocked(fmt.Errorf("%w; truncating the partial record failed: %v", err, terr))
		return l.err
	}
	return err
}

// failLocked makes err sticky: no more appends, and every waiter whose
// record is not yet durable gets it.
func (l *Log) failLocked(err error) {
	if l.err == nil {
		l.err = err
		l.log.Error("wal: log failed, refusing appends", slog.Any("err", err))
	}
	l.smu.Lock()
	if l.serr == nil {
		l.serr = err
	}
	l.scond.Broadcast()
	l.smu.Unlock()
}

func (l *Log) maybeRollLocked(size, now int64) error {
	s := l.active()
	cur := s.size.Load()
	if cur == 0 {
		return nil
	}
	tooBig := cur+size > l.opts.SegmentBytes
	tooOld := l.opts.SegmentAge > 0 && now-s.firstTS >= int64(l.opts.SegmentAge)
	if !tooBig && !tooOld {
		return nil
	}
	return l.rollLocked()
}

// rollLocked seals the active segment (fsync, write its index) and starts a
// new one at l.next.
func (l *Log) rollLocked() error {
	s := l.active()
	if err := s.f.Sync(); err != nil {
		l.failLocked(fmt.Errorf("wal: fsync %s: %w", s.path, err))
		return l.err
	}
	if err := writeIndex(l.opts.FS, indexPath(s.path), s.idx.data); err != nil {
		l.log.Warn("wal: writing index (rebuilt on next open)", slog.String("segment", s.path), slog.Any("err", err))
	} else if m, err := loadIndex(l.opts.FS, indexPath(s.path)); err == nil && m.len() == s.idx.len() {
		s.idx = m // serve lookups from the mapped file; the heap copy is freed
	} else {
		m.release()
	}
	s.sealed.Store(true)
	l.markDurable(l.next)
	ns, err := createSegment(&l.opts, l.next)
	if err != nil {
		l.failLocked(err)
		return l.err
	}
	l.segs = append(l.segs, ns)
	return nil
}

// Roll seals the active segment now, if it holds any record.
func (l *Log) Roll() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writableLocked(); err != nil {
		return err
	}
	if l.active().size.Load() == 0 {
		return nil
	}
	return l.rollLocked()
}

// FirstOffset is the base offset of the oldest segment.
func (l *Log) FirstOffset() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.segs) == 0 {
		return l.next
	}
	return l.segs[0].base
}

// NextOffset is the offset the next appended record will get.
func (l *Log) NextOffset() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next
}

// Size is the total size in bytes of all segments.
func (l *Log) Size() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for _, s := range l.segs {
		n += s.size.Load()
	}
	return n
}

// Segments returns the base offsets of the segments, oldest first.
func (l *Log) Segments() []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]uint64, len(l.segs))
	for i, s := range l.segs {
		out[i] = s.base
	}
	return out
}

// Close stops the background fsync, fsyncs what was written and closes the
// files. It is idempotent; the first call returns the fsync error, if any.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	if l.stop != nil {
		close(l.stop)
		<-l.done
	}
	err := l.Sync()
	l.smu.Lock()
	for l.syncing {
		l.scond.Wait()
	}
	if l.serr == nil {
		l.serr = ErrClosed
	}
	l.scond.Broadcast()
	l.smu.Unlock()
	l.mu.Lock()
	for _, s := range l.segs {
		s.release()
	}
	l.segs = nil
	l.mu.Unlock()
	if errors.Is(err, ErrClosed) {
		err = nil
	}
	return err
}

// removeSegmentFiles unlinks a segment's files; open handles stay usable.
func (l *Log) removeSegmentFiles(s *segment) error {
	err := l.opts.FS.Remove(s.path)
	if ierr := l.opts.FS.Remove(indexPath(s.path)); ierr != nil && !errors.Is(ierr, os.ErrNotExist) && err == nil {
		err = ierr
	}
	return err
}
