package tenantlog

import (
	"encoding/binary"
	"fmt"
	"time"

	"berth.dev/broker/internal/wal"
)

// Apply implements replica.StateMachine: it appends the entry's records to
// the store here, in order. A message-log record below the log's next
// offset is already there (the group applies again after a restart) and
// is skipped; one above it is a gap, which no committed log can make.
func (l *Log) Apply(index uint64, data []byte) error {
	if len(data) == 0 || data[0] != entryVersion {
		return fmt.Errorf("%w: entry %d: version", ErrCorrupt, index)
	}
	d := data[1:]
	next := l.msgs.NextOffset() // of the log with the batch appended
	batch := l.scratch[:0]
	defer func() { clear(batch); l.scratch = batch[:0] }()
	for len(d) > 0 {
		kind := d[0]
		d = d[1:]
		var off uint64
		var count uint32
		if kind == kindRemove {
			if len(d) < 16 {
				return fmt.Errorf("%w: entry %d: short record", ErrCorrupt, index)
			}
			off, since := binary.BigEndian.Uint64(d), int64(binary.BigEndian.Uint64(d[8:]))
			d = d[16:]
			if err := l.flush(batch); err != nil {
				return err
			}
			batch = batch[:0]
			l.remove(off, since)
			continue
		}
		if kind == kindMessage {
			if len(d) < 12 {
				return fmt.Errorf("%w: entry %d: short record", ErrCorrupt, index)
			}
			off, count = binary.BigEndian.Uint64(d), binary.BigEndian.Uint32(d[8:])
			d = d[12:]
		}
		key, rest, ok := take32(d)
		if !ok {
			return fmt.Errorf("%w: entry %d: short key", ErrCorrupt, index)
		}
		payload, rest, ok := take32(rest)
		if !ok {
			return fmt.Errorf("%w: entry %d: short payload", ErrCorrupt, index)
		}
		d = rest
		switch kind {
		case kindMessage:
			switch {
			case off < next:
				continue // applied before this restart
			case off > next:
				return fmt.Errorf("%w: entry %d: message offset %d, log at %d", ErrCorrupt, index, off, next)
			}
			batch = append(batch, wal.Entry{Key: key, Payload: payload, Count: count})
			next += uint64(count)
		case kindRetained, kindSessions:
			if err := l.flush(batch); err != nil {
				return err
			}
			batch = batch[:0]
			if err := l.st.ApplyKeyed(kind-1, key, payload); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: entry %d: record kind %d", ErrCorrupt, index, kind)
		}
	}
	return l.flush(batch)
}

// flush appends the batch of message-log records with one write and moves
// Durable.
func (l *Log) flush(batch []wal.Entry) error {
	if len(batch) > 0 {
		if _, err := l.msgs.AppendBatch(batch); err != nil {
			return fmt.Errorf("tenantlog: apply: %w", err)
		}
	}
	next := l.msgs.NextOffset()
	l.mu.Lock()
	if next > l.durable {
		l.durable = next
		l.cond.Broadcast()
	}
	l.mu.Unlock()
	return nil
}

// remove applies a replicated segment removal. A failure to delete is
// logged, not fatal: the next removal tries again, and the state (what a
// reader finds at an offset it may read) does not depend on it.
func (l *Log) remove(off uint64, since int64) {
	var keepSince time.Time
	if since != 0 {
		keepSince = time.Unix(0, since)
	}
	n, err := l.msgs.RemoveBefore(off, keepSince)
	if err != nil {
		l.opts.Logger.Warn("tenant log: removing message-log segments", "below", off, "err", err)
	}
	if n > 0 {
		l.opts.Logger.Debug("tenant log: message-log segments removed", "segments", n, "below", off)
	}
}

func take32(b []byte) (v, rest []byte, ok bool) {
	if len(b) < 4 {
		return nil, nil, false
	}
	n := binary.BigEndian.Uint32(b)
	if uint64(len(b)-4) < uint64(n) {
		return nil, nil, false
	}
	return b[4 : 4+n], b[4+n:], true
}

// Snapshot implements replica.StateMachine. The store is the state: it is
// fsynced (the group deletes the raft log below the snapshot next) and its
// keyed logs compacted; the snapshot says how far the message log goes.
func (l *Log) Snapshot() ([]byte, error) {
	if err := l.st.Sync(); err != nil {
		return nil, fmt.Errorf("tenantlog: snapshot: %w", err)
	}
	if err := l.st.Compact(); err != nil {
		l.opts.Logger.Warn("tenant log: compacting keyed logs", "err", err)
	}
	return binary.BigEndian.AppendUint64(nil, l.msgs.NextOffset()), nil
}

// Restore implements replica.StateMachine: the store here must already
// hold what the snapshot covers (its own snapshot at open, or the leader's
// checkpoint Install just put in place); else ErrBehind.
func (l *Log) Restore(data []byte) error {
	if len(data) == 0 {
		return nil // the group's first configuration: nothing yet
	}
	if len(data) != snapshotLength {
		return fmt.Errorf("%w: snapshot of %d bytes", ErrCorrupt, len(data))
	}
	if want, have := binary.BigEndian.Uint64(data), l.msgs.NextOffset(); have < want {
		return fmt.Errorf("%w: message log at %d, snapshot at %d", ErrBehind, have, want)
	}
	return nil
}

// Checkpoint implements replica.FileState: a copy of the store as it is
// (the group's loop calls it between two entries, so no record is half
// applied): sealed segments hard-linked, active ones copied.
func (l *Log) Checkpoint(dir string) error {
	return l.st.Checkpoint(dir)
}

// Install implements replica.FileState: the store is replaced by the
// leader's checkpoint in dir (store.WAL.Install: closed, swapped,
// reopened), which must hold what the snapshot covers. A node that is
// sent a snapshot does not lead.
func (l *Log) Install(dir string, data []byte) error {
	l.Stop()
	st, err := l.st.Install(dir)
	if err != nil {
		return fmt.Errorf("tenantlog: install: %w", err)
	}
	st.Replicate(l)
	l.mu.Lock()
	l.st, l.msgs = st, st.Messages()
	l.durable = l.msgs.NextOffset()
	l.mu.Unlock()
	return l.Restore(data)
}
