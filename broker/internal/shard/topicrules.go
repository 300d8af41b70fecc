package shard

import (
	"fmt"
	"time"

	"berth.dev/broker/internal/topicrule"
	"berth.dev/broker/packet"
)

// Topic rules (SetTopicRules; docs/topic-rules.md). The rule governing a
// message's topic (topicrule.Set.Match: the most specific matching
// filter) admits it on every way in, before the tenant's quotas:
//
//	                 device PUBLISH             HTTP publish       will
//	size over        MQTT 5: DISCONNECT 0x95    RuleRefusal 0x95   CONNECT: CONNACK 0x95 (3.1.1: 3);
//	                 3.1.1: closed                                 due: dropped, too_large
//	RETAIN refused   MQTT 5: DISCONNECT 0x9A    RuleRefusal 0x9A   CONNECT: CONNACK 0x9A;
//	                 3.1.1: sent without RETAIN                    3.1.1, due: sent without RETAIN
//	over the rate    MQTT 5: PUBACK/PUBREC 0x97 RuleRefusal 0x97   due: dropped, topic_rate
//	                 (QoS 0 dropped); 3.1.1: reads paused
//
// A retained message with an empty payload only clears the topic's
// retained message [MQTT-3.3.1-6]: a rule refusing RETAIN lets it through,
// so that what was retained before the rule can be cleared. The refused
// RETAIN flags are counted under DropRetainRefused ("retain_refused"),
// whether the message was refused (MQTT 5) or sent on without the flag
// (3.1.1), and rate refusals under DropTopicRate ("topic_rate"), a QoS
// 1/2 one dead-lettered to $berth/dlq/topic_rate.
//
// MQTT 5 allows 0x95, 0x96 and 0x9A in DISCONNECT but not in PUBACK or
// PUBREC (section 3.4.2.1), so the size and RETAIN refusals end the
// connection, as the tenant's size quota does, and a rate refusal is 0x97
// Quota exceeded, as the tenant's rate quotas are; it never disconnects.
//
// A rule's retention bounds how old a message on its topics may be when
// it is read back from the message log for an offline session resuming
// or for a replay (berth-replay-from): older ones are skipped, counted as
// DropRetention like those the tenant's log retention deleted, and not
// replayed at all.

// SetTopicRules replaces the tenant's topic rules, live: every message
// read from then on is admitted by the new rules. nil removes them all.
func (s *Shard) SetTopicRules(rs *topicrule.Set) { s.rules.Store(rs) }

// TopicRules returns the topic rules in force, nil for none.
func (s *Shard) TopicRules() *topicrule.Set { return s.rules.Load() }

// ruleFor returns the rule governing the topic name, nil for none.
func (s *Shard) ruleFor(name []byte) *topicrule.Rule { return s.rules.Load().Match(name) }

// refusesRetain reports whether r refuses a retained message of size
// payload bytes (an empty one only clears and is let through).
func refusesRetain(r *topicrule.Rule, retain bool, size int) bool {
	return retain && size > 0 && !r.RetainedAllowed
}

// overSize reports whether a payload of size bytes is over r's limit.
func overSize(r *topicrule.Rule, size int) bool {
	return r.MaxMessageSize > 0 && int64(size) > r.MaxMessageSize
}

// admitRule applies rule r to an inbound PUBLISH (see above). It returns a
// per-message refusal (0x97 over the rate), how long to pause the reads
// of an MQTT 3.1.1 publisher over the rate, or an error that ends the
// connection. An MQTT 3.1.1 retained message is changed to a plain one.
func (c *conn) admitRule(r *topicrule.Rule, p *packet.Publish) (packet.ReasonCode, time.Duration, error) {
	s := c.shard
	if overSize(r, len(p.Payload)) {
		return packet.ErrPacketTooLarge, 0, packet.ErrPacketTooLarge
	}
	if refusesRetain(r, p.Retain, len(p.Payload)) {
		if c.version == packet.Version5 {
			// MQTT 5.0 section 3.2.2.3.5: a PUBLISH with RETAIN where
			// retained messages are not supported gets DISCONNECT 0x9A.
			c.sess.mu.Lock()
			c.sess.dropLocked(DropRetainRefused)
			c.sess.mu.Unlock()
			return packet.ErrRetainNotSupported, 0, packet.ErrRetainNotSupported
		}
		// 3.1.1 has no refusal: the message goes on, not retained.
		p.Retain = false
		s.stats.drops[DropRetainRefused].Add(1)
	}
	if r.MaxMsgsPerSec <= 0 {
		return packet.CodeSuccess, 0, nil
	}
	now := time.Now()
	if c.version != packet.Version5 {
		return packet.CodeSuccess, r.ReserveMessage(now), nil
	}
	if !r.AllowMessage(now) {
		return packet.ErrQuotaExceeded, 0, nil
	}
	return packet.CodeSuccess, 0, nil
}

// RuleRefusal is a message PublishLimited refused by a topic rule. Code is
// packet.ErrPacketTooLarge (a payload of Size bytes over the rule's
// MaxMessageSize), packet.ErrRetainNotSupported (RETAIN where the rule
// allows none) or packet.ErrQuotaExceeded (over the rule's MaxMsgsPerSec);
// errors.Is(err, Code) holds.
type RuleRefusal struct {
	Rule topicrule.Rule
	Code packet.ReasonCode
	Size int
}

func (e *RuleRefusal) Error() string {
	return fmt.Sprintf("shard: refused by topic rule %s (%s): %v", e.Rule.ID, e.Rule.Filter, e.Code)
}

// Unwrap returns the reason code.
func (e *RuleRefusal) Unwrap() error { return e.Code }

// admitRuleHTTP applies the rule governing topicName to an HTTP publish:
// it refuses rather than throttles or strips, since the caller can be told.
func (s *Shard) admitRuleHTTP(topicName []byte, size int, retain bool) error {
	r := s.ruleFor(topicName)
	if r == nil {
		return nil
	}
	code := packet.CodeSuccess
	switch {
	case overSize(r, size):
		code = packet.ErrPacketTooLarge
	case refusesRetain(r, retain, size):
		code = packet.ErrRetainNotSupported
	case !r.AllowMessage(time.Now()):
		code = packet.ErrQuotaExceeded
	}
	if code == packet.CodeSuccess {
		return nil
	}
	return &RuleRefusal{Rule: *r, Code: code, Size: size}
}

// checkWillRule is the CONNECT-time half of a will's admission by its
// topic's rule: 0x95 over its size, 0x9A for a retained will it refuses
// (MQTT 5.0 section 3.2.2.3.5: a server without retained messages refuses
// such a CONNECT with 0x9A); an MQTT 3.1.1 will is kept, without RETAIN.
func (c *conn) checkWillRule(cp *packet.Connect) packet.ReasonCode {
	r := c.shard.ruleFor(cp.WillTopic)
	if r == nil {
		return packet.CodeSuccess
	}
	if overSize(r, len(cp.WillPayload)) {
		return packet.ErrPacketTooLarge
	}
	if refusesRetain(r, cp.WillRetain, len(cp.WillPayload)) {
		if c.version == packet.Version5 {
			c.shard.stats.drops[DropRetainRefused].Add(1)
			return packet.ErrRetainNotSupported
		}
		cp.WillRetain = false
		c.shard.stats.drops[DropRetainRefused].Add(1)
	}
	return packet.CodeSuccess
}

// admitWillRule is the due-time half: the rule as it is then (it may have
// changed since the CONNECT). It reports whether to publish the will, and
// if not the drop reason to count; it clears RETAIN where the rule refuses
// it.
func (s *Shard) admitWillRule(m *message) (DropReason, bool) {
	r := s.ruleFor(m.topic)
	if r == nil {
		return 0, true
	}
	if overSize(r, len(m.payload)) {
		return DropTooLarge, false
	}
	if !r.AllowMessage(time.Now()) {
		return DropTopicRate, false
	}
	if refusesRetain(r, m.retain, len(m.payload)) {
		m.retain = false // not routed yet: no reader shares it
		s.stats.drops[DropRetainRefused].Add(1)
	}
	return 0, true
}

// pastRuleRetention reports whether a message on topicName created at
// created (Unix nanoseconds) is older at now than the retention of its
// topic's rule. A tenant whose rules set no retention pays one pointer
// load; it does not allocate.
func (s *Shard) pastRuleRetention(topicName []byte, created, now int64) bool {
	rs := s.rules.Load()
	if !rs.HasRetention() {
		return false
	}
	r := rs.Match(topicName)
	return r != nil && r.Expired(created, now)
}
