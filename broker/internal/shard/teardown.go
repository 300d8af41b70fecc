package shard

import (
	"time"

	"berth.dev/broker/packet"
)

// loop runs the read loop on the current goroutine, and the connection's
// end after it, unless the reader parked.
func (c *conn) loop() {
	sendWill, drain, parked := c.readLoop()
	if !parked {
		c.finish(sendWill, drain)
	}
}

// finish tears the connection down after its read loop, on whichever
// goroutine ran it last.
func (c *conn) finish(sendWill, drain bool) {
	s := c.shard
	c.setDeadline(time.Time{})
	c.stop(reasonNone, false) // unless kicked already
	c.unwatch()
	c.closeOutput()
	lingerEnd := time.Now().Add(closeFlushTimeout)
	if drain {
		drain = c.drainInput(lingerEnd, false) // while the writer flushes (linger.go)
	}
	c.writerDone.Wait()
	c.stopKillTimer()
	if !drain {
		_ = c.nc.Close()
	}
	if c.kickReasonValue() == packet.ErrServerShuttingDown {
		sendWill = false // a server shutdown is not the client's failure
	}
	s.detach(c, sendWill)
	s.stats.connected.Add(-1)
	c.debug("client disconnected")
	c.markEnded()
	if drain {
		c.drainInput(lingerEnd, true) // end closes the socket after
	}
	c.end()
}

// end gives back the connection's input, closes its socket and leaves
// the shard: the last thing it does.
func (c *conn) end() {
	s := c.shard
	c.rd.Reset(nil) // input never to be read: its buffer goes back too
	c.releaseInput()
	_ = c.nc.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.conwg.Done()
	if c.onDone != nil {
		c.onDone()
	}
}

// closeOutput ends the connection's output, from its reader's end
// (finish): the last packets (a DISCONNECT, acknowledgements) are written
// and the socket half-closed (shutWrite). When no writer goroutine runs
// and the socket takes them at once, or fails, that happens right here,
// so a connection whose peer is gone, or that was kicked while parked,
// ends on one goroutine; else a writer does it (the kill timer armed, as
// for a kick).
func (c *conn) closeOutput() {
	if c.w.raw != nil && c.writing.CompareAndSwap(false, true) {
		// The writer's role is this goroutine's now: no writer starts.
		c.w.mu.Lock()
		done := c.flushFinalLocked()
		c.w.mu.Unlock()
		if done {
			c.writerFinished()
			return
		}
		c.writing.Store(false) // the rest is the writer's
	}
	c.sess.mu.Lock()
	c.armKillTimerLocked()
	c.sess.mu.Unlock()
	c.wakeWriter()
}

// flushFinalLocked writes the waiting control packets without waiting
// for the socket and reports whether the output is done: all of it
// written, or the socket failed. It leaves anything else (the rest of a
// batch, stored messages read ahead) to the writer. c.w.mu is held.
func (c *conn) flushFinalLocked() bool {
	if b := c.w.b; c.w.pending || b != nil && (len(b.ready) > 0 || b.prefetch || len(b.files) > 0) {
		return false
	}
	s := c.shard
	c.sess.mu.Lock()
	c.w.ctrlOut, c.ctrl = c.ctrl, c.w.ctrlOut[:0]
	c.sess.mu.Unlock()
	if len(c.w.ctrlOut) > 0 {
		one := [1][]byte{c.w.ctrlOut}
		written, err := c.w.raw.tryWritev(one[:])
		s.stats.bytesOut.Add(uint64(written))
		c.info.Traffic.addBytesOut(uint64(written))
		if err == nil && written < len(c.w.ctrlOut) {
			// The socket took part: the writer sends the rest.
			c.takeBatch()
			c.w.b.vec = append(c.w.b.vec[:0], c.w.ctrlOut[written:])
			c.w.pending = true
			return false
		}
	}
	if c.w.b != nil {
		c.releaseStored()
		c.putBatch()
	}
	return true
}
