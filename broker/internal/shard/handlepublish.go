package shard

import (
	"strings"
	"time"
	"unicode/utf8"

	"berth.dev/broker/packet"
)

// handlePublish processes an inbound PUBLISH. A QoS 1/2 message is
// acknowledged only after it has been handed to every matching session's
// queue, having accepted ownership [MQTT-4.3.2-4] [MQTT-4.3.3-8]: a
// PUBACK never precedes a silent drop.
func (c *conn) handlePublish(p *packet.Publish) error {
	s := c.shard
	s.stats.msgsIn.Add(1)
	c.info.Traffic.addMessagesIn(1)
	name := p.Topic
	if c.version == packet.Version5 && p.Props.Has.Has(packet.PropTopicAlias) {
		a := int(p.Props.TopicAlias)
		if a > s.opts.TopicAliasMaximum {
			return packet.ErrTopicAliasInvalid // [MQTT-3.3.2-9] [MQTT-3.3.2-10]
		}
		if len(name) == 0 {
			if a >= len(c.inAliases) || c.inAliases[a] == nil {
				return packet.ErrProtocol // unknown alias (MQTT 5.0 section 3.3.2.3.4)
			}
			name = c.inAliases[a]
		} else {
			if c.inAliases == nil {
				// Made on the first alias: most clients never use one.
				c.inAliases = make([][]byte, s.opts.TopicAliasMaximum+1)
			}
			c.inAliases[a] = append(c.inAliases[a][:0], name...)
		}
	}
	sess := c.sess
	if p.QoS == 2 {
		sess.mu.Lock()
		_, dup := sess.awaitingRelLocked()[p.PacketID]
		n := len(sess.awaitingRelLocked())
		sess.mu.Unlock()
		if dup {
			// [MQTT-4.3.3-10] already received: acknowledge again, do not
			// deliver a second time.
			c.sendAck(packet.TypePubrec, p.PacketID, packet.CodeSuccess)
			return nil
		}
		if n >= int(s.opts.ReceiveMaximum) {
			return packet.ErrReceiveMaximumExceeded // [MQTT-3.3.4-8]
		}
	}
	var tr *msgTrace
	if s.opts.Tracing.on() {
		tr = c.sampleTrace(p, name)
	}
	// [MQTT-4.7.2-1] clients do not publish into the broker's $SYS tree.
	allowed := !strings.HasPrefix(string(name), "$SYS/") && string(name) != "$SYS"
	// Dead letters come from the shard only: a client cannot forge one.
	allowed = allowed && !isDeadLetterTopic(name)
	if allowed && c.info.Authorizer != nil {
		allowed = c.info.Authorizer.CanPublish(name)
	}
	if tr != nil {
		tr.traceACL(allowed)
	}
	code, drop := packet.ErrNotAuthorized, DropNotAuthorized
	// One clock read per PUBLISH at most, shared by the packets of one
	// read (conn.clock): the topic's rate window, the message's
	// timestamps and its queueing all use it (a vDSO clock read is a
	// measurable share of a small message's CPU).
	now := c.clock()
	if allowed {
		var err error
		checked := now // the quota span starts before a throttle's pause
		code, drop, err = c.admitPublish(name, p, &now)
		if in := c.in; in != nil && !now.Equal(checked) {
			in.clock = now // throttled: the packets after it were read after the pause
		}
		if tr != nil {
			tr.traceQuota(checked, code)
		}
		if err != nil {
			if tr != nil {
				tr.endRoot(time.Now(), "refused: "+code.String())
			}
			return err // over a size limit, RETAIN refused, or a sustained rate abuse
		}
		allowed = code == packet.CodeSuccess
	}
	if allowed && p.Props.Has.Has(packet.PropPayloadFormat) && p.Props.PayloadFormat == 1 && !utf8.Valid(p.Payload) {
		// [MQTT-3.3.2-4] a payload that says it is UTF-8 and is not: the
		// receiver may refuse it with 0x99 rather than pass it on.
		allowed, code, drop = false, packet.ErrPayloadFormatInvalid, DropPayloadFormat
		refund(c.info.Limiter)
	}
	if !allowed {
		sess.mu.Lock()
		sess.dropLocked(drop)
		sess.mu.Unlock()
		if (drop == DropQuotaExceeded || drop == DropTopicRate) && p.QoS > 0 && s.opts.DeadLetters {
			s.deadLetter(drop, newMessage(p, name, time.Now(), sess.id), p.QoS, c.clientID)
		}
		if tr != nil {
			tr.endRoot(time.Now(), "refused: "+code.String())
		}
		if c.version != packet.Version5 {
			// [MQTT-3.3.5-2] 3.1.1 cannot say no: acknowledge and drop.
			code = packet.CodeSuccess
		}
		switch p.QoS {
		case 1:
			c.sendAck(packet.TypePuback, p.PacketID, code)
		case 2:
			if code == packet.CodeSuccess {
				sess.mu.Lock()
				sess.putAwaitingRelLocked(p.PacketID, 0) // not logged: nothing to deliver twice
				sess.mu.Unlock()
			}
			c.sendAck(packet.TypePubrec, p.PacketID, code)
		}
		return nil
	}
	m := c.newMessage(p, name, now, sess.id) // in the buffer a big body was read into (bodyread.go)
	if p.QoS == 2 {
		m.inID = p.PacketID // logged with the message: awaiting PUBREL (qos2.go)
	}
	m.readAt = monoOf(now)
	m.trace = tr
	matched := s.publishAt(m, &c.in.matches, &c.in.out, now)
	if m.lost && p.QoS > 0 {
		refund(c.info.Limiter)
		err := c.refuseUnlogged(m, p, tr)
		m.unref() // the reader's reference (msgbuf.go)
		return err
	}
	// Accepted: the one count billing bills (Stats.MessagesAccepted).
	s.stats.msgsAccept.Add(1)
	code = packet.CodeSuccess
	if matched == 0 && c.version == packet.Version5 {
		code = packet.CodeNoMatchingSubscribers
	}
	var err error
	if p.QoS > 0 {
		// [MQTT-4.3.2-4] [MQTT-4.3.3-8], after the fsync under -fsync always.
		err = c.ackPublish(m, p.QoS, p.PacketID, code)
	}
	m.unref() // the reader's reference (msgbuf.go)
	if tr != nil && !tr.parked {
		errText := ""
		if err != nil {
			errText = "not logged: " + err.Error()
		}
		tr.endRoot(time.Now(), errText)
	}
	return err
}
