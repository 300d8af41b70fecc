package shard

import (
	"time"

	"berth.dev/broker/internal/topic"
	"berth.dev/broker/packet"
)

// A slab hands out messages, and the bytes they copy from PUBLISH packets,
// in chunks shared by the packets that arrived together: a publisher
// sending back to back costs its reader two allocations per chunk of up
// to slabMessages messages instead of two per message. It lives in the
// reader's pooled scratch (inbound.slab), so it belongs to the reading
// goroutine holding that.
//
// Chunks are sized to what the reader has buffered and are let go when
// the buffer runs dry (release), so an idle connection holds no chunk and
// a lone packet gets a chunk of one. A message keeps its whole chunk
// reachable, which is harmless while it is being delivered; whatever may
// hold one for long takes an owned copy instead (message.own): the
// retained store, the queue of an offline session, and the queue of a
// session whose writer has fallen so far behind that it holds messages
// from pinnedRunsMax different chunks.
//
// The slab is in the reader's scratch, not in the connection, since it
// holds nothing between bursts (64 B a held connection would keep,
// docs/idle-connections.md): it is let go before the scratch goes back
// to its pool (releaseScratch). What only messages with properties use
// is behind extra, kept with the scratch.
type slab struct {
	msgs  []message // every message of the chunk knows its first (chunk)
	bytes []byte
	extra *slabExtra // made on the first message with properties
	pool  *msgPool   // where bigger messages get their buffers; nil: the heap
}

// slabExtra are the chunks of a slab that only messages with properties
// take from.
type slabExtra struct {
	props []packet.UserProperty
	hdrs  []hdrCache // header caches (message.hdr)
	pps   []pubProps // forwarded properties (message.props)
}

const (
	slabMessages = 32       // most messages in a chunk
	slabBytes    = 16 << 10 // most bytes in a chunk
	slabProps    = 64       // most user properties in a chunk
	// A message needing more than a quarter of a chunk, or more user
	// properties than that, gets buffers of its own, from the shard's
	// pool (msgbuf.go): big payloads gain nothing from packing and would
	// pin the others.
	slabMaxCopy  = slabBytes / 4
	slabMaxProps = slabProps / 4

	// pinnedRunsMax bounds the chunks a connected session's queue may
	// hold on to: a delivery that would add one more gets an owned copy.
	pinnedRunsMax = 32
)

// newMessage is newMessage for a packet read with more bytes of input
// still buffered after it.
func (sl *slab) newMessage(p *packet.Publish, topicName []byte, now time.Time, publisher topic.SubscriberID, more int) *message {
	n, propBytes := copySize(topicName, p.Payload, &p.Props)
	need := n
	withHeaders := cachesHeaders(&p.Props, propBytes)
	if withHeaders {
		// Only a message with properties caches headers (message.header);
		// the others' are encoded per delivery (appendBareHeader).
		need += headerReserve(len(topicName), propBytes)
	}
	nup := len(p.Props.UserProperties)
	if need > slabMaxCopy || nup > slabMaxProps {
		return sl.pool.newMessage(p, topicName, now, publisher)
	}
	// Messages like this one that are already buffered, this one included.
	ahead := 1 + more/(n+4)
	if len(sl.msgs) == 0 && ahead == 1 && sl.pool != nil && fitsSmall(need, withHeaders, nup) {
		return sl.pool.newSmall(p, topicName, now, publisher) // alone in its read: no chunk of one (smallmsg.go)
	}
	if len(sl.msgs) == 0 {
		sl.msgs = make([]message, min(ahead, slabMessages))
		base := &sl.msgs[0]
		base.chunkMsgs = uint8(len(sl.msgs))
		for i := range sl.msgs {
			sl.msgs[i].chunk = base
		}
	}
	m := &sl.msgs[0]
	sl.msgs = sl.msgs[1:]
	var ex *slabExtra
	if withHeaders || nup > 0 {
		if sl.extra == nil {
			sl.extra = new(slabExtra)
		}
		ex = sl.extra
	}
	if withHeaders {
		if len(ex.hdrs) == 0 {
			ex.hdrs = make([]hdrCache, min(ahead, slabMessages))
		}
		m.hdr.Store(&ex.hdrs[0])
		ex.hdrs = ex.hdrs[1:]
		if len(ex.pps) == 0 {
			ex.pps = make([]pubProps, min(ahead, slabMessages))
		}
		m.props = &ex.pps[0]
		ex.pps = ex.pps[1:]
	}
	if cap(sl.bytes)-len(sl.bytes) < need {
		sl.bytes = make([]byte, 0, min(ahead*need, slabBytes))
	}
	at := len(sl.bytes)
	sl.bytes = sl.bytes[:at+need]
	var ups []packet.UserProperty
	if nup > 0 {
		if cap(ex.props)-len(ex.props) < nup {
			ex.props = make([]packet.UserProperty, 0, max(min(ahead*nup, slabProps), nup))
		}
		k := len(ex.props)
		ex.props = ex.props[:k+nup]
		ups = ex.props[k : k : k+nup]
	}
	m.build(sl.bytes[at:at:at+need], ups, p, topicName, now, publisher)
	return m
}

// release lets go of the current chunks: the reader has nothing more
// buffered and is about to wait for input.
// The extra chunks' holder stays, empty: a publisher of messages with
// properties does not make it again per burst.
func (sl *slab) release() {
	if sl.extra != nil {
		*sl.extra = slabExtra{}
	}
	*sl = slab{extra: sl.extra, pool: sl.pool}
}

// own returns m itself, or, for a slab message or a pooled one (msgbuf.go),
// a copy that holds only its own memory, made once and shared by every
// caller. The copy carries m's log offset, so m must be logged first (a
// queue, an inflight window: publishAt appends before it routes); the
// retained store takes a copy of its own (retainedCopy). The caller must
// hold m (a pooled one: a reference) while it copies.
func (m *message) own() *message {
	if m.chunk == nil && m.buf == nil {
		return m
	}
	if c := m.owned.Load(); c != nil {
		return c
	}
	c := m.copyOwned()
	c.off, c.lost = m.off, m.lost
	c.readAt = m.readAt
	c.trace = m.trace
	if !m.owned.CompareAndSwap(nil, c) {
		return m.owned.Load()
	}
	return c
}

// retainedCopy returns what the retained store keeps of m: a message
// holding only its own memory, not in the log (offset 0: delivered
// ungated, outside cursors), to which nothing is written once it is shown.
// That is m itself when m holds its own memory and will not be logged;
// else a fresh copy, not m's owned copy: setRetained runs before m is
// appended, and the owned copy must carry the record's offset (own).
func (s *Shard) retainedCopy(m *message) *message {
	if m.chunk == nil && m.buf == nil && m.off == 0 && (s.log == nil || m.qos == 0) {
		return m
	}
	return m.copyOwned()
}

// copyOwned copies m into memory of its own: the message, not its place
// in the log or its delivery state.
func (m *message) copyOwned() *message {
	p := packet.Publish{QoS: m.qos, Retain: m.retain, Topic: m.topic, Payload: m.payload, Props: m.props.full()}
	c := newMessage(&p, m.topic, time.Unix(0, m.created), m.publisher)
	c.expireAt = m.expireAt
	c.dead = m.dead
	return c
}
