package shard

import (
	"time"

	"berth.dev/broker/packet"
)

// fill builds the next batch in c.w.vec and returns its number of
// vectors, and whether the connection is closing (then only control
// packets, such as the final DISCONNECT, are written).
func (c *conn) fill() (n int, closing bool) {
	sess := c.sess
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if c.closing || sess.conn != c {
		c.startBatchLocked()
		return len(c.w.b.vec), true
	}
	n = c.fillLocked()
	c.logSentLocked()
	return n, false
}

// startBatchLocked empties the batch and puts the waiting control packets
// first in it; sess.mu is held.
func (c *conn) startBatchLocked() {
	w := c.w.b
	w.releaseHeld() // the last batch is written, or abandoned
	w.vec = w.vec[:0]
	w.arena = w.arena[:0]
	w.run = 0
	w.msgs = 0
	w.stamps = w.stamps[:0]
	clear(w.traced)
	w.traced = w.traced[:0]
	if len(c.ctrl) > 0 {
		c.w.ctrlOut, c.ctrl = c.ctrl, c.w.ctrlOut[:0]
		w.vec = append(w.vec, c.w.ctrlOut)
	}
}

// fillLocked builds the batch of a connection that is not closing:
// control packets, stored messages, queued messages. It returns the
// number of vectors; sess.mu is held.
func (c *conn) fillLocked() int {
	c.startBatchLocked()
	sess, w := c.sess, c.w.b
	now := time.Now().UnixNano()
	bytes := 0
	if len(w.vec) > 0 {
		bytes = len(w.vec[0]) // the control packets
	}
	s := c.shard
	if s.log != nil && (sess.stored.len() > 0 || sess.replaying > 0) {
		bytes = c.fillStoredLocked(bytes, now)
		if sess.stored.len() > 0 || sess.replaying > 0 {
			return len(w.vec) // newer queued messages wait for these
		}
	}
	for sess.queue.len() > 0 && bytes < maxBatchBytes && len(w.vec) < maxBatchVecs && w.msgs < maxBatchMsgs {
		d := sess.queue.peek()
		if d.qos > 0 && len(sess.inflight) >= int(c.window) {
			break // [MQTT-4.9.0-2] the client's Receive Maximum
		}
		if s.syncAcks && !c.deliverableLocked(d.msg) {
			break // its record is not durable yet: the ack loop wakes the writer
		}
		dv := sess.queue.pop()
		sess.queuedBytes -= dv.msg.size
		live := dv.live
		dv.live = false // a redelivery is no sample
		if dv.msg.expired(now) {
			sess.deadLetterLocked(DropExpired, dv.msg, dv.qos) // [MQTT-3.3.2-5]
			dv.msg.unref()
			continue
		}
		start := len(w.arena)
		hdr, ok := c.appendPublishLocked(&dv, now)
		if !ok {
			sess.deadLetterLocked(DropTooLarge, dv.msg, dv.qos) // [MQTT-3.1.2-25]
			dv.msg.unref()
			continue
		}
		if n := len(dv.msg.payload); n > 0 && n <= copyPayloadMax {
			// Copied after its header, while the queue's reference
			// still holds the message: the batch points at no payload.
			w.arena = append(w.arena, dv.msg.payload...)
			w.addArena(start)
		} else {
			w.addArena(start)
			if n > 0 {
				w.vec = append(w.vec, dv.msg.payload)
				if dv.msg.buf != nil {
					dv.msg.ref() // the batch's, until written
					w.held = append(w.held, dv.msg)
				}
			}
		}

		if live {
			w.stamps = append(w.stamps, dv.msg.readAt)
			if tr := dv.msg.trace; tr != nil {
				w.traced = append(w.traced, tracedWrite{tr: tr, qos: dv.qos, id: dv.id})
				if dv.qos > 0 {
					sess.traceInflightLocked(dv.id, dv.qos, tr)
				}
			}
		}
		bytes += len(hdr) + len(dv.msg.payload)
		w.msgs++
		if dv.qos == 0 {
			// The queue entry's reference ends here; a QoS 1/2 one
			// passed to the inflight entry (appendPublishLocked).
			dv.msg.unref()
		}
	}
	if sess.fullSince != 0 && sess.queue.len() < s.opts.MaxQueuedMessages && int64(sess.queuedBytes) < s.maxQueuedBytes.Load() {
		sess.fullSince = 0
	}
	if w.msgs > 0 {
		sess.sentAt = now
	}
	if (sess.aside != nil && sess.aside.drained != nil || sess.stalled) && !sess.behindLocked() {
		sess.caughtUpLocked() // publishers pausing on it go on (stall.go)
	}
	return len(w.vec)
}

// copyPayloadMax is the largest payload copied into the batch after its
// header instead of written from the message by a vector of its own: a
// copy of a few hundred bytes costs less than a vector, which the kernel
// handles as a segment of its own, and a run of small packets then goes
// out as one vector. Bigger payloads are written from where they are.
const copyPayloadMax = 512

// addArena adds the packet bytes at arena[start:] to the batch: to the
// last vector when that is the arena run ending at start (nothing came
// between: no other vector, no stored payload), else as a new vector. The
// run is re-sliced from the arena, so it follows the arena when an append
// moved it (the old array stays with the vectors before).
func (w *batch) addArena(start int) {
	end := len(w.arena)
	if w.run != 0 && w.run == len(w.vec) && w.runAt+len(w.vec[w.run-1]) == start &&
		(len(w.files) == 0 || w.files[len(w.files)-1].at < len(w.vec)) {
		w.vec[w.run-1] = w.arena[w.runAt:end:end]
		return
	}
	w.vec = append(w.vec, w.arena[start:end:end])
	w.run, w.runAt = len(w.vec), start
}

// appendPublishLocked gives dv a packet id (QoS > 0), encodes its
// per-subscriber PUBLISH header into the batch arena and records it as
// inflight. It returns the header, or false, leaving the arena as it was,
// when the message exceeds the client's Maximum Packet Size.
func (c *conn) appendPublishLocked(dv *delivery, now int64) ([]byte, bool) {
	sess, w := c.sess, c.w.b
	if dv.qos > 0 {
		dv.id = sess.nextIDLocked()
		dv.state = statePublish
		sess.seq++
		dv.seq = sess.seq
		if tr := sess.tracedLocked(); len(tr) > 0 {
			delete(tr, dv.id) // a stale trace must not end at this copy's ack
		}
	}
	start := len(w.arena)
	var ok bool
	w.arena, ok = c.encodePublishLocked(w.arena, dv, false, now)
	if !ok {
		w.arena = w.arena[:start]
		return nil, false
	}
	if dv.qos > 0 {
		sess.putInflightLocked(dv.id, dv)
		c.noteSentLocked(dv)
	}
	return w.arena[start:len(w.arena):len(w.arena)], true
}

// encodePublishLocked appends the PUBLISH header for d to dst. The common
// case copies the message's cached header and patches packet id and
// flags; a header that differs per subscriber (subscription identifiers,
// a topic alias, a remaining expiry) is encoded as a variant. ok is false
// when the packet exceeds the client's Maximum Packet Size (dst is then
// unusable past its original length).
func (c *conn) encodePublishLocked(dst []byte, d *delivery, dup bool, now int64) ([]byte, bool) {
	m := d.msg
	v5 := c.version == packet.Version5
	start := len(dst)
	var alias uint16
	newAlias := false
	if v5 && c.outAliasMax > 0 {
		alias, newAlias = c.outAlias(m.topic)
	}
	if v5 && (d.nSub > 0 || alias != 0 || m.expireAt != 0) {
		p := packet.Publish{QoS: d.qos, Topic: m.topic, Payload: m.payload, Props: m.props.full()}
		if d.qos > 0 {
			p.PacketID = d.id
		}
		if alias != 0 {
			p.Props.Has.Set(packet.PropTopicAlias)
			p.Props.TopicAlias = alias
			if !newAlias {
				p.Topic = nil // [MQTT-3.3.2-12] the alias stands for the topic
			}
		}
		if m.expireAt != 0 {
			p.Props.MessageExpiry = m.remainingExpiry(now) // [MQTT-3.3.2-6]
		}
		if d.nSub > 0 {
			c.w.subIDs = d.appendSubIDs(c.w.subIDs[:0]) // [MQTT-3.3.4-3]
			p.Props.SubscriptionIDs = c.w.subIDs
		}
		var err error
		if dst, err = p.AppendHeader(dst, c.version); err != nil {
			c.logger().Error("encoding PUBLISH", "err", err)
			return dst, false
		}
		if m.stored {
			dst = addRemaining(dst, start, m.payLen)
		}
	} else if !v5 || m.props.none() {
		// No properties to send: encoded in place, as cheap as copying a
		// cached header and without touching the message's cache.
		dst = appendBareHeader(dst, c.version, d.qos, m.topic, m.payloadLen())
		if d.qos > 0 {
			packet.SetPacketID(dst[start:], d.id)
		}
	} else {
		h, err := m.header(c.version, d.qos)
		if err != nil {
			c.logger().Error("encoding PUBLISH", "err", err)
			return dst, false
		}
		dst = append(dst, h...)
		if d.qos > 0 {
			packet.SetPacketID(dst[start:], d.id)
		}
	}
	packet.SetPublishFlags(dst[start:], dup && d.qos > 0, d.retain)
	if c.maxOut > 0 && len(dst)-start+m.payloadLen() > int(c.maxOut) {
		if newAlias {
			delete(c.outAliases, string(m.topic))
		}
		return dst, false
	}
	return dst, true
}

// outAlias returns the outbound topic alias for name, assigning the next
// free one while the client's Topic Alias Maximum allows; isNew reports a
// fresh assignment (the topic must then be sent with the alias).
func (c *conn) outAlias(name []byte) (alias uint16, isNew bool) {
	if a, ok := c.outAliases[string(name)]; ok {
		return a, false
	}
	if len(c.outAliases) >= int(c.outAliasMax) {
		return 0, false
	}
	if c.outAliases == nil {
		c.outAliases = make(map[string]uint16)
	}
	a := uint16(len(c.outAliases) + 1)
	c.outAliases[string(name)] = a
	return a, true
}
