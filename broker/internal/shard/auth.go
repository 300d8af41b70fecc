package shard

import (
	"net"
	"time"
	"weak"

	"berth.dev/broker/packet"
)

// End ends the connection that was handed to ServeConn as nc, from any
// goroutine: an MQTT 5 client gets a DISCONNECT with reason first (e.g.
// 0x87 when its credential was revoked), a 3.1.1 client is just closed
// [MQTT-4.8.0-1]; a connection still in CONNECT is closed. It reports
// whether nc was one of the shard's connections, and does not wait for the
// connection to finish. nc is compared with ==, so it must be of a
// comparable type (any pointer is). It walks the shard's connections: it
// is meant for rare events such as a revocation, not the packet path.
// A connection parked without its socket (detach.go) is found by the
// wrapper handed to Serve, or by the bare *net.TCPConn while the caller
// holds it.
func (s *Shard) End(nc net.Conn, reason packet.ReasonCode) bool {
	var wk weak.Pointer[net.TCPConn]
	if tc, ok := nc.(*net.TCPConn); ok {
		wk = weak.Make(tc)
	}
	var found *conn
	attached := false
	s.mu.RLock()
	for c, a := range s.conns {
		if !a {
			// In CONNECT: its reader runs, and has not parked yet.
			if c.isConn(nc, wk) {
				found = c
				break
			}
			continue
		}
		c.sess.mu.Lock() // c.nc changes as the connection parks (detach.go)
		is := c.isConn(nc, wk)
		c.sess.mu.Unlock()
		if is {
			found, attached = c, true
			break
		}
	}
	s.mu.RUnlock()
	switch {
	case found == nil:
		return false
	case !attached:
		_ = nc.Close() // still in CONNECT: nothing to say yet
	default:
		found.kick(reason) // c.sess was set before the conn was marked attached
	}
	return true
}

// setDeadline (re)arms the timer that ends the connection when its
// credential expires (DISCONNECT 0xA0, maximum connect time); zero
// disarms it. Reader goroutine only, once the connection has its session.
func (c *conn) setDeadline(t time.Time) {
	c.sess.mu.Lock()
	defer c.sess.mu.Unlock()
	if c.rare != nil && c.rare.deadline != nil {
		c.rare.deadline.Stop()
	}
	if t.IsZero() {
		return
	}
	r := c.rareLocked()
	if r.deadline == nil {
		r.deadline = time.AfterFunc(time.Until(t), func() { c.kick(packet.ErrMaximumConnectTime) })
		return
	}
	r.deadline.Reset(time.Until(t))
}

// handleAuth answers an AUTH packet: only a client-initiated
// re-authentication (reason 0x19) with the connection's method is
// understood (MQTT 5.0 section 4.12.1). Success moves the connection's
// deadline to the new credential's and answers AUTH 0x00; a refused
// credential ends the connection with DISCONNECT 0x87, another method
// with 0x82.
//
// Berth also accepts a re-authentication from a client whose CONNECT
// named no method (it authenticated with user name and password at the
// gateway), so password clients can extend their session too.
func (c *conn) handleAuth(p *packet.Auth) error {
	if p.Reason != packet.CodeReAuthenticate {
		return packet.ErrProtocol // the server never asked to continue (0x18)
	}
	method := c.info.authMethod()
	if method == "" || string(p.Props.AuthMethod) != method {
		// [MQTT-4.12.1-1] the method must be the one the connection was
		// authenticated with; another is a Protocol Error (0x8C, bad
		// authentication method, is a CONNACK code, not a DISCONNECT one).
		return packet.ErrProtocol
	}
	verify := c.info.reauthenticate()
	if verify == nil {
		c.logger().Info("re-authentication refused: no verifier configured")
		return packet.ErrNotAuthorized
	}
	deadline, err := verify(p.Props.AuthData)
	if err != nil {
		c.logger().Info("re-authentication refused", "err", err)
		return packet.ErrNotAuthorized // [MQTT-4.12.1-2] a failed re-authentication ends the connection
	}
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		return packet.ErrNotAuthorized
	}
	c.setDeadline(deadline)
	out := &packet.Auth{Reason: packet.CodeSuccess}
	out.Props.AuthMethod = []byte(method) // [MQTT-4.12.0-5]
	c.send(out)
	c.debug("re-authenticated", "deadline", deadline)
	return nil
}
