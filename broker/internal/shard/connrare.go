package shard

import "time"

// connRare is what few connections ever make, out of line (made by
// rareLocked, under sess.mu) so that a held connection's conn stays in the
// 640 B size class (docs/idle-connections.md).
type connRare struct {
	// deadline fires at the credential's expiry (ConnInfo.Deadline);
	// moved by a re-authentication (setDeadline).
	deadline *time.Timer
	// killTimer closes the socket if the final flush hangs.
	killTimer *time.Timer
	// done is closed when the connection is fully torn down (over): made
	// by the first ended, as few connections are waited for.
	done chan struct{}
}

// rareLocked returns c.rare, made if need be; sess.mu is held.
func (c *conn) rareLocked() *connRare {
	if c.rare == nil {
		c.rare = new(connRare)
	}
	return c.rare
}

// killArmedLocked reports whether the kill timer was armed; sess.mu is
// held.
func (c *conn) killArmedLocked() bool {
	return c.rare != nil && c.rare.killTimer != nil
}

// keepAlive is the read deadline per packet: one and a half times the
// granted Keep Alive [MQTT-3.1.2-22]; 0 none.
func (c *conn) keepAlive() time.Duration {
	return time.Duration(c.ka) * time.Second * 3 / 2
}

// windowFor is the outbound inflight window for a client's Receive
// Maximum under the shard's MaxInflight (at most 65535).
func windowFor(recvMax uint16, maxInflight int) uint16 {
	return uint16(max(0, min(int(recvMax), maxInflight)))
}
