package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"berth.dev/billing/plan"
	"berth.dev/services/internal/store"
)

type topicRuleJSON struct {
	ID               string    `json:"id"`
	Filter           string    `json:"filter"`
	RetentionSeconds *int64    `json:"retention_seconds"`
	RetainedAllowed  bool      `json:"retained_allowed"`
	MaxMessageSize   *int32    `json:"max_message_size"`
	MaxMsgsPerSec    *int32    `json:"max_msgs_per_sec"`
	CreatedAt        time.Time `json:"created_at"`
}

func topicRuleOut(t store.TopicRule) topicRuleJSON {
	return topicRuleJSON{ID: t.ID, Filter: t.Filter, RetentionSeconds: t.RetentionSeconds,
		RetainedAllowed: t.RetainedAllowed, MaxMessageSize: t.MaxMessageSize, MaxMsgsPerSec: t.MaxMsgsPerSec, CreatedAt: t.CreatedAt}
}

type createTopicRuleRequest struct {
	Filter           string `json:"filter"`
	RetentionSeconds *int64 `json:"retention_seconds"`
	RetainedAllowed  *bool  `json:"retained_allowed"`
	MaxMessageSize   *int64 `json:"max_message_size"`
	MaxMsgsPerSec    *int64 `json:"max_msgs_per_sec"`
}

func (a *api) listTopicRules(w http.ResponseWriter, r *http.Request) error {
	p, err := parsePage(r)
	if err != nil {
		return err
	}
	rs, next, err := a.store.ListTopicRules(r.Context(), tenantFrom(r.Context()).ID, p)
	if err != nil {
		return err
	}
	out := make([]topicRuleJSON, len(rs))
	for i, t := range rs {
		out[i] = topicRuleOut(t)
	}
	return writeJSON(w, http.StatusOK, newList(out, next))
}

// createTopicRule adds a rule (docs/topic-rules.md). A rule narrows the
// tenant's quotas for its topics: its retention is bounded by the tenant's
// retention_seconds quota, its size and rate by the plan.
func (a *api) createTopicRule(w http.ResponseWriter, r *http.Request) error {
	var req createTopicRuleRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	t := tenantFrom(r.Context())
	rule := store.TopicRule{ID: store.NewID(store.PrefixTopicRule), TenantID: t.ID, Filter: req.Filter, RetentionSeconds: req.RetentionSeconds, RetainedAllowed: true}
	if req.RetainedAllowed != nil {
		rule.RetainedAllowed = *req.RetainedAllowed
	}
	if err := a.checkTopicRule(r.Context(), t, &rule, true, req.MaxMessageSize, req.MaxMsgsPerSec); err != nil {
		return err
	}
	if err := a.store.CreateTopicRule(r.Context(), &rule); err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/tenants/"+t.ID+"/topics/"+rule.ID)
	return writeJSON(w, http.StatusCreated, topicRuleOut(rule))
}

// checkTopicRule validates a rule against the MQTT filter rules, the
// tenant's retention quota (when the request sets the retention: a quota
// lowered since leaves the rule valid, the quota then bounding it) and its
// plan, and sets its maximum message size and rate from maxSize and
// maxRate.
func (a *api) checkTopicRule(ctx context.Context, t store.Tenant, rule *store.TopicRule, newRetention bool, maxSize, maxRate *int64) error {
	p, err := plan.Lookup(t.Plan)
	if err != nil {
		return err
	}
	var v validator
	checkTopicFilter(&v, "filter", rule.Filter)
	// A rule governs the topics messages are published to; a shared
	// subscription's group prefix names no topic.
	v.check(!strings.HasPrefix(rule.Filter, "$share/"), "filter",
		"must be a topic filter, not a shared subscription: drop the $share/{group}/ prefix")
	if rule.RetentionSeconds != nil && newRetention {
		q, _, err := a.store.Quotas(ctx, t.ID)
		if err != nil {
			return err
		}
		v.check(*rule.RetentionSeconds >= 0 && *rule.RetentionSeconds <= q.RetentionSeconds, "retention_seconds",
			"must be between 0 and the tenant's retention_seconds quota, "+itoa(q.RetentionSeconds)+
				" (a rule shortens the retention for its topics; raise the quota first to keep them longer)")
	}
	rule.MaxMessageSize = nil
	if maxSize != nil {
		ok := *maxSize >= 1 && *maxSize <= p.Max.MaxMessageSize
		v.check(ok, "max_message_size", "must be between 1 and the plan's "+itoa(p.Max.MaxMessageSize))
		if ok {
			n := int32(*maxSize)
			rule.MaxMessageSize = &n
		}
	}
	rule.MaxMsgsPerSec = nil
	if maxRate != nil {
		ok := *maxRate >= 0 && *maxRate <= p.Max.MaxMsgsPerSec
		v.check(ok, "max_msgs_per_sec", "must be between 0 (no rate) and the plan's "+itoa(p.Max.MaxMsgsPerSec))
		if ok {
			n := int32(*maxRate)
			rule.MaxMsgsPerSec = &n
		}
	}
	return v.err()
}

// patchField is a field of a PATCH body: Set when the body names it, and
// Value nil when it names it as null (clear it).
type patchField[T any] struct {
	Set   bool
	Value *T
}

func (f *patchField[T]) UnmarshalJSON(b []byte) error {
	f.Set = true
	if string(b) == "null" {
		f.Value = nil
		return nil
	}
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	f.Value = &v
	return nil
}

type updateTopicRuleRequest struct {
	Filter           patchField[string] `json:"filter"`
	RetentionSeconds patchField[int64]  `json:"retention_seconds"`
	RetainedAllowed  patchField[bool]   `json:"retained_allowed"`
	MaxMessageSize   patchField[int64]  `json:"max_message_size"`
	MaxMsgsPerSec    patchField[int64]  `json:"max_msgs_per_sec"`
}

// updateTopicRule changes the fields the body names; null clears retention,
// size or rate back to the tenant's quota. The same checks as on create
// apply.
func (a *api) updateTopicRule(w http.ResponseWriter, r *http.Request) error {
	var req updateTopicRuleRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	t := tenantFrom(r.Context())
	rule, err := a.store.TopicRule(r.Context(), t.ID, urlParam(r, "id"))
	if err != nil {
		return err
	}
	var v validator
	if req.Filter.Set {
		v.check(req.Filter.Value != nil, "filter", "must not be null")
		if req.Filter.Value != nil {
			rule.Filter = *req.Filter.Value
		}
	}
	if req.RetainedAllowed.Set {
		v.check(req.RetainedAllowed.Value != nil, "retained_allowed", "must be true or false")
		if req.RetainedAllowed.Value != nil {
			rule.RetainedAllowed = *req.RetainedAllowed.Value
		}
	}
	if err := v.err(); err != nil {
		return err
	}
	if req.RetentionSeconds.Set {
		rule.RetentionSeconds = req.RetentionSeconds.Value
	}
	var maxSize *int64
	if rule.MaxMessageSize != nil {
		n := int64(*rule.MaxMessageSize)
		maxSize = &n
	}
	if req.MaxMessageSize.Set {
		maxSize = req.MaxMessageSize.Value
	}
	var maxRate *int64
	if rule.MaxMsgsPerSec != nil {
		n := int64(*rule.MaxMsgsPerSec)
		maxRate = &n
	}
	if req.MaxMsgsPerSec.Set {
		maxRate = req.MaxMsgsPerSec.Value
	}
	if err := a.checkTopicRule(r.Context(), t, &rule, req.RetentionSeconds.Set, maxSize, maxRate); err != nil {
		return err
	}
	if err := a.store.UpdateTopicRule(r.Context(), rule); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, topicRuleOut(rule))
}

func (a *api) deleteTopicRule(w http.ResponseWriter, r *http.Request) error {
	if err := a.store.DeleteTopicRule(r.Context(), tenantFrom(r.Context()).ID, urlParam(r, "id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
