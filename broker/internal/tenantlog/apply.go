package tenantlog

import (
	"encoding/binary"
	"fmt"

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
// hold what the snapshot covers (its own snapshot, at open). A snapshot
// from the leader that the store is behind is ErrBehind: catching a replica
// up by copying the store is not implemented.
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
