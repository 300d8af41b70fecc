package shard

import (
	"time"

	"berth.dev/broker/packet"
)

// fail ends the connection because of err: MQTT 5 clients get a
// DISCONNECT with the reason [MQTT-4.13.1-1]; 3.1.1 clients are just
// closed [MQTT-4.8.0-1].
func (c *conn) fail(reason packet.ReasonCode, err error) {
	if reason != reasonNone {
		c.debug("closing connection", "reason", reason, "err", err)
	}
	c.kick(reason)
}

// kick starts closing the connection from any goroutine: it queues a
// DISCONNECT with reason for an MQTT 5 client (none for reasonNone or a
// 3.1.1 client), stops further PUBLISH output and input, and lets the
// writer flush and half-close the socket (shutWrite). The first reason
// wins.
//
// A parked reader is resumed to end, and then flushes and half-closes on
// its own goroutine (finish, closeOutput); only a running reader's
// connection needs its writer woken for that.
func (c *conn) kick(reason packet.ReasonCode) {
	if !c.stop(reason, true) {
		return
	}
	if !c.wakeParked() {
		c.wakeWriter() // it flushes the last packets and half-closes the socket
	}
}

// stop is kick without a wake-up, for the reader itself (readFailed,
// finish), whose end then flushes and half-closes (closeOutput): it marks
// the connection closing with reason (the first wins, reported by
// true), queues the DISCONNECT and stops input. killTimer arms the timer
// that closes a socket whose final flush hangs; closeOutput arms it when
// it hands the flush to a writer.
func (c *conn) stop(reason packet.ReasonCode, killTimer bool) bool {
	sess := c.sess // set by attach before anyone can reach c
	sess.mu.Lock()
	if c.closing {
		sess.mu.Unlock()
		return false
	}
	c.closing = true
	c.kickReason = reason
	if c.version == packet.Version5 && reason != reasonNone {
		d := packet.Disconnect{Reason: reason}
		var err error
		if c.ctrl, err = d.Append(c.ctrl, packet.Version5); err != nil {
			// Not a DISCONNECT reason code: say "unspecified error" rather
			// than close without a word.
			d.Reason = packet.ErrUnspecified
			c.ctrl, _ = d.Append(c.ctrl, packet.Version5)
		}
	}
	if killTimer {
		c.armKillTimerLocked()
	}
	sess.mu.Unlock()
	// The reader handles no more input: from now on it only drains it
	// (linger.go), so a client that does not read is not left blocked in
	// its writes while the final packets wait for it to read.
	c.kicked.Store(true)
	sess.mu.Lock()
	if c.attachedLocked() {
		// A detached socket has no read to interrupt: its reader is
		// parked, and kick resumes it (detach.go).
		_ = c.nc.SetReadDeadline(time.Now())
	}
	sess.mu.Unlock()
	return true
}

// armKillTimerLocked starts the timer that closes the socket if the
// final flush hangs, unless it runs; sess.mu is held.
func (c *conn) armKillTimerLocked() {
	if r := c.rareLocked(); r.killTimer == nil {
		r.killTimer = time.AfterFunc(closeFlushTimeout, c.killSocket)
	}
}

func (c *conn) stopKillTimer() {
	c.sess.mu.Lock()
	if c.killArmedLocked() {
		c.rare.killTimer.Stop()
	}
	c.sess.mu.Unlock()
}

func (c *conn) kickReasonValue() packet.ReasonCode {
	c.sess.mu.Lock()
	defer c.sess.mu.Unlock()
	return c.kickReason
}

// ended returns a channel closed once the connection is fully torn down
// (finish), made on first use: most connections end with nobody waiting
// for them. The connection has a session (attach).
func (c *conn) ended() <-chan struct{} {
	c.sess.mu.Lock()
	defer c.sess.mu.Unlock()
	r := c.rareLocked()
	if r.done == nil {
		r.done = make(chan struct{})
		if c.over {
			close(r.done)
		}
	}
	return r.done
}

// markEnded closes ended's channel, if one was made: the connection is
// torn down.
func (c *conn) markEnded() {
	c.sess.mu.Lock()
	c.over = true
	var done chan struct{}
	if c.rare != nil {
		done = c.rare.done
	}
	c.sess.mu.Unlock()
	if done != nil {
		close(done)
	}
}
