package node

import (
	"fmt"
	"net/http"

	"berth.dev/broker/internal/shard"
	"berth.dev/broker/internal/topicrule"
	"berth.dev/broker/packet"
)

// Topic rules. A tenant's rules are read when its shard opens and follow
// NOTIFY berth_topic_rules (topicrule.Store); the shard enforces them on
// every way a message comes in (shard/topicrules.go, docs/topic-rules.md).

// applyTopicRules is called when a held tenant's topic rules change.
func (n *Node) applyTopicRules(tenantID string, rs *topicrule.Set) {
	t, ok := n.lookup(tenantID)
	if !ok {
		return
	}
	t.sh.SetTopicRules(rs)
	n.log.Info("topic rules updated", "tenant_id", tenantID, "rules", rs.Len())
}

// writeRuleRefusal answers an HTTP publish a topic rule refused: 413 over
// the rule's size, 422 for RETAIN where it allows none, 429 (Retry-After:
// 1) over its rate; {"error", "quota": "topic_rule", "rule"}, the error
// naming the rule, which the API passes on as the problem's detail.
func writeRuleRefusal(w http.ResponseWriter, rr *shard.RuleRefusal) {
	r := &rr.Rule
	var status int
	var msg string
	switch rr.Code {
	case packet.ErrPacketTooLarge:
		status = http.StatusRequestEntityTooLarge
		msg = fmt.Sprintf("the payload is %d bytes, over the max_message_size of %d bytes of topic rule %s (%s)", rr.Size, r.MaxMessageSize, r.ID, r.Filter)
	case packet.ErrRetainNotSupported:
		status = http.StatusUnprocessableEntity
		msg = fmt.Sprintf("topic rule %s (%s) does not allow retained messages (retained_allowed is false); publish without retain", r.ID, r.Filter)
	default:
		status = http.StatusTooManyRequests
		w.Header().Set("Retry-After", "1")
		msg = fmt.Sprintf("over the max_msgs_per_sec of %d of topic rule %s (%s); retry in a second", r.MaxMsgsPerSec, r.ID, r.Filter)
	}
	writeJSON(w, status, map[string]string{"error": msg, "quota": "topic_rule", "rule": r.ID})
}
