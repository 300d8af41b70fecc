package shard

// inlineFanout is the widest publish whose subscribers go into the
// publisher's outbox (Shard.publishVia).
const inlineFanout = 4

// writeInline sends what is queued for c from the calling goroutine (a
// publisher's reader) instead of waking c's writer, saving a goroutine
// hand-off. It only does so when the writer is idle and the socket takes
// the whole batch at once; it never blocks on c's client. It reports
// whether nothing is left for the writer; false means wake it.
func (c *conn) writeInline() bool {
	if c.w.raw == nil || !c.w.mu.TryLock() {
		return false
	}
	defer c.w.mu.Unlock()
	if c.w.pending || c.w.b != nil && len(c.w.b.ready) > 0 {
		return false
	}
	s, sess := c.shard, c.sess
	sess.mu.Lock()
	if c.closing || sess.conn != c || s.log != nil && (sess.stored.len() > 0 || sess.replaying > 0) {
		sess.mu.Unlock()
		return false // closing, and stored messages, are the writer's
	}
	if c.w.b == nil && sess.queue.len() == 0 {
		return c.writeCtrlInline() // unlocks sess.mu
	}
	c.takeBatch()
	w := c.w.b
	n := c.fillLocked()
	c.logSentLocked()
	sess.mu.Unlock()
	if n == 0 {
		return true
	}
	if c.mustAwaitSent() {
		s.stats.msgsOut.Add(uint64(w.msgs))
		c.info.Traffic.addMessagesOut(uint64(w.msgs))
		c.w.pending = true // the writer waits for the fsync, then writes (qos2.go)
		return false
	}
	written, err := c.w.raw.tryWritev(w.vec)
	s.stats.bytesOut.Add(uint64(written))
	s.stats.msgsOut.Add(uint64(w.msgs))
	c.info.Traffic.addBytesOut(uint64(written))
	c.info.Traffic.addMessagesOut(uint64(w.msgs))
	rest := w.vec
	for len(rest) > 0 && written >= len(rest[0]) {
		written -= len(rest[0])
		rest = rest[1:]
	}
	if len(rest) == 0 && err == nil {
		w.releaseHeld()
		c.recordDeliveries()
		return true
	}
	if len(rest) > 0 {
		rest[0] = rest[0][written:]
	}
	w.vec = w.vec[:copy(w.vec, rest)]
	c.w.pending = true // the writer sends the rest, or meets the error
	return false
}

// writeCtrlInline is writeInline for a connection with only control
// packets to send (acknowledgements, CONNACK, PINGRESP): one write, no
// batch state, so a device that only publishes never takes any. c.w.mu
// and sess.mu are held; it unlocks sess.mu.
func (c *conn) writeCtrlInline() bool {
	if len(c.ctrl) == 0 {
		c.sess.mu.Unlock()
		return true
	}
	c.w.ctrlOut, c.ctrl = c.ctrl, c.w.ctrlOut[:0]
	c.sess.mu.Unlock()
	one := [1][]byte{c.w.ctrlOut}
	written, err := c.w.raw.tryWritev(one[:])
	c.shard.stats.bytesOut.Add(uint64(written))
	c.info.Traffic.addBytesOut(uint64(written))
	if written == len(c.w.ctrlOut) && err == nil {
		return true
	}
	// The socket took part: the writer sends the rest (or meets the error).
	c.takeBatch()
	c.w.b.vec = append(c.w.b.vec[:0], c.w.ctrlOut[written:])
	c.w.pending = true
	return false
}
