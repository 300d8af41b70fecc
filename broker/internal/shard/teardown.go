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
	c.kick(reasonNone)
	c.unwatch()
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
