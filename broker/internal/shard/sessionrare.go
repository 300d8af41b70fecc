package shard

import "time"

// sessionRare is what few sessions ever use, out of line (made by
// rareLocked, under sess.mu) so that an idle session stays in the 384 B size
// class (docs/idle-connections.md).
type sessionRare struct {
	dropped [numDropReasons]uint64 // undelivered copies by reason
	// subsRevoked counts the subscriptions dropped on resume because the
	// resuming connection's ACL no longer covers them.
	subsRevoked uint64
	// traced are the traced QoS 1/2 copies inflight, by packet id, until
	// their PUBACK or PUBCOMP ends their delivery span (trace.go).
	traced map[uint16]tracedDelivery
}

// sessionAside is what a session needs only now and then, out of line
// (made by asideLocked, under sess.mu, and kept once made) so that an idle
// session stays in the 384 B size class (docs/idle-connections.md): an
// offline session's timers and pending will, the channel publishers
// pause on while its queue is behind (stall.go), and its QoS 2 ids.
type sessionAside struct {
	willTimer   *time.Timer
	expiryTimer *time.Timer
	pendingWill *willMsg // will waiting for its delay or the session end
	// drained is closed once the queue is back under half its bounds,
	// for the readers of publishers pausing on it; session.stalled marks
	// a queue that stayed behind through a whole pause: no reader pauses
	// on it again until it drains (stall.go).
	drained chan struct{}
	// awaitingRel are the inbound QoS 2 ids accepted, awaiting PUBREL
	// [MQTT-4.3.3-10], each with the log offset plus one of the message
	// record that marks it (0: not logged; nil until the first,
	// putAwaitingRelLocked); relAt are the outbound QoS 2 ids past PUBREC
	// with the offset plus one of their "released" record (nil until
	// needed, putRelAtLocked).
	awaitingRel map[uint16]uint64
	relAt       map[uint16]uint64
}

// asideLocked returns sess.aside, made if need be; sess.mu is held.
func (sess *session) asideLocked() *sessionAside {
	if sess.aside == nil {
		sess.aside = new(sessionAside)
	}
	return sess.aside
}

// awaitingRelLocked returns the inbound QoS 2 ids awaiting PUBREL (nil:
// none); sess.mu is held.
func (sess *session) awaitingRelLocked() map[uint16]uint64 {
	if sess.aside == nil {
		return nil
	}
	return sess.aside.awaitingRel
}

// relAtLocked returns the outbound QoS 2 ids past PUBREC (nil: none);
// sess.mu is held.
func (sess *session) relAtLocked() map[uint16]uint64 {
	if sess.aside == nil {
		return nil
	}
	return sess.aside.relAt
}

// putRelAtLocked records the outbound QoS 2 id past PUBREC with the log
// offset plus one of its "released" record; sess.mu is held.
func (sess *session) putRelAtLocked(id uint16, at uint64) {
	a := sess.asideLocked()
	if a.relAt == nil {
		a.relAt = make(map[uint16]uint64)
	}
	a.relAt[id] = at
}

// pendingWillLocked is the will waiting for its delay or the session
// end, nil none; sess.mu is held.
func (sess *session) pendingWillLocked() *willMsg {
	if sess.aside == nil {
		return nil
	}
	return sess.aside.pendingWill
}

// takePendingWillLocked returns the pending will and forgets it; sess.mu
// is held.
func (sess *session) takePendingWillLocked() *willMsg {
	a := sess.aside
	if a == nil {
		return nil
	}
	w := a.pendingWill
	a.pendingWill = nil
	return w
}

// rareLocked returns sess.rare, made if need be; sess.mu is held.
func (sess *session) rareLocked() *sessionRare {
	if sess.rare == nil {
		sess.rare = new(sessionRare)
	}
	return sess.rare
}

// tracedLocked returns the traced copies inflight (nil: none); sess.mu is
// held.
func (sess *session) tracedLocked() map[uint16]tracedDelivery {
	if sess.rare == nil {
		return nil
	}
	return sess.rare.traced
}
