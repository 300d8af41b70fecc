package shard

// deliverableLocked reports whether the queued message m may be written
// to a subscriber under syncAcks: subscribers see only what is durable by
// the rule in force, as a PUBACK does (Kafka's high watermark). A message
// not in the log (QoS 0, a retained copy) always may; a logged one once
// its record is fsynced (-fsync always) or committed and applied here
// (replicated). When it may not, the connection is registered with the
// ack loop, whose next wave wakes its writer (releaseAcks): one wait per
// burst, shared with the acknowledgements. sess.mu is held.
func (c *conn) deliverableLocked(m *message) bool {
	s := c.shard
	if m.off == 0 || m.off <= s.routable.Load() {
		return true // m.off is the record's offset plus one
	}
	if d := s.app.Durable(); d >= m.off {
		s.noteRoutable(d) // moved by another waiter (a QoS 2 state record)
		return true
	}
	if !c.gated {
		c.gated = true
		s.waitAck(c, m.off-1)
	}
	return false
}

// noteRoutable moves s.routable up to durable.
func (s *Shard) noteRoutable(durable uint64) {
	for {
		cur := s.routable.Load()
		if durable <= cur || s.routable.CompareAndSwap(cur, durable) {
			return
		}
	}
}
