package shard

import (
	"time"
	"unsafe"

	"berth.dev/broker/internal/topic"
	"berth.dev/broker/packet"
)

// A lone small message, one that came alone in its read (a publisher
// at a steady 1,000 msg/s, a device reporting now and then), would cost
// its reader a slab chunk of one: two allocations, the message and its
// bytes, for the garbage collector to find a moment later. It comes
// instead from the shard's pool of small messages: the message and the
// bytes it copies in one object, counted by reference like a big
// message's buffer (msgbuf.go, with the same holders), whose last holder
// gives the whole object back, the message zeroed. Handling a lone
// message then allocates nothing (TestLoneMessageAllocations), and the
// GC does not run every few seconds for it.
//
// Only a message without properties is pooled so: one with properties
// caches its headers (message.hdr), which a slab chunk or a big buffer
// holds. A message in a burst still comes from its slab chunk, which
// costs a few allocations per read.

// smallMsgSize is the pooled object's size, one of the Go allocator's
// size classes; what is left after the message and its holder is the
// bytes it copies: smallMsgBytes, 416 (312 before the message's properties
// moved out of line), for the topic and payload.
const (
	smallMsgSize  = 640
	smallMsgBytes = smallMsgSize - unsafe.Sizeof(msgBuf{}) - unsafe.Sizeof(message{})
)

// smallMsg is a pooled small message: m, whose buf is &buf, whose
// topic and payload are in bytes.
type smallMsg struct {
	buf   msgBuf
	m     message
	bytes [smallMsgBytes]byte
}

// fitsSmall reports whether a message of n bytes (copySize), without
// properties (propBytes 0 and no forwarded property), is a small one.
func fitsSmall(n int, withHeaders bool, userProps int) bool {
	return n <= int(smallMsgBytes) && !withHeaders && userProps == 0
}

// newSmall builds a message from the pool of small messages, holding
// one reference (the caller's); pk must fit (fitsSmall).
func (p *msgPool) newSmall(pk *packet.Publish, topicName []byte, now time.Time, publisher topic.SubscriberID) *message {
	b, _ := p.small.Get().(*msgBuf)
	if b == nil {
		sm := new(smallMsg)
		sm.buf = msgBuf{b: sm.bytes[:], pool: p, small: &sm.m}
		b = &sm.buf
	}
	p.gets.Add(1)
	m := b.small
	m.buf = b
	m.refs.Store(1)
	m.build(b.b[:0], nil, pk, topicName, now, publisher)
	return m
}

// putSmall gives a small message's object back, its message zeroed:
// nothing holds it any more (msgBuf.put).
func (b *msgBuf) putSmall() {
	*b.small = message{}
	b.pool.small.Put(b)
}
