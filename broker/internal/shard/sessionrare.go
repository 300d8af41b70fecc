package shard

// sessionRare is what few sessions ever use, out of line (made by
// rareLocked, under sess.mu) so that an idle session stays in the 448 B size
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
