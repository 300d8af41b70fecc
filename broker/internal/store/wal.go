package store

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"berth.dev/broker/internal/wal"
)

// Names of the three logs inside a tenant directory. Never change.
const (
	dirMessages = "messages"
	dirRetained = "retained"
	dirSessions = "sessions"
)

// TenantDir is the directory of tenantID's logs under root. The tenant id
// never becomes part of a path: it is hashed (hex of the first 16 bytes
// of its SHA-256), so no id can traverse out of root.
func TenantDir(root, tenantID string) string {
	sum := sha256.Sum256([]byte(tenantID))
	return filepath.Join(root, hex.EncodeToString(sum[:16]))
}

// OpenTenant opens the WAL store of tenantID under root (a node's -data):
// o.Dir is replaced by TenantDir(root, tenantID).
func OpenTenant(root, tenantID string, o WALOptions) (*WAL, error) {
	o.Dir = TenantDir(root, tenantID)
	return OpenWAL(o)
}

// WALOptions configure a WAL store.
type WALOptions struct {
	// Dir is the tenant's directory (see TenantDir); created if missing.
	Dir string
	// Fsync is the policy of all three logs; FsyncInterval its period
	// under wal.SyncInterval.
	Fsync         wal.Policy
	FsyncInterval time.Duration
	// SegmentBytes is the segment size of the message log (the retained
	// and session logs use a quarter of it). 0: the wal default.
	SegmentBytes int64
	Logger       *slog.Logger
	// OnFsync is passed to the three logs (wal.Options.OnFsync).
	OnFsync func(time.Duration)
	// FS is the three logs' filesystem (wal.Options.FS); nil: the OS's.
	FS wal.FS
}

// WAL is a Store on write-ahead logs: retained messages and sessions are
// keyed records (key = topic, client id; an empty payload is a tombstone)
// compacted to the newest record per key. It also opens the tenant's
// message log, which the shard appends to (Messages).
type WAL struct {
	opts     WALOptions
	retained *wal.Log
	sessions *wal.Log
	messages *wal.Log

	mu     sync.Mutex // serializes encoding into buf
	buf    []byte
	closed bool
	repl   Replicator // set by Replicate: keyed records go through it
}

var _ Store = (*WAL)(nil)

// OpenWAL opens (or creates) the logs in o.Dir and compacts the keyed ones.
func OpenWAL(o WALOptions) (*WAL, error) {
	if o.Dir == "" {
		return nil, errors.New("store: WALOptions.Dir is required")
	}
	if err := recoverSwap(o.Dir); err != nil {
		return nil, fmt.Errorf("store: recovering an interrupted install: %w", err)
	}
	open := func(name string, seg int64) (*wal.Log, error) {
		return wal.Open(wal.Options{
			Dir: filepath.Join(o.Dir, name), Fsync: o.Fsync, FsyncInterval: o.FsyncInterval,
			SegmentBytes: seg, Logger: o.Logger, OnFsync: o.OnFsync, FS: o.FS,
		})
	}
	w := &WAL{opts: o}
	var err error
	if w.messages, err = open(dirMessages, o.SegmentBytes); err != nil {
		return nil, err
	}
	keyed := o.SegmentBytes / 4
	if w.retained, err = open(dirRetained, keyed); err != nil {
		_ = w.messages.Close()
		return nil, err
	}
	if w.sessions, err = open(dirSessions, keyed); err != nil {
		_ = w.messages.Close()
		_ = w.retained.Close()
		return nil, err
	}
	if err := w.Compact(); err != nil && o.Logger != nil {
		o.Logger.Warn("store: compaction on open", "err", err)
	}
	return w, nil
}

// Messages returns the tenant's message log. The store closes it.
func (w *WAL) Messages() *wal.Log { return w.messages }

// Size is the bytes of the tenant's logs on disk (messages, retained
// messages, sessions): its stored_bytes usage and what retention bounds.
func (w *WAL) Size() int64 {
	return w.messages.Size() + w.retained.Size() + w.sessions.Size()
}

// Compact rolls the keyed logs and compacts them: the newest record per
// key remains, tombstones and what they delete go.
func (w *WAL) Compact() error {
	var errs []error
	for _, l := range []*wal.Log{w.retained, w.sessions} {
		if l.NextOffset() == l.FirstOffset() {
			continue
		}
		if err := l.Roll(); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := l.Compact(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// put appends one keyed record, durable before it returns under
// wal.SyncAlways.
func (w *WAL) put(l *wal.Log, key string, encode func([]byte) []byte) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	w.buf = w.buf[:0]
	if encode != nil {
		w.buf = encode(w.buf)
	}
	if r := w.repl; r != nil {
		rec := append([]byte(nil), w.buf...)
		w.mu.Unlock()
		return replicateOne(r, w.keyedLog(l), key, rec)
	}
	off, err := l.Append([]byte(key), w.buf, 1)
	w.mu.Unlock()
	if err != nil {
		return fmt.Errorf("store: append: %w", err)
	}
	if w.opts.Fsync == wal.SyncAlways {
		return l.WaitDurable(off)
	}
	return nil
}

// keyedLog names l for replication.
func (w *WAL) keyedLog(l *wal.Log) byte {
	if l == w.retained {
		return LogRetained
	}
	return LogSessions
}

// SetRetained implements Store. The record payload is the metadata
// length (4 bytes), the metadata, then the application payload.
func (w *WAL) SetRetained(m *Message) error {
	var created, expires int64
	if !m.Created.IsZero() {
		created = m.Created.UnixNano()
	}
	if !m.ExpiresAt.IsZero() {
		expires = m.ExpiresAt.UnixNano()
	}
	return w.put(w.retained, m.Topic, func(b []byte) []byte {
		b = append(b, 0, 0, 0, 0)
		b = AppendMeta(b, []byte(m.Topic), m.QoS, true, created, expires, &m.Props)
		binary.BigEndian.PutUint32(b, uint32(len(b)-4))
		return append(b, m.Payload...)
	})
}

// DeleteRetained implements Store with a tombstone.
func (w *WAL) DeleteRetained(topic string) error { return w.put(w.retained, topic, nil) }

// SaveSession implements Store.
func (w *WAL) SaveSession(s *Session) error {
	return w.put(w.sessions, s.ClientID, func(b []byte) []byte { return appendSession(b, s) })
}

// DeleteSession implements Store with a tombstone.
func (w *WAL) DeleteSession(clientID string) error { return w.put(w.sessions, clientID, nil) }

// Retained implements Store: it replays the retained log.
func (w *WAL) Retained(fn func(*Message) bool) error {
	latest := make(map[string]*Message)
	err := w.scan(w.retained, func(key string, payload []byte) error {
		if len(payload) == 0 {
			delete(latest, key)
			return nil
		}
		if len(payload) < 4 {
			return fmt.Errorf("%w: retained %q", ErrBadRecord, key)
		}
		n := int(binary.BigEndian.Uint32(payload))
		if 4+n > len(payload) {
			return fmt.Errorf("%w: retained %q", ErrBadRecord, key)
		}
		var meta Meta
		if _, err := DecodeMeta(payload[4:4+n], &meta); err != nil {
			return err
		}
		// The record is a view into the reader's buffer: copy it once.
		own := append([]byte(nil), payload[4:]...)
		_, _ = DecodeMeta(own[:n], &meta)
		m := &Message{Topic: key, Payload: own[n:], QoS: meta.QoS, Props: meta.Props}
		if meta.Created != 0 {
			m.Created = timeFromNanos(meta.Created)
		}
		if meta.Expires != 0 {
			m.ExpiresAt = timeFromNanos(meta.Expires)
		}
		latest[key] = m
		return nil
	})
	if err != nil {
		return err
	}
	for _, m := range latest {
		if !fn(m) {
			break
		}
	}
	return nil
}

// Sessions implements Store: it replays the session log.
func (w *WAL) Sessions(fn func(*Session) bool) error {
	latest := make(map[string]*Session)
	err := w.scan(w.sessions, func(key string, payload []byte) error {
		if len(payload) == 0 {
			delete(latest, key)
			return nil
		}
		s, err := decodeSession(key, payload)
		if err != nil {
			return fmt.Errorf("session %q: %w", key, err)
		}
		latest[key] = s
		return nil
	})
	if err != nil {
		return err
	}
	for _, s := range latest {
		if !fn(s) {
			break
		}
	}
	return nil
}

// scan calls fn for every record of l, oldest first.
func (w *WAL) scan(l *wal.Log, fn func(key string, payload []byte) error) error {
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if closed {
		return ErrClosed
	}
	r, err := l.ReadFrom(l.FirstOffset())
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer r.Close()
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		if err := fn(string(rec.Key), rec.Payload); err != nil {
			return err
		}
	}
}

// Close implements Store: it fsyncs and closes the three logs.
func (w *WAL) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.mu.Unlock()
	return errors.Join(w.messages.Close(), w.retained.Close(), w.sessions.Close())
}

func timeFromNanos(n int64) time.Time { return time.Unix(0, n) }

// SaveSessions stores several sessions with one fsync (under
// wal.SyncAlways) for all of them: the shard's periodic cursor
// checkpoint.
func (w *WAL) SaveSessions(list []*Session) error {
	if len(list) == 0 {
		return nil
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	if r := w.repl; r != nil {
		recs := make([]KeyedRecord, len(list))
		for i, s := range list {
			recs[i] = KeyedRecord{Log: LogSessions, Key: s.ClientID, Payload: appendSession(nil, s)}
		}
		w.mu.Unlock()
		return r.ReplicateKeyed(recs)
	}
	var last uint64
	for _, s := range list {
		w.buf = appendSession(w.buf[:0], s)
		off, err := w.sessions.Append([]byte(s.ClientID), w.buf, 1)
		if err != nil {
			w.mu.Unlock()
			return fmt.Errorf("store: append: %w", err)
		}
		last = off
	}
	w.mu.Unlock()
	if w.opts.Fsync == wal.SyncAlways {
		return w.sessions.WaitDurable(last)
	}
	return nil
}
