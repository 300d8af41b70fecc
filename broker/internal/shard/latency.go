package shard

import (
	"time"

	"berth.dev/broker/internal/histogram"
)

// Latency is where a shard records the latency of every message and
// connection, in nanoseconds, into histograms shared by all its
// connections (atomic, no lock, no allocation per sample):
//
//   - Delivery: from the node reading a PUBLISH (handlePublish) to the
//     batch holding its copy for one subscriber having been written to that
//     subscriber's socket, one sample per subscriber: a message delivered
//     to N subscribers counts N times. Only copies routed live to a
//     connected session count; retained messages sent on SUBSCRIBE,
//     messages kept for an offline session or read back from the message
//     log (replay, reconnects) and redeliveries do not.
//   - Ack: from reading an accepted QoS 1/2 PUBLISH to its PUBACK/PUBREC
//     being written (or handed to the connection's writer). Under
//     wal.SyncAlways it includes the wait for the group commit.
//   - Connect: from reading CONNECT to the CONNACK accepting it being
//     written (or handed to the writer). Refused connections do not count.
//
// Time stamps are monotonic. The end of a delivery is read once per
// written batch, the end of acks and CONNACK once per outbox flush (a read
// burst of at most outboxPackets packets), and after a group commit once
// per connection released.
type Latency struct {
	Delivery *histogram.Atomic
	Ack      *histogram.Atomic
	Connect  *histogram.Atomic
}

// withDefaults gives every nil histogram one of the shard's own.
func (l Latency) withDefaults() Latency {
	for _, h := range []**histogram.Atomic{&l.Delivery, &l.Ack, &l.Connect} {
		if *h == nil {
			*h = new(histogram.Atomic)
		}
	}
	return l
}

// Latency returns the histograms the shard records into.
func (s *Shard) Latency() Latency { return s.opts.Latency }

// monoEpoch anchors the shard's monotonic time stamps (message.readAt).
var monoEpoch = time.Now()

// monoOf is t's monotonic time in nanoseconds since monoEpoch; t must
// come from time.Now. It is never 0 for a time after the package's start,
// which lets 0 mean "no stamp".
func monoOf(t time.Time) int64 { return int64(t.Sub(monoEpoch)) | 1 }

// monoNow is monoOf(time.Now()).
func monoNow() int64 { return monoOf(time.Now()) }

// maxAckStamps bounds the acknowledgement stamps a reader keeps until its
// outbox flush: the flush comes at least every outboxPackets packets.
const maxAckStamps = outboxPackets

// noteAck keeps the read time of a PUBLISH whose PUBACK/PUBREC has just
// been queued, for the reader's next outbox flush; reader only.
func (c *conn) noteAck(read int64) {
	if read == 0 {
		return
	}
	in := c.in
	if in == nil || in.nacks == len(in.acks) {
		c.shard.opts.Latency.Ack.Record(monoNow() - read)
		return
	}
	in.acks[in.nacks] = read
	in.nacks++
}

// flushOut flushes the reader's outbox and then records the latency of
// the acknowledgements and CONNACK it sent; reader only.
func (c *conn) flushOut() {
	c.logAcked()
	if c.in != nil {
		c.in.out.flush()
	}
	c.recordSent()
}

// recordSent records the acknowledgements and the CONNACK queued since
// the last flush as sent now.
func (c *conn) recordSent() {
	in := c.in
	if in == nil || (in.connRead == 0 && in.nacks == 0) {
		return
	}
	now, lat := monoNow(), &c.shard.opts.Latency
	if in.connRead != 0 {
		lat.Connect.Record(now - in.connRead)
		in.connRead = 0
	}
	for _, read := range in.acks[:in.nacks] {
		lat.Ack.Record(now - read)
	}
	in.nacks = 0
}

// recordDeliveries records the deliveries of the batch just written in
// full; c.w.mu is held.
func (c *conn) recordDeliveries() {
	b := c.w.b
	if b == nil || len(b.stamps) == 0 {
		return
	}
	now, h := monoNow(), c.shard.opts.Latency.Delivery
	for _, read := range b.stamps {
		h.Record(now - read)
	}
	b.stamps = b.stamps[:0]
	if len(b.traced) > 0 {
		c.traceWritten(b.traced)
		b.traced = b.traced[:0]
	}
}
