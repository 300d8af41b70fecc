package shard

import (
	"errors"
	"io"
	"net"
	"os"
	"time"

	"berth.dev/broker/packet"
)

// readLoop reads and handles packets until the connection ends. It
// reports whether the will message must be published: every end but a
// DISCONNECT with reason 0x00 [MQTT-3.14.4-3] [MQTT-3.1.2-8]; and
// whether the server ends it while the client may still be sending, so
// that its input must be drained before the socket is closed (linger.go).
// parked is true instead when the reader parked (park.go): a wake-up
// resumes the loop on another goroutine.
func (c *conn) readLoop() (sendWill, drain, parked bool) {
	sendWill, drain, parked = c.readPackets()
	if !parked {
		// A parked reader flushed before it parked, and no longer owns
		// its outbox.
		c.flushOut()
	}
	return sendWill, drain, parked
}

// readPackets is readLoop's loop.
func (c *conn) readPackets() (sendWill, drain, parked bool) {
	s := c.shard
	if c.park.expired {
		// Resumed by the keep-alive timer: silent too long while parked.
		c.park.expired = false
		return true, c.readFailed(os.ErrDeadlineExceeded), false
	}
	for {
		var start time.Time
		if !c.rd.Ready() {
			// The next read may wait on the socket: only then is the clock
			// read and the deadline moved (a burst already buffered is
			// handled without either).
			if c.keepAlive() > 0 || c.parks() {
				start = time.Now()
			}
			if c.keepAlive() > 0 && (!c.parks() || c.rd.Buffered() > 0) {
				// [MQTT-3.1.2-22] (3.1.1: [MQTT-3.1.2-24]) one and a half
				// times the Keep Alive. A reader that can park and has
				// nothing buffered waits in idle, under a deadline of its
				// own until a packet's read must wait (readWaits).
				c.park.waitUntil = 0
				_ = c.nc.SetReadDeadline(start.Add(c.keepAlive()))
			}
		}
		if c.kicked.Load() {
			return true, true, false // after the deadline: kick moved it to now
		}
		if in := c.in; in != nil && (in.out.packets >= outboxPackets || !c.rd.Ready()) {
			c.flushBeforeWait() // before waiting for input, or after a long burst
		}
		if c.rd.Buffered() == 0 {
			if c.in != nil {
				c.in.slab.release() // about to wait: an idle connection holds no chunk
			}
			if c.w.raw != nil {
				park, err := c.idle(start)
				if err != nil {
					return true, c.readFailed(err), false
				}
				if park && c.parkReader(start) {
					return false, false, true
				}
			}
		}
		fh, body, err := c.readPacket(s.maxPacketSize()) // a big PUBLISH straight into a message buffer (bodyread.go)
		if err != nil {
			return true, c.readFailed(err), false
		}
		c.scratch().out.packets++
		switch {
		case fh.Type != packet.TypePingreq:
			c.park.woke = wokeNot // a conversation, maybe: wait parkAfter before parking (idle)
		case c.park.woke == wokeFresh:
			c.park.woke = wokePings
		}
		s.stats.bytesIn.Add(uint64(fh.Size())) // the whole packet: fixed header and body
		c.info.Traffic.addBytesIn(uint64(fh.Size()))
		err = c.handle(fh, body)
		c.dropBody() // a body no message was built in
		switch {
		case err == nil:
			if c.ctrlFull.Load() {
				// Acknowledgements pile up unread: stop handling more.
				c.fail(packet.ErrQuotaExceeded, nil)
				return true, true, false
			}
			continue
		case errors.Is(err, errDisconnect):
			return false, false, false
		case errors.Is(err, errDisconnectWithWill):
			return true, false, false
		default:
			c.fail(reasonOf(err), err)
			return true, true, false
		}
	}
}

// flushBeforeWait writes what the reader's handling queued, before it
// waits for input or after a long burst, and pauses it if all it queued
// went to subscribers behind (stall.go).
func (c *conn) flushBeforeWait() {
	in := c.in
	if in == nil {
		return
	}
	if in.out.n > 0 {
		c.flushOut()
	} else {
		in.out.packets = 0
	}
	if in.out.queued > 0 {
		c.pauseForLagging()
	}
}

// readFailed ends the connection after a failed read or wait for input
// and reports whether the client may still be sending: not when it
// closed its side or stayed silent past its keep alive.
func (c *conn) readFailed(err error) (drain bool) {
	if c.kicked.Load() {
		return true // kick interrupted the read; its reason stands
	}
	reason := readErrorReason(err)
	if reason != reasonNone {
		c.debug("closing connection", "reason", reason, "err", err)
	}
	// No wake-up: the reader's end flushes the DISCONNECT and closes
	// (finish, closeOutput), with no writer goroutine for a peer gone.
	c.stop(reason, false)
	return reason != reasonNone && reason != packet.ErrKeepAliveTimeout
}

// readErrorReason maps a read failure to the DISCONNECT reason.
func readErrorReason(err error) packet.ReasonCode {
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), errors.Is(err, io.ErrUnexpectedEOF):
		return reasonNone
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return packet.ErrKeepAliveTimeout // [MQTT-3.1.2-22]
	case errors.Is(err, packet.ErrPacketTooLarge):
		return packet.ErrPacketTooLarge // MQTT 5.0 section 3.1.2.11.4
	}
	var code packet.ReasonCode
	if errors.As(err, &code) && code.IsFailure() {
		return code
	}
	return reasonNone
}

// reasonOf extracts the reason code an error carries, or 0x80.
func reasonOf(err error) packet.ReasonCode {
	var code packet.ReasonCode
	if errors.As(err, &code) && code.IsFailure() {
		return code
	}
	return packet.ErrUnspecified
}
