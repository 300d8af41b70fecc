package shard

import (
	"sync/atomic"
	"time"
)

// DropReason says why a message was not delivered to one subscriber.
type DropReason int

// Drop reasons. Every undelivered copy is counted under exactly one.
const (
	DropQueueFull     DropReason = iota // the subscriber's queue was at its limit
	DropOffline                         // QoS 0 to a session with no connection
	DropTooLarge                        // larger than the client's Maximum Packet Size [MQTT-3.1.2-25]
	DropExpired                         // Message Expiry Interval passed while queued [MQTT-3.3.2-5]
	DropNotAuthorized                   // the publisher was not allowed to publish to the topic
	DropSessionEnded                    // queued for a session that ended
	DropQuotaExceeded                   // refused by the tenant's quotas (rate, retained, monthly)
	DropRetention                       // its message-log segment was deleted by the tenant's retention
	DropPayloadFormat                   // said it was UTF-8 and was not [MQTT-3.3.2-4]
	DropRetainRefused                   // RETAIN where its topic rule allows none (topicrules.go); 3.1.1: sent on without it
	DropTopicRate                       // over the rate of its topic rule (topicrules.go)
	numDropReasons
)

var dropNames = [numDropReasons]string{"queue_full", "offline", "too_large", "expired", "not_authorized", "session_ended", "quota_exceeded", "retention", "payload_format",
	"retain_refused", "topic_rate"}

// String returns the reason as used in stats and $SYS topics.
func (r DropReason) String() string {
	if r < 0 || r >= numDropReasons {
		return "unknown"
	}
	return dropNames[r]
}

// Stats is a snapshot of a shard's counters.
type Stats struct {
	ClientsConnected int64
	ConnectionsTotal int64
	Sessions         int
	Subscriptions    int
	Retained         int
	MessagesIn       uint64 // PUBLISH packets received from clients, refused ones too
	// MessagesAccepted counts the messages of MessagesIn the shard took
	// on: a client's PUBLISH past every refusal (handlePublish), an HTTP
	// publish or a will once published (counted in both only then). It is
	// what the monthly messages quota counts and billing bills.
	MessagesAccepted uint64
	MessagesOut      uint64 // PUBLISH packets written to clients
	BytesIn          uint64
	BytesOut         uint64
	Dropped          map[string]uint64 // by DropReason name
	DeadLettersLost  uint64            // dead letters not published: too many waiting
	// SubscriptionsRevoked counts subscriptions dropped when a session
	// was resumed by a connection whose ACL no longer covers them.
	SubscriptionsRevoked uint64
	// PublisherPauses counts the pauses of publishers' readers for
	// subscribers behind (stall.go); PublisherPausesStalled those that
	// ended with the subscriber still behind, marked stalled.
	PublisherPauses        uint64
	PublisherPausesStalled uint64
	Uptime                 time.Duration
}

// SessionStats is the state of one session.
type SessionStats struct {
	Connected     bool
	Subscriptions int
	Queued        int
	Inflight      int
	Dropped       map[string]uint64
}

// Traffic is one connection's meters, counted like the shard's Stats:
// PUBLISH packets read and written, and whole MQTT packets read and
// written in bytes (ConnInfo.Traffic).
type Traffic struct {
	MessagesIn  atomic.Uint64
	MessagesOut atomic.Uint64
	BytesIn     atomic.Uint64
	BytesOut    atomic.Uint64
}

// The connection's counting: a nil *Traffic (a connection nobody meters)
// counts nothing, so a connection needs no meters of its own.

func (t *Traffic) addMessagesIn(n uint64) {
	if t != nil {
		t.MessagesIn.Add(n)
	}
}

func (t *Traffic) addMessagesOut(n uint64) {
	if t != nil {
		t.MessagesOut.Add(n)
	}
}

func (t *Traffic) addBytesIn(n uint64) {
	if t != nil {
		t.BytesIn.Add(n)
	}
}

func (t *Traffic) addBytesOut(n uint64) {
	if t != nil {
		t.BytesOut.Add(n)
	}
}

// counters are the shard-wide atomic counters.
type counters struct {
	connected     atomic.Int64
	connections   atomic.Int64
	msgsIn        atomic.Uint64
	msgsAccept    atomic.Uint64 // Stats.MessagesAccepted
	msgsOut       atomic.Uint64
	bytesIn       atomic.Uint64
	bytesOut      atomic.Uint64
	drops         [numDropReasons]atomic.Uint64
	subsRevoked   atomic.Uint64
	pauses        atomic.Uint64 // Stats.PublisherPauses
	pausesStalled atomic.Uint64 // Stats.PublisherPausesStalled
}

func (c *counters) snapshot() Stats {
	st := Stats{
		ClientsConnected: c.connected.Load(),
		ConnectionsTotal: c.connections.Load(),
		MessagesIn:       c.msgsIn.Load(),
		MessagesAccepted: c.msgsAccept.Load(),
		MessagesOut:      c.msgsOut.Load(),
		BytesIn:          c.bytesIn.Load(),
		BytesOut:         c.bytesOut.Load(),
		Dropped:          make(map[string]uint64, numDropReasons),

		SubscriptionsRevoked:   c.subsRevoked.Load(),
		PublisherPauses:        c.pauses.Load(),
		PublisherPausesStalled: c.pausesStalled.Load(),
	}
	for r := range c.drops {
		st.Dropped[DropReason(r).String()] = c.drops[r].Load()
	}
	return st
}

// totalDropped sums the drop counters.
func (c *counters) totalDropped() uint64 {
	var n uint64
	for r := range c.drops {
		n += c.drops[r].Load()
	}
	return n
}

// Stats returns a snapshot of the shard's counters.
func (s *Shard) Stats() Stats {
	st := s.stats.snapshot()
	s.mu.RLock()
	st.Sessions = len(s.sessions)
	s.mu.RUnlock()
	st.Subscriptions = s.tree.Len()
	st.Retained = s.retained.Len()
	st.Uptime = time.Since(s.started)
	st.DeadLettersLost = s.deadLettersLost()
	return st
}

// SessionStats reports the state of one session: whether it exists, is
// connected, how many messages wait and how many were dropped, by reason.
func (s *Shard) SessionStats(clientID string) (SessionStats, bool) {
	s.mu.RLock()
	sess := s.sessions[clientID]
	s.mu.RUnlock()
	if sess == nil {
		return SessionStats{}, false
	}
	subs := s.tree.Count(sess.id)
	sess.mu.Lock()
	defer sess.mu.Unlock()
	st := SessionStats{
		Subscriptions: subs,
		Connected:     sess.conn != nil,
		Queued:        sess.queue.len(),
		Inflight:      len(sess.inflight),
		Dropped:       make(map[string]uint64),
	}
	for r, n := range sess.dropCountsLocked() {
		if n > 0 {
			st.Dropped[DropReason(r).String()] = n
		}
	}
	return st, true
}
