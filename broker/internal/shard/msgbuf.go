package shard

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"berth.dev/broker/internal/topic"
	"berth.dev/broker/packet"
)

// Big messages (more than the slab packs, slabMaxCopy) take their memory
// from a per-shard pool of size-classed buffers instead of the heap: a
// 64 KiB payload then costs no fresh allocation to zero and no garbage to
// collect. Such a message counts its holders (message.refs); the last to
// let go gives the buffer back, overwritten first in poisoning mode
// (poison.go). The holders, each taking one reference and releasing it:
//
//	the reader that built it      until handlePublish returns
//	each session queue entry      enqueue → popped (written, dropped, moved to offsets)
//	each inflight entry           written → PUBACK, PUBREC, dropped, session ended
//	the writer's batch (held)     filled → written in full, or abandoned
//	each pending dead letter      deadLetter → its copy published
//
// The batch holds its own reference because a PUBACK can arrive before
// the write that carries the PUBLISH has finished. Whatever may keep a
// message for long with no point to release it takes an unpooled copy
// (message.own): the retained store (and the Store record that aliases
// its payload), wills, $SYS and admin messages are never pooled. A
// reference never released only means the garbage collector frees the
// buffer instead of the pool; one released too often would hand a held
// buffer to the next message, so releases sit where a holder provably
// lets go, and the tests run in poisoning mode with self-describing
// payloads (TestBuffersNotReusedWhileHeld, FuzzBufferSchedule) and count
// that every buffer comes back (TestMessageBuffersReturned).

// Size classes: four per doubling from msgBufMin up to msgBufMax, so a
// message wastes under a quarter of its buffer. Bigger messages are
// allocated as before.
const (
	msgBufMinShift = 12 // 4 KiB
	msgBufMaxShift = 20 // 1 MiB
	msgBufClasses  = (msgBufMaxShift-msgBufMinShift)*4 + 1
)

// msgBuf is a pooled buffer and the pool it goes back to; the holder is
// reused with its buffer, so recycling allocates nothing.
type msgBuf struct {
	b     []byte // the whole class size
	pool  *msgPool
	class uint8
	// small is the message in the same pooled object, for a small
	// message's (smallmsg.go); nil for a buffer of a size class.
	small *message
}

// msgPool is a shard's pool of message buffers.
type msgPool struct {
	classes [msgBufClasses]sync.Pool // *msgBuf
	small   sync.Pool                // *msgBuf of a smallMsg (smallmsg.go)
	poison  bool                     // overwrite buffers given back (Options.poisonFreed)
	// gets and puts count buffers handed out and given back: equal once
	// nothing holds a pooled message (TestMessageBuffersReturned).
	gets, puts atomic.Uint64
	// reading is the bytes of the buffers lent to PUBLISH bodies still
	// arriving (bodyread.go), at most bodyReadingMax.
	reading atomic.Int64
}

// msgBufClass returns the class of a buffer of n bytes, or -1 when n is
// outside the pooled range.
func msgBufClass(n int) int {
	if n <= 1<<msgBufMinShift {
		return 0
	}
	if n > 1<<msgBufMaxShift {
		return -1
	}
	k := bits.Len(uint(n-1)) - 1 // 2^k < n <= 2^(k+1)
	base := 1 << k
	j := (n - base + base/4 - 1) / (base / 4) // quarters above base, 1..4
	return (k-msgBufMinShift)*4 + j
}

// msgBufSize is the size of class i's buffers.
func msgBufSize(i int) int {
	k, j := i/4+msgBufMinShift, i%4
	return (1 << k) + j*(1<<k)/4
}

// get returns a buffer of at least n bytes, or nil when n is not pooled.
func (p *msgPool) get(n int) *msgBuf {
	i := msgBufClass(n)
	if i < 0 {
		return nil
	}
	b, _ := p.classes[i].Get().(*msgBuf)
	if b == nil {
		b = &msgBuf{b: make([]byte, msgBufSize(i)), pool: p, class: uint8(i)}
	}
	p.gets.Add(1)
	return b
}

// put gives b back; nothing may read it any more.
func (b *msgBuf) put() {
	p := b.pool
	if p.poison {
		for i := range b.b {
			b.b[i] = poisonByte
		}
	}
	p.puts.Add(1)
	if b.small != nil {
		b.putSmall()
		return
	}
	p.classes[b.class].Put(b)
}

// newMessage builds a message in a pooled buffer, holding one reference
// (the caller's), or an unpooled one when it does not fit a class or p is
// nil.
func (p *msgPool) newMessage(pk *packet.Publish, topicName []byte, now time.Time, publisher topic.SubscriberID) *message {
	n, propBytes := copySize(topicName, pk.Payload, &pk.Props)
	need := n + headerReserve(len(topicName), propBytes)
	var b *msgBuf
	if p != nil {
		b = p.get(need)
	}
	if b == nil {
		return newMessage(pk, topicName, now, publisher)
	}
	m, ups := pooledMessage(b, pk)
	m.build(b.b[:0], ups, pk, topicName, now, publisher)
	return m
}

// pooledMessage returns a message in b holding one reference (the
// caller's), not filled yet, and room for pk's user properties.
func pooledMessage(b *msgBuf, pk *packet.Publish) (*message, []packet.UserProperty) {
	var ups []packet.UserProperty
	if len(pk.Props.UserProperties) > 0 {
		ups = make([]packet.UserProperty, 0, len(pk.Props.UserProperties))
	}
	// A pooled message is big: its header cache, in the same allocation,
	// costs little beside it, and takes its first headers from the room
	// left in b after the message (headerReserve).
	m := allocMessage(true)
	m.buf = b
	m.refs.Store(1)
	return m, ups
}

// ref takes one more reference to a pooled message; nothing for others.
func (m *message) ref() {
	if m.buf != nil {
		m.refs.Add(1)
	}
}

// unref releases one reference to a pooled message (nil and unpooled:
// nothing); the last gives its buffer back to the pool. Releasing more
// than was taken would recycle a buffer still in use: in poisoning mode
// that panics, otherwise the buffer is left to the garbage collector.
func (m *message) unref() {
	if m == nil || m.buf == nil {
		return
	}
	switch n := m.refs.Add(-1); {
	case n == 0:
		m.buf.put()
	case n < 0 && m.buf.pool.poison:
		panic("shard: pooled message released more often than held")
	}
}

// releaseHeld releases the batch's references to pooled messages: its
// vectors are written, or will not be.
func (w *batch) releaseHeld() {
	for i, m := range w.held {
		m.unref()
		w.held[i] = nil
	}
	w.held = w.held[:0]
}
