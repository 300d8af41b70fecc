package shard

import (
	"fmt"
	"time"

	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

// Replication is the tenant's Raft group as the shard's message log sees
// it (Options.Replication; package tenantlog provides it). Every record the
// shard would append to the message log goes to Append instead, which
// names the offset the record will have and hands it to the group; the
// group appends it to the log (Options.MessageLog) on every replica once a
// quorum has it, in commit order. Acknowledgements wait for WaitDurable:
// a PUBACK, PUBREC or PUBCOMP leaves only once its records are committed;
// deliveries wait for Durable to pass their record (deliverableLocked).
// Once the node stops leading the group, WaitDurable and Append fail for
// good: nothing more is acknowledged.
type Replication interface {
	Append(key, payload []byte, count uint32) (uint64, error)
	WaitDurable(off uint64) error
	Durable() uint64    // offsets below it are committed and in the log here
	NextOffset() uint64 // the offset the next Append gets
}

// logAppender is where message-log records go and what acknowledgements wait
// for: the log itself (a *wal.Log), or the tenant's Raft group.
type logAppender = Replication

// setAppender picks the shard's logAppender: the Raft group when replicated,
// else the message log (nil: no log). Called by New.
func (s *Shard) setAppender() {
	switch {
	case s.log == nil:
	case s.opts.Replication != nil:
		s.app, s.syncAcks = s.opts.Replication, true
	default:
		s.app, s.syncAcks = s.log, s.log.Policy() == wal.SyncAlways
	}
}

// nextOffset is the offset the next message-log record gets (0 without a
// log): replicated, records proposed but not yet in the log count.
func (s *Shard) nextOffset() uint64 {
	if s.app == nil {
		return 0
	}
	return s.app.NextOffset()
}

// waitReadable waits until the message-log record at off may be read and
// delivered: replicated, until it is this leadership's (or committed
// before it) and in the log here: a record is appended only once
// committed, so a reader of a record just routed (a stored entry, a
// replay) may have to wait. A record already in the log here is asked
// about too: once this node's leadership has ended, the record at off may
// be another leader's, which must not be delivered in place of the one
// this shard routed (WaitDurable fails for it). Under -fsync always, until
// it is fsynced: a subscriber never gets a message that a crash could
// still take back (after a failed fsync, never). Under the other policies
// at once.
func (s *Shard) waitReadable(off uint64) error {
	if !s.syncAcks {
		return nil
	}
	if err := s.app.WaitDurable(off); err != nil {
		return fmt.Errorf("%w: offset %d not durable: %w", errLost, off, err)
	}
	return nil
}

// segmentRemover deletes message-log segments for a replicated log (the
// decision goes through the group, every replica deletes: tenantlog).
type segmentRemover interface {
	RemoveBefore(off uint64, keepSince time.Time) (int, error)
}

// removeBefore deletes the message-log segments wholly below off (and
// older than keepSince unless zero): replicated, on every replica once the
// group commits it; else here and now.
func (s *Shard) removeBefore(off uint64, keepSince time.Time) (int, error) {
	if r, ok := s.opts.Replication.(segmentRemover); ok {
		return r.RemoveBefore(off, keepSince)
	}
	return s.log.RemoveBefore(off, keepSince)
}

// unloggedCode is the DISCONNECT reason of a connection closed because its
// records could not be made durable: replicated, the node no longer leads
// the tenant (0x9C use another server); else the disk failed (0x80).
func (s *Shard) unloggedCode() packet.ReasonCode {
	if s.opts.Replication != nil {
		return packet.ErrUseAnotherServer
	}
	return packet.ErrUnspecified
}

// errNotServing is what a replicated shard's client is told when a
// subscription cannot be made durable because this node no longer leads
// the tenant's group: use another server (DISCONNECT 0x9C).
var errNotServing = fmt.Errorf("shard: tenant no longer served here: %w", packet.ErrUseAnotherServer)
