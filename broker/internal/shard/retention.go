package shard

import (
	"math"
	"sync/atomic"
	"time"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/wal"
)

// Retention bounds a tenant's message log whatever its sessions still
// need (the tenant's retention_bytes and retention_seconds quotas). Every
// CheckpointInterval, while the log is larger than Bytes or its oldest
// segment's newest message is older than Age, whole oldest segments are
// deleted; the active segment never is. A session that still pointed into
// a deleted segment loses those pending messages: each lost copy is
// counted as a drop (DropRetention), never sent, and the messages that
// remain go out in order. Zero fields bound nothing. Segments no session
// needs go anyway at full checkpoints (see checkpoint). QoS 2 state in the
// deleted segments (awaiting-PUBREL marks, PUBREL owed) is carried above
// the cut first (carryQoS2Locked), so a crash after retention neither
// routes a resent PUBLISH again nor forgets a PUBREL.
//
//	log:  [seg 0][seg 1][seg 2][seg 3][active]
//	                          ▲ cut: RetentionCut(Bytes, Age)
//	sessions: stored entries below cut ─▶ dropped ("retention")
//	then:     RemoveBefore(cut) deletes seg 0..2
type Retention struct {
	Bytes int64         // total bytes of the log's segments
	Age   time.Duration // age of a segment's newest message
}

// retentionState is the live retention (SetRetention) and the floor: log
// offsets below it are deleted or about to be, so nothing may queue a
// stored entry below it again.
type retentionState struct {
	bytes atomic.Int64
	age   atomic.Int64
	floor atomic.Uint64
}

// SetRetention changes the message-log retention of the live shard; it is
// applied at the next checkpoint. A negative field counts as zero
// (unbounded).
func (s *Shard) SetRetention(r Retention) {
	s.retention.bytes.Store(max(r.Bytes, 0))
	s.retention.age.Store(int64(max(r.Age, 0)))
}

// Retention returns the retention in force (see SetRetention).
func (s *Shard) Retention() Retention {
	return Retention{Bytes: s.retention.bytes.Load(), Age: time.Duration(s.retention.age.Load())}
}

// applyRetention deletes the oldest message-log segments beyond the
// retention. The cut is taken under s.mu, so no message is appended but
// not yet routed; every session lets go of its stored entries below the
// cut (counted as drops) before the segments are deleted, so a writer
// never finds an entry whose record is gone: what it had read ahead still
// holds its segment open and is discarded because the ring's front moved.
func (s *Shard) applyRetention() {
	r := s.Retention()
	if s.log == nil || (r.Bytes == 0 && r.Age == 0) {
		return
	}
	ret := wal.Retention{Bytes: r.Bytes, Age: r.Age}
	if s.log.RetentionCut(ret, time.Now()) <= s.log.FirstOffset() {
		return // nothing to delete: the common case takes no shard lock
	}
	s.mu.Lock()
	cut := s.log.RetentionCut(ret, time.Now())
	carried := 0
	for _, sess := range s.sessions {
		sess.mu.Lock()
		n, keep := sess.carryQoS2Locked(cut)
		sess.mu.Unlock()
		carried += n
		cut = min(cut, keep)
	}
	if cut > s.retention.floor.Load() {
		s.retention.floor.Store(cut)
	}
	lost := 0
	for _, sess := range s.sessions {
		sess.mu.Lock()
		lost += sess.dropBelowLocked(cut)
		sess.mu.Unlock()
	}
	s.mu.Unlock()
	if carried > 0 {
		// The carried state is durable before the records it replaces go.
		if err := s.log.Sync(); err != nil {
			s.opts.Logger.Warn("message-log retention: QoS 2 state not durable; nothing deleted", "err", err)
			return
		}
	}
	n, err := s.removeBefore(cut, time.Time{})
	if err != nil {
		s.opts.Logger.Warn("message-log retention", "err", err)
	}
	if n > 0 || lost > 0 {
		s.opts.Logger.Info("message-log retention deleted segments", "segments", n, "below", cut,
			"lost", lost, "retention_bytes", r.Bytes, "retention_age", r.Age)
	}
}

// dropBelowLocked drops the session's pending messages whose records lie
// below cut: stored entries and, while offline, inflight messages not yet
// acknowledged whose payload is only in the log (a connected session's
// redelivery finds them gone and counts them then). It returns how many
// it dropped, each counted as DropRetention.
func (sess *session) dropBelowLocked(cut uint64) int {
	lost := 0
	for i, n := 0, sess.stored.len(); i < n; i++ {
		e := sess.stored.pop()
		if e.off < cut {
			sess.dropLocked(DropRetention)
			lost++
			continue
		}
		sess.stored.push(e) // keeps the ring's order
	}
	if sess.conn == nil {
		for id, d := range sess.inflight {
			if d.state == statePublish && d.msg != nil && d.msg.stored && d.msg.off-1 < cut {
				delete(sess.inflight, id)
				d.msg.unref()
				sess.dropLocked(DropRetention)
				lost++
			}
		}
	}
	if lost > 0 {
		sess.dirty = true // its cursor moved up
	}
	return lost
}

// carryQoS2Locked carries a persistent session's QoS 2 state that lies
// below cut (qos2.go) above it, so retention never takes exactly-once
// away: each inbound message awaiting PUBREL whose marking record is below
// cut gets a StateInAwaiting record, each outbound flow owed a PUBREL
// whose StateOutReleased record is below cut gets that record again. The
// records are appended at the log's end and the session's state points at
// them; the next checkpoint saves its new QoS 2 position. An outbound
// flow still waiting for PUBREC needs nothing carried: its message record
// (below its StateOutSent record) goes with the segment, counted as a
// retention drop, and is never sent again. It returns how many records it
// appended and, when an append failed, the offset below which the log
// must be kept (else the largest offset).
func (sess *session) carryQoS2Locked(cut uint64) (carried int, keep uint64) {
	keep = math.MaxUint64
	if sess.expiry == 0 {
		return 0, keep // its state ends with the process anyway
	}
	carry := func(kind byte, state map[uint16]uint64) {
		for id, at := range state {
			if at == 0 || at-1 >= cut {
				continue
			}
			off, err := sess.shard.appendState(kind, sess.clientID, id)
			if err != nil {
				sess.shard.opts.Logger.Warn("message-log retention: carrying QoS 2 state; its segment is kept",
					"client_id", sess.clientID, "err", err)
				keep = min(keep, at-1)
				continue
			}
			state[id] = off + 1
			carried++
		}
	}
	carry(store.StateInAwaiting, sess.awaitingRelLocked())
	carry(store.StateOutReleased, sess.relAtLocked())
	if carried > 0 {
		sess.dirty = true // its QoS 2 position moved up
	}
	return carried, keep
}

// pushStoredLocked queues a stored entry, unless retention deleted (or is
// deleting) its record: that copy is counted as DropRetention instead.
// Entries of newly routed messages are never below the floor; those of
// older ones (a disconnect turning queued messages into entries, a
// replay, a redelivery requeued) may be.
func (sess *session) pushStoredLocked(e storedEntry) {
	if e.off < sess.shard.retention.floor.Load() {
		sess.dropLocked(DropRetention)
		return
	}
	sess.stored.push(e)
}
