package shard

import (
	"errors"
	"os"
	"time"
)

// Closing a connection the server ends (a DISCONNECT with a reason, a
// kick) takes care not to reset it. A TCP socket closed while input it
// has not read is waiting, or arrives later, is reset (RST): the
// client's next write fails with "broken pipe" or "connection reset",
// and the server's own output not yet sent, the DISCONNECT among it, is
// discarded. A client that pipelines packets without reading (more QoS 2
// PUBLISHes than the Receive Maximum, a packet over the Maximum Packet
// Size followed by more) would never see the reason. So:
//
//   - kick stops the reader handling input; from then on it only reads
//     and discards it (drainInput), so a client blocked writing to a
//     broker whose own writes back up is let through, and gets to read;
//   - the writer half-closes the socket after the final flush (shutWrite):
//     the client reads everything written, then end of stream;
//   - the reader goes on draining, with the session already released,
//     until the client closes its side, stays silent for lingerIdle, or
//     closeFlushTimeout after the kick; only then is the socket closed.

// lingerIdle ends the draining of a connection whose last packets are
// written once the client has sent nothing for this long.
const lingerIdle = 500 * time.Millisecond

// lingerPoll is how often draining checks whether the writer is done.
const lingerPoll = 10 * time.Millisecond

// shutWrite ends the connection's output once the final packets are
// written: a TCP or Unix socket (under a PROXY protocol wrapper too) is
// half-closed; any other connection is closed.
func (c *conn) shutWrite() {
	if cw, ok := vectorConn(c.nc).(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		return
	}
	_ = c.nc.Close()
}

// drainInput reads and discards the client's input; reader only, after
// the kick. Before the writer is done (flushed false) it returns once it
// is; after, once the client has been silent for lingerIdle. Either way
// it returns when the client closes its side, the socket fails or is
// closed (the kill timer), or at end. It reports whether the client may
// still be sending: false when it closed, the socket failed or end
// passed.
func (c *conn) drainInput(end time.Time, flushed bool) bool {
	s := c.shard
	buf := s.getReadBuf()
	defer func() {
		s.poison(buf[:])
		s.putReadBuf(buf)
	}()
	for {
		if !flushed && c.flushed.Load() {
			return true
		}
		wait := lingerIdle
		if !flushed {
			wait = lingerPoll
		}
		deadline := time.Now().Add(wait)
		if deadline.After(end) {
			deadline = end
		}
		_ = c.nc.SetReadDeadline(deadline)
		_, err := c.nc.Read(buf[:])
		switch {
		case err == nil:
		case !errors.Is(err, os.ErrDeadlineExceeded) || !time.Now().Before(end):
			return false
		case flushed:
			return false // silent for lingerIdle
		}
	}
}
