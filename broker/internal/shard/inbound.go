package shard

import (
	"time"

	"berth.dev/broker/internal/topic"
	"berth.dev/broker/packet"
)

// readBufSize is the read buffer of a connection with input to handle.
const readBufSize = 4096

// inbound is a reader's decoding scratch: the packets it decodes into and
// its match results. A reader holds one, and a read buffer, only while
// it has input to handle: an idle connection waits with neither
// (conn.idle, park.go), which is most of a held connection's memory.
type inbound struct {
	pub     packet.Publish
	ack     packet.Ack
	sub     packet.Subscribe
	unsub   packet.Unsubscribe
	disc    packet.Disconnect
	auth    packet.Auth
	matches topic.Matches
	// Read times of the PUBLISH packets acknowledged since the last
	// outbox flush (Latency).
	acks  [maxAckStamps]int64
	nacks int
	// Log offsets of the QoS 1 deliveries PUBACKed since the last outbox
	// flush, for the session's StateAcked record (ackrecord.go).
	logAcks  [maxLogAcks]uint64
	nlogAcks int
	// connRead is monoOf the CONNECT's read until its CONNACK is sent;
	// 0 none.
	connRead int64
	// out are the connections with output from the packets being read;
	// flushed before the reader waits for input, so empty when pooled.
	out outbox
	// body is the pooled buffer the PUBLISH being handled was read into,
	// its first bodyLen bytes (bodyread.go), nil when it was read into
	// the read buffer; nil again once its packet is handled.
	body    *msgBuf
	bodyLen int
	// small is the read buffer of a reader woken for a few small
	// packets (wakeinput.go), so that a PINGREQ takes no 4 KiB buffer.
	small [smallReadBufSize]byte
	// clock is the time conn.clock read for packet clockAt of the
	// outbox's count (out.packets); clockAt 0: none.
	clock   time.Time
	clockAt int
	// topic counts the burst's messages to one topic for topicStats
	// (topictally.go); flushed with the last packet buffered, and before
	// the scratch is pooled.
	topic topicTally
	// slab holds the messages of the PUBLISH packets read in this burst
	// (slab.go): released before the scratch goes back to its pool.
	slab slab
}

// outbox returns the reader's outbox, in its scratch.
func (c *conn) outbox() *outbox { return &c.scratch().out }

// takeReadBuf gives the reader a pooled buffer: a big one if its last
// burst needed one and the pool has one, so that a stream of big packets
// does not regrow a buffer from 4 KiB every time.
func (c *conn) takeReadBuf() {
	s := c.shard
	if c.readsBig {
		if h, _ := s.bigBufs.Get().(*bigBuf); h != nil {
			c.rd.Use(h.b)
			h.b, c.big = nil, h
			return
		}
	}
	c.rd.Use(s.getReadBuf()[:])
}

// getReadBuf takes a pooled read buffer; putReadBuf gives one back.
func (s *Shard) getReadBuf() *[readBufSize]byte {
	s.opts.probe.readBuf(1)
	return s.readBufs.Get().(*[readBufSize]byte)
}

func (s *Shard) putReadBuf(b *[readBufSize]byte) {
	s.opts.probe.readBuf(-1)
	s.readBufs.Put(b)
}

// bigBuf holds a read buffer grown past readBufSize for Shard.bigBufs; a
// connection keeps the holder while it uses the buffer, so pooling
// allocates nothing.
type bigBuf struct{ b []byte }

// maxPooledReadBuf bounds the grown buffers worth keeping.
const maxPooledReadBuf = 1 << 20

// releaseInput gives back the read buffer and the scratch. Nothing may
// be buffered in the reader (idle waits only then; end discards it
// first): the read buffer may be the scratch's own small one.
func (c *conn) releaseInput() {
	c.releaseReadBuf()
	c.noteWaiting()
	c.releaseScratch()
}

// releaseReadBuf gives back the read buffer, if it has one, and drops
// what a busy wait read into it (idleBusy) that no packet read took: the
// connection ends.
func (c *conn) releaseReadBuf() {
	s := c.shard
	if c.w.raw != nil {
		c.w.raw.dropRead()
	}
	b := c.rd.Release()
	if b != nil && len(b) != smallReadBufSize {
		// A burst of small packets says nothing about the next big one.
		c.readsBig = len(b) > readBufSize
	}
	s.poison(b)
	switch {
	case len(b) == readBufSize:
		s.putReadBuf((*[readBufSize]byte)(b))
	case len(b) > readBufSize && len(b) <= maxPooledReadBuf:
		h := c.big
		if h == nil {
			h = new(bigBuf)
		}
		h.b, c.big = b, nil
		s.bigBufs.Put(h)
	}
}

// noteWaiting ends what the reader did since it last waited for input:
// its acknowledgement samples and records, its outbox's counts.
func (c *conn) noteWaiting() {
	if c.in != nil {
		c.recordSent() // normally done by the outbox flush already
		c.logAcked()
		c.in.out.packets = 0
		c.in.out.forgetQueued()
	}
}

// releaseScratch gives back the scratch.
func (c *conn) releaseScratch() {
	if c.in != nil {
		c.in.clockAt = 0
		c.in.topic.flush()
		c.in.slab.release() // the next holder starts a chunk of its own
		c.shard.inbound.Put(c.in)
		c.in = nil
	}
}

// clock returns the time of the PUBLISH being handled: the clock is read
// once for the packets that were buffered together, not once per packet.
// It is read again for a packet that is not the one handled right after
// the last reading's (out.packets, which the read loop resets whenever
// the next packet is not whole in the buffer, before it reads the socket
// and maybe waits, and after outboxPackets packets): so a time is shared
// by at most outboxPackets packets that were all in the reader's buffer
// when the first of them was handled, and never across a read.
func (c *conn) clock() time.Time {
	in := c.in
	if in == nil {
		return time.Now()
	}
	if in.clockAt == 0 || in.out.packets != in.clockAt+1 {
		in.clock = time.Now()
	}
	in.clockAt = in.out.packets
	return in.clock
}

// scratch returns the reader's inbound scratch, taking one if it has none.
func (c *conn) scratch() *inbound {
	if c.in == nil {
		c.in = c.shard.inbound.Get().(*inbound)
	}
	return c.in
}
