package shard

import (
	"berth.dev/broker/internal/topic"
	"berth.dev/broker/packet"
)

// readBufSize is the read buffer of a connection with input to handle.
const readBufSize = 4096

// inbound is a reader's decoding scratch: the packets it decodes into and
// its match results. A reader holds one, and a read buffer, only while
// it has input to handle: an idle connection waits with neither
// (conn.idle), which is most of a held connection's memory.
type inbound struct {
	pub     packet.Publish
	ack     packet.Ack
	sub     packet.Subscribe
	unsub   packet.Unsubscribe
	disc    packet.Disconnect
	auth    packet.Auth
	matches topic.Matches
}

// idle waits for the client's next packet holding no buffer or scratch,
// then takes them back. It reports the wait's error (the read deadline,
// a closed socket), which the next read meets too.
func (c *conn) idle() error {
	c.releaseInput()
	err := c.w.raw.waitReadable()
	c.rd.Use(c.shard.readBufs.Get().(*[readBufSize]byte)[:])
	return err
}

// releaseInput gives back the read buffer, when nothing is buffered in
// it, and the scratch. A buffer grown for a big packet is left to the
// collector.
func (c *conn) releaseInput() {
	s := c.shard
	if b := c.rd.Release(); len(b) == readBufSize {
		s.readBufs.Put((*[readBufSize]byte)(b))
	}
	if c.in != nil {
		s.inbound.Put(c.in)
		c.in = nil
	}
}

// scratch returns the reader's inbound scratch, taking one if it has none.
func (c *conn) scratch() *inbound {
	if c.in == nil {
		c.in = c.shard.inbound.Get().(*inbound)
	}
	return c.in
}
