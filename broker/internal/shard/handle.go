package shard

import (
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/topic"
	"berth.dev/broker/packet"
)

// Sentinels returned by handle to end the read loop normally.
var (
	errDisconnect         = errors.New("shard: client disconnected")
	errDisconnectWithWill = errors.New("shard: client disconnected with will")
)

// handle dispatches one packet read after CONNECT.
func (c *conn) handle(fh packet.FixedHeader, body []byte) error {
	v, in := c.version, c.scratch()
	switch fh.Type {
	case packet.TypePublish:
		if err := in.pub.Decode(v, fh, body); err != nil {
			return err
		}
		return c.handlePublish(&in.pub)
	case packet.TypePuback, packet.TypePubrec, packet.TypePubrel, packet.TypePubcomp:
		if err := in.ack.Decode(v, fh, body); err != nil {
			return err
		}
		return c.handleAck(&in.ack)
	case packet.TypeSubscribe:
		if err := in.sub.Decode(v, fh, body); err != nil {
			return err
		}
		return c.handleSubscribe(&in.sub)
	case packet.TypeUnsubscribe:
		if err := in.unsub.Decode(v, fh, body); err != nil {
			return err
		}
		return c.handleUnsubscribe(&in.unsub)
	case packet.TypePingreq:
		var p packet.Ping
		if err := p.Decode(v, fh, body); err != nil {
			return err
		}
		c.send(&pingresp) // [MQTT-3.12.4-1]
		return nil
	case packet.TypeDisconnect:
		if err := in.disc.Decode(v, fh, body); err != nil {
			return err
		}
		return c.handleDisconnect(&in.disc)
	case packet.TypeAuth:
		if err := in.auth.Decode(v, fh, body); err != nil {
			return err
		}
		return c.handleAuth(&in.auth)
	case packet.TypeConnect:
		return packet.ErrProtocol // [MQTT-3.1.0-2] a second CONNECT
	default:
		// CONNACK, SUBACK, UNSUBACK, PINGRESP are server-to-client only.
		if err := fh.Check(); err != nil {
			return err
		}
		return packet.ErrProtocol
	}
}

var pingresp = packet.Ping{Type: packet.TypePingresp}

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
		_, dup := sess.awaitingRel[p.PacketID]
		n := len(sess.awaitingRel)
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
	// One clock read per PUBLISH: the topic's rate window, the message's
	// timestamps and its queueing all use it (a vDSO clock read is a
	// measurable share of a small message's CPU).
	now := time.Now()
	if allowed {
		var err error
		checked := now // the quota span starts before a throttle's pause
		code, drop, err = c.admitPublish(name, p, &now)
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

// sendAck queues a PUBACK, PUBREC, PUBREL or PUBCOMP; reader only (it
// uses the outbox).
func (c *conn) sendAck(t packet.Type, id uint16, code packet.ReasonCode) {
	c.sess.mu.Lock()
	if c.queueBehindLocked(t, id, code) {
		c.sess.mu.Unlock()
		return // [MQTT-4.6.0-2] after the acks waiting for their fsync
	}
	c.sendAckLocked(t, id, code)
	c.sess.mu.Unlock()
	c.outbox().add(c) // sent with the acks of the packets read together
}

// handleAck processes PUBACK, PUBREC, PUBCOMP (our outbound flows) and
// PUBREL (the client's inbound QoS 2 flow).
func (c *conn) handleAck(a *packet.Ack) error {
	sess := c.sess
	sess.mu.Lock()
	defer sess.mu.Unlock()
	var parked bool
	var err error // a QoS 2 state record not logged under -fsync always
	switch a.Type {
	case packet.TypePuback:
		if d, ok := sess.inflight[a.PacketID]; ok && d.qos == 1 {
			delete(sess.inflight, a.PacketID) // the id is free again (MQTT 5.0 section 2.2.1)
			sess.endTraceLocked(a.PacketID, true, "")
			c.noteAckedLocked(&d)
			d.msg.unref() // the inflight entry's; a batch still writing it holds its own
		}
	case packet.TypePubrec:
		d, ok := sess.inflight[a.PacketID]
		if !ok || d.qos != 2 {
			if c.version == packet.Version5 {
				c.sendAckLocked(packet.TypePubrel, a.PacketID, packet.ErrPacketIDNotFound)
			}
			break
		}
		if a.Reason.IsFailure() {
			delete(sess.inflight, a.PacketID) // MQTT 5.0 section 4.3.3: the flow ends
			sess.endTraceLocked(a.PacketID, false, "PUBREC "+a.Reason.String())
			if c.sentLogged(&d) {
				c.appendQoS2Locked(store.StateOutCompleted, a.PacketID)
			}
			d.msg.unref()
			break
		}
		logged := c.sentLogged(&d)
		d.state = stateReleased
		d.msg.unref()
		d.msg = nil // the payload is not needed any more
		sess.inflight[a.PacketID] = d
		if logged {
			if parked, err = c.logQoS2Locked(store.StateOutReleased, a.PacketID, packet.TypePubrel, packet.CodeSuccess); parked || err != nil {
				break // sent once "released" is durable (qos2.go)
			}
		}
		c.sendAckLocked(packet.TypePubrel, a.PacketID, packet.CodeSuccess) // [MQTT-4.3.3-4]
	case packet.TypePubcomp:
		if d, ok := sess.inflight[a.PacketID]; ok && d.state == stateReleased {
			delete(sess.inflight, a.PacketID)
			sess.endTraceLocked(a.PacketID, true, "")
			c.completeOutLocked(a.PacketID)
		}
	case packet.TypePubrel:
		code := packet.CodeSuccess
		if at, ok := sess.awaitingRel[a.PacketID]; ok {
			delete(sess.awaitingRel, a.PacketID) // [MQTT-4.3.3-11]
			if at != 0 {
				if parked, err = c.logQoS2Locked(store.StateInReleased, a.PacketID, packet.TypePubcomp, code); parked || err != nil {
					break // sent once "released" is durable (qos2.go)
				}
			}
		} else if c.version == packet.Version5 {
			code = packet.ErrPacketIDNotFound
		}
		c.sendAckLocked(packet.TypePubcomp, a.PacketID, code)
	}
	c.outbox().add(c) // an answer, or room in the inflight window
	return err
}

// handleSubscribe adds the subscriptions and answers with one SUBACK
// reason per filter [MQTT-3.8.4-6], then queues the matching retained
// messages.
func (c *conn) handleSubscribe(p *packet.Subscribe) error {
	s := c.shard
	sess := c.sess
	v5 := c.version == packet.Version5
	var subID uint32
	if len(p.Props.SubscriptionIDs) > 0 {
		subID = p.Props.SubscriptionIDs[0]
	}
	reasons := make([]packet.ReasonCode, len(p.Subscriptions))
	type retainedReq struct {
		filter string
		opts   topic.Options
	}
	var sendRetained []retainedReq
	replay, err := c.replayRequest(p)
	if err != nil {
		return err
	}
	for i, sub := range p.Subscriptions {
		filter := string(sub.Filter)
		opts := topic.Options{
			QoS: sub.QoS, NoLocal: sub.NoLocal, RetainAsPublished: sub.RetainAsPublished,
			RetainHandling: topic.RetainHandling(sub.RetainHandling), SubscriptionID: subID,
		}
		fail := func(code packet.ReasonCode) {
			if !v5 {
				code = packet.ErrUnspecified // 3.1.1 has only 0x80
			}
			reasons[i] = code
		}
		if !packet.ValidTopicFilter(sub.Filter) {
			fail(packet.ErrTopicFilterInvalid)
			continue
		}
		if c.info.Authorizer != nil && !c.info.Authorizer.CanSubscribe(filter) {
			fail(packet.ErrNotAuthorized)
			continue
		}
		if s.tree.Count(sess.id) >= c.maxSubscriptions() && !c.hasSubscription(filter) {
			fail(packet.ErrQuotaExceeded)
			continue
		}
		existed, err := c.subscribeFilter(filter, opts, replay)
		switch {
		case errors.Is(err, topic.ErrSharedNoLocal):
			return packet.ErrProtocol // [MQTT-3.8.3-4]
		case err != nil:
			fail(packet.ErrTopicFilterInvalid)
			continue
		}
		reasons[i] = packet.ReasonCode(sub.QoS) // granted QoS [MQTT-3.9.3-1]
		f, _ := topic.ParseFilter(filter, 0)
		if opts.SendRetainedOnSubscribe(existed, f.Shared()) {
			sendRetained = append(sendRetained, retainedReq{filter, opts})
		}
	}
	if err := c.persistSubscriptions(); err != nil { // durable before the SUBACK
		return err
	}
	ack := packet.Suback{PacketID: p.PacketID, Reasons: reasons}
	sess.mu.Lock()
	c.sendLocked(&ack) // [MQTT-3.8.4-1]
	sess.mu.Unlock()
	c.outbox().add(c)
	c.runReplay(replay)
	now := time.Now()
	for _, r := range sendRetained {
		c.queueRetained(r.filter, r.opts, now)
	}
	return nil
}

// hasSubscription reports whether the session already holds filter.
func (c *conn) hasSubscription(filter string) bool {
	for _, sub := range c.shard.tree.Subscriptions(c.sess.id, nil) {
		if sub.Filter.Raw == filter {
			return true
		}
	}
	return false
}

// queueRetained queues the retained messages matching filter, with the
// RETAIN flag set [MQTT-3.3.1-8] [MQTT-3.3.1-9].
func (c *conn) queueRetained(filter string, opts topic.Options, now time.Time) {
	var list []*message
	_ = c.shard.retained.Match(filter, func(_ string, m *message) bool {
		list = append(list, m)
		return true
	})
	nowNano := now.UnixNano()
	for _, m := range list {
		if m.expired(nowNano) {
			c.shard.dropExpiredRetained(m)
			continue
		}
		d := delivery{msg: m, qos: min(m.qos, opts.QoS), retain: true}
		if opts.SubscriptionID != 0 {
			d.setSubIDs([]uint32{opts.SubscriptionID})
		}
		k, out := c.sess.enqueue(&d, now)
		if k != nil {
			k.kick(packet.ErrQuotaExceeded)
		}
		if out != nil {
			c.outbox().add(out)
		}
	}
}

// handleUnsubscribe removes subscriptions; MQTT 5 reports per filter
// whether one existed [MQTT-3.11.3-1].
func (c *conn) handleUnsubscribe(p *packet.Unsubscribe) error {
	s := c.shard
	ack := packet.Unsuback{PacketID: p.PacketID}
	if c.version == packet.Version5 {
		ack.Reasons = make([]packet.ReasonCode, len(p.Filters))
	}
	for i, f := range p.Filters {
		existed, err := s.tree.Unsubscribe(c.sess.id, string(f)) // [MQTT-3.10.4-1]
		if ack.Reasons == nil {
			continue
		}
		switch {
		case err != nil:
			ack.Reasons[i] = packet.ErrTopicFilterInvalid
		case !existed:
			ack.Reasons[i] = packet.CodeNoSubscriptionExisted
		}
	}
	if err := c.persistSubscriptions(); err != nil {
		return err
	}
	c.send(&ack) // [MQTT-3.10.4-4]
	return nil
}

// handleDisconnect ends the connection at the client's request.
func (c *conn) handleDisconnect(p *packet.Disconnect) error {
	if c.version == packet.Version5 && p.Props.Has.Has(packet.PropSessionExpiry) {
		if c.expiry0 && p.Props.SessionExpiry != 0 {
			return packet.ErrProtocol // [MQTT-3.14.2-2]
		}
		exp, _ := c.shard.capExpiry(p.Props.SessionExpiry) // the tenant's cap holds here too
		c.sess.mu.Lock()
		c.sess.expiry = exp
		c.sess.mu.Unlock()
	}
	if p.Reason == packet.CodeDisconnectWithWill {
		return errDisconnectWithWill
	}
	return errDisconnect // [MQTT-3.14.4-3] the will is discarded
}
