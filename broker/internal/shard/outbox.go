package shard

import "time"

// outbox collects, for one connection's reader, the connections that have
// output from the packets it is handling (its own acknowledgements, its
// deliveries to a few subscribers), and flushes them when the reader runs
// out of buffered input: each is written inline from the reader
// (conn.writeInline) or its writer is woken. A burst of packets thus
// costs one write per connection instead of one wake-up per packet, and a
// lone packet's output goes out without a goroutine hand-off.
type outbox struct {
	conns   [outboxSize]*conn
	n       int
	packets int // packets handled since the last flush
	// For the reader's pause (stall.go): the copies queued since the
	// last flush, how many of them for subscribers behind, the last of
	// those, and the reader's pause timer.
	queued, behind int
	lag            *session
	timer          *time.Timer
}

const (
	outboxSize = 8
	// outboxPackets bounds how many packets a reader handles before it
	// flushes even though more input is buffered.
	outboxPackets = 64
)

// add marks c as having output; a full outbox wakes c's writer at once.
func (o *outbox) add(c *conn) {
	for _, x := range o.conns[:o.n] {
		if x == c {
			return
		}
	}
	if o.n == len(o.conns) {
		c.wakeWriter()
		return
	}
	o.conns[o.n] = c
	o.n++
}

// flush writes or hands over the output of every marked connection.
func (o *outbox) flush() {
	for i, c := range o.conns[:o.n] {
		if !c.writeInline() {
			c.wakeWriter()
		}
		o.conns[i] = nil
	}
	o.n, o.packets = 0, 0
}
