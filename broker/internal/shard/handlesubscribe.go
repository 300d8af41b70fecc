package shard

import (
	"errors"
	"time"

	"berth.dev/broker/internal/topic"
	"berth.dev/broker/packet"
)

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
		k, out, _ := c.sess.enqueue(&d, now)
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
