package shard

import (
	"strings"
	"time"
	"unicode/utf8"

	"berth.dev/broker/packet"
)

// Wills pass the admission a device's PUBLISH of the same message would
// pass, in two halves:
//
//   - at CONNECT, what the CONNECT itself decides: the will topic must be
//     one the client may publish to (not $SYS, not a dead-letter topic,
//     within the connection's ACL: CONNACK 0x87 Not authorized, the code a
//     PUBLISH there gets; 3.1.1 return code 5), its payload within the
//     message size quota (0x95 Packet too large; 3.1.1 has no such code and
//     answers 3, server unavailable), and a payload that says it is UTF-8
//     must be (0x99 Payload format invalid, MQTT 5.0 section 3.1.3.2.3);
//   - when the will is due (the connection ended, its delay passed, or its
//     session ended), what depends on that moment: the tenant's message and
//     byte rates, the monthly messages quota, the retained caps
//     (Limiter.AdmitWill, then the shard's retained count). A refused will
//     is dropped, counted under DropQuotaExceeded and, QoS 1/2 with dead
//     letters on, dead-lettered like a refused PUBLISH. The connection is
//     gone by then, so there is no client to throttle or tell, and no
//     per-client rate applies (as for HTTP publish).
//
// The will topic's rule (topicrules.go) applies at both moments, before
// the quotas: at CONNECT its size (0x95) and RETAIN (MQTT 5: 0x9A; 3.1.1:
// the will loses RETAIN); when due, as the rule is then, its size and rate
// (dropped, counted and dead-lettered under too_large or topic_rate) and
// RETAIN (published without it).
//
// A published will counts one message in and accepted for the shard, and
// one in for the connection's Traffic (its credential); its bytes were
// counted with the CONNECT that carried it.

// willMsg is a connection's will and what admits it when it is due.
type willMsg struct {
	msg      *message
	limiter  Limiter  // the connection's; nil: no quotas
	traffic  *Traffic // the connection's meters
	clientID string   // for the dead letter and logs
	delay    uint32   // Will Delay Interval, seconds
}

// checkWill applies the CONNECT-time half of a will's admission to cp
// and returns the refusal, or CodeSuccess.
func (c *conn) checkWill(cp *packet.Connect) packet.ReasonCode {
	name := cp.WillTopic
	// [MQTT-4.7.2-1] no client publishes into $SYS; dead letters come
	// from the shard only.
	if strings.HasPrefix(string(name), "$SYS/") || string(name) == "$SYS" || isDeadLetterTopic(name) {
		return packet.ErrNotAuthorized
	}
	if c.info.Authorizer != nil && !c.info.Authorizer.CanPublish(name) {
		return packet.ErrNotAuthorized
	}
	if l := c.info.Limiter; l != nil {
		if max := l.MaxMessageSize(); max > 0 && int64(len(cp.WillPayload)) > max {
			return packet.ErrPacketTooLarge
		}
	}
	if code := c.checkWillRule(cp); code != packet.CodeSuccess {
		return code // the will topic's rule: size, RETAIN (topicrules.go)
	}
	if c.version == packet.Version5 && cp.WillProps.Has.Has(packet.PropPayloadFormat) &&
		cp.WillProps.PayloadFormat == 1 && !utf8.Valid(cp.WillPayload) {
		return packet.ErrPayloadFormatInvalid // MQTT 5.0 section 3.1.3.2.3: the server may check it
	}
	return packet.CodeSuccess
}

// publishWill publishes a will that is due, after the admission of that
// moment (see above). Called without locks.
func (s *Shard) publishWill(w *willMsg) {
	m := w.msg
	s.topics.add(m.topic, len(m.payload), time.Now().Unix())
	if drop, ok := s.admitWillRule(m); !ok {
		s.stats.drops[drop].Add(1)
		s.deadLetter(drop, m, m.qos, w.clientID)
		s.opts.Logger.Info("will dropped by its topic rule", "client_id", w.clientID, "topic", string(m.topic), "reason", drop.String())
		return
	}
	if l := w.limiter; l != nil {
		code := l.AdmitWill(len(m.payload))
		if code == packet.CodeSuccess && m.retain && s.overRetained(l, string(m.topic), len(m.payload)) {
			refund(l)
			code = packet.ErrQuotaExceeded
		}
		if code != packet.CodeSuccess {
			s.stats.drops[DropQuotaExceeded].Add(1)
			s.deadLetter(DropQuotaExceeded, m, m.qos, w.clientID)
			s.opts.Logger.Info("will dropped", "client_id", w.clientID, "topic", string(m.topic), "reason", code)
			return
		}
	}
	s.stats.msgsIn.Add(1)
	s.stats.msgsAccept.Add(1)
	w.traffic.addMessagesIn(1)
	s.publishInternal(m)
}

// overRetained reports whether a retained message of size payload bytes
// to topicName would go over l's retained caps; replacing an existing
// retained message is always fine, an empty one clears and adds nothing.
func (s *Shard) overRetained(l Limiter, topicName string, size int) bool {
	if size == 0 {
		return false // clears, never adds
	}
	maxMsgs, maxBytes := l.MaxRetained()
	if maxMsgs <= 0 && maxBytes <= 0 {
		return false
	}
	msgs, bytes := s.tenantRetained()
	if (maxMsgs > 0 && msgs >= maxMsgs) || (maxBytes > 0 && bytes+int64(size) > maxBytes) {
		_, ok := s.retained.Get(topicName)
		return !ok
	}
	return false
}
