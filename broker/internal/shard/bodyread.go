package shard

import (
	"time"

	"berth.dev/broker/internal/topic"
	"berth.dev/broker/packet"
)

// A PUBLISH too big for the slab (more than slabMaxCopy) is read straight
// from the socket into the pooled buffer its message will live in
// (msgbuf.go), and the message is built around the bytes where they
// landed: its payload is never copied in user space. The fixed header is
// read first (packet.Reader.Header), so that a packet over the maximum
// size is refused (0x95) before any buffer is taken; the body then goes
// into a buffer sized from the remaining length (packet.Reader.BodyInto),
// with room after it for the cached headers (message.header).
//
// A peer that declares a big packet and stalls holds that one buffer
// until its read deadline (keep alive) or a kick ends the read; a shard
// lends at most bodyReadingMax bytes to bodies still arriving, and past
// that reads them as any other packet, into a read buffer that grows only
// as the bytes arrive. A body no message was built in (a malformed
// packet, a refused one) goes back to the pool when its packet has been
// handled (dropBody). The buffer is held in the reader's inbound scratch,
// which an idle connection does not hold.

const (
	// bodyReadingMax bounds the pooled bytes a shard lends to bodies
	// still arriving: what peers that declare big packets and stall can
	// make it hold.
	bodyReadingMax = 32 << 20
	// bodyTopicRoom is the topic and property bytes a body's buffer is
	// sized for beyond the remaining length, for the cached headers
	// (headerReserve); a message needing more is copied (msgPool.inPlace).
	bodyTopicRoom = 128
)

// readPacket reads the next packet as packet.Reader.ReadPacket does,
// except that a PUBLISH with more than slabMaxCopy bytes of body is read
// into a pooled buffer, left in the scratch (inbound.body) for
// handlePublish to build its message in (newMessage). The read loop calls
// dropBody once the packet is handled.
func (c *conn) readPacket(maxSize int) (packet.FixedHeader, []byte, error) {
	fh, err := c.rd.Header(maxSize) // 0x95 here, before any buffer is taken
	if err != nil {
		return fh, nil, err
	}
	if fh.Type == packet.TypePublish && fh.Remaining > slabMaxCopy {
		if b := c.shard.msgBufs.lend(fh.Remaining + headerReserve(bodyTopicRoom, 0)); b != nil {
			body := b.b[:fh.Remaining:fh.Remaining]
			err := c.rd.BodyInto(body)
			c.shard.msgBufs.reading.Add(-int64(len(b.b)))
			if err != nil {
				b.put()
				return fh, nil, err
			}
			in := c.scratch()
			in.body, in.bodyLen = b, fh.Remaining
			return fh, body, nil
		}
	}
	body, err := c.rd.Body()
	return fh, body, err
}

// lend returns a buffer of at least n bytes for a body still to be read,
// counted in p.reading until the caller subtracts it; nil when n is not
// pooled, or the shard lends bodyReadingMax bytes already.
func (p *msgPool) lend(n int) *msgBuf {
	i := msgBufClass(n)
	if p == nil || i < 0 {
		return nil
	}
	size := int64(msgBufSize(i))
	if p.reading.Add(size) > bodyReadingMax {
		p.reading.Add(-size)
		return nil
	}
	return p.get(n)
}

// newMessage builds the message of the PUBLISH p being handled, holding
// one reference (the caller's): in the buffer its body was read into
// (readPacket), or else from the slab.
func (c *conn) newMessage(p *packet.Publish, topicName []byte, now time.Time, publisher topic.SubscriberID) *message {
	if in := c.in; in != nil && in.body != nil {
		b := in.body
		in.body = nil
		return c.shard.msgBufs.inPlace(b, in.bodyLen, p, topicName, now, publisher)
	}
	return c.scratch().slab.newMessage(p, topicName, now, publisher, c.rd.Buffered())
}

// dropBody gives back the buffer of a PUBLISH body no message was built
// in; nothing aliases it once its packet has been handled.
func (c *conn) dropBody() {
	if in := c.in; in != nil && in.body != nil {
		in.body.put()
		in.body = nil
	}
}

// inPlace builds a message in b, whose first n bytes are the body pk was
// decoded from, holding one reference (the caller's): the topic, payload
// and properties stay where they were read, and the rest of b holds the
// cached headers. A topic from an alias is copied in after the body. When
// b lacks the room (a long topic or many properties), the message is
// copied into a buffer that has it and b goes back.
func (p *msgPool) inPlace(b *msgBuf, n int, pk *packet.Publish, topicName []byte, now time.Time, publisher topic.SubscriberID) *message {
	_, propBytes := copySize(nil, nil, &pk.Props)
	end := n
	inBody := len(pk.Topic) > 0 && len(pk.Topic) == len(topicName) && &pk.Topic[0] == &topicName[0]
	if !inBody {
		end += len(topicName)
	}
	if end+headerReserve(len(topicName), propBytes) > len(b.b) {
		m := p.newMessage(pk, topicName, now, publisher)
		b.put()
		return m
	}
	if !inBody {
		topicName = append(b.b[n:n], topicName...)
	}
	m, ups := pooledMessage(b, pk)
	m.fill(keepBytes, ups, pk, topicName, now, publisher)
	m.setHeaderRoom(b.b[end:len(b.b):len(b.b)])
	return m
}

// keepBytes is fill's take for a message built where its packet was read:
// the bytes themselves, capped so that nothing appends over what follows.
func keepBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return b[:len(b):len(b)]
}
