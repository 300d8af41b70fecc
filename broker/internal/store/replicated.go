package store

import (
	"fmt"

	"berth.dev/broker/internal/wal"
)

// Keyed logs as replication names them (KeyedRecord.Log). Never change:
// they are in replicated entries on disk.
const (
	LogRetained byte = 1
	LogSessions byte = 2
)

// KeyedRecord is one record of a keyed log: key = topic or client id, an
// empty payload is a tombstone.
type KeyedRecord struct {
	Log     byte // LogRetained or LogSessions
	Key     string
	Payload []byte // owned by the record
}

// Replicator takes the keyed records of a replicated store (see
// WAL.Replicate). It returns once they are committed by a quorum and
// applied on this node (ApplyKeyed), or with the reason they may not be.
type Replicator interface {
	ReplicateKeyed(recs []KeyedRecord) error
}

// Replicate makes w a replicated store: from now on SetRetained,
// DeleteRetained, SaveSession(s) and DeleteSession append nothing
// themselves but hand their records to r, whose apply loop appends them on
// every replica with ApplyKeyed. nil makes w local again. Reads are
// unchanged.
func (w *WAL) Replicate(r Replicator) {
	w.mu.Lock()
	w.repl = r
	w.mu.Unlock()
}

// ApplyKeyed appends a committed keyed record (a replica's apply loop). It
// does not wait for fsync: the replicated log is the durable copy.
func (w *WAL) ApplyKeyed(log byte, key, payload []byte) error {
	var l *wal.Log
	switch log {
	case LogRetained:
		l = w.retained
	case LogSessions:
		l = w.sessions
	default:
		return fmt.Errorf("%w: keyed log %d", ErrBadRecord, log)
	}
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if _, err := l.Append(key, payload, 1); err != nil {
		return fmt.Errorf("store: apply: %w", err)
	}
	return nil
}

// Sync fsyncs the three logs (a replica's snapshot: the replicated log
// below it is about to be deleted).
func (w *WAL) Sync() error {
	for _, l := range []*wal.Log{w.messages, w.retained, w.sessions} {
		if err := l.Sync(); err != nil {
			return err
		}
	}
	return nil
}

// replicateOne hands one keyed record to r.
func replicateOne(r Replicator, log byte, key string, payload []byte) error {
	return r.ReplicateKeyed([]KeyedRecord{{Log: log, Key: key, Payload: payload}})
}
