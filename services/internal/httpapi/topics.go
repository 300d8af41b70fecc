package httpapi

import (
	"encoding/json"
	"net/http"
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
	CreatedAt        time.Time `json:"created_at"`
}

func topicRuleOut(t store.TopicRule) topicRuleJSON {
	return topicRuleJSON{ID: t.ID, Filter: t.Filter, RetentionSeconds: t.RetentionSeconds,
		RetainedAllowed: t.RetainedAllowed, MaxMessageSize: t.MaxMessageSize, CreatedAt: t.CreatedAt}
}

type createTopicRuleRequest struct {
	Filter           string `json:"filter"`
	RetentionSeconds *int64 `json:"retention_seconds"`
	RetainedAllowed  *bool  `json:"retained_allowed"`
	MaxMessageSize   *int64 `json:"max_message_size"`
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

// createTopicRule adds a rule; retention and size are bounded by the
// tenant's plan (a rule narrows the tenant's quotas, it cannot exceed the plan).
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
	if err := checkTopicRule(t.Plan, &rule, req.MaxMessageSize); err != nil {
		return err
	}
	if err := a.store.CreateTopicRule(r.Context(), &rule); err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/tenants/"+t.ID+"/topics/"+rule.ID)
	return writeJSON(w, http.StatusCreated, topicRuleOut(rule))
}

// checkTopicRule validates a rule against the MQTT filter rules and the
// tenant's plan, and sets its maximum message size from maxSize.
func checkTopicRule(planName string, rule *store.TopicRule, maxSize *int64) error {
	p, err := plan.Lookup(planName)
	if err != nil {
		return err
	}
	var v validator
	checkTopicFilter(&v, "filter", rule.Filter)
	if rule.RetentionSeconds != nil {
		v.check(*rule.RetentionSeconds >= 0 && *rule.RetentionSeconds <= p.Max.RetentionSeconds,
			"retention_seconds", "must be between 0 and the plan's "+itoa(p.Max.RetentionSeconds))
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
}

// updateTopicRule changes the fields the body names; null clears retention
// or size back to the tenant's quota. The same checks as on create apply.
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
	if err := checkTopicRule(t.Plan, &rule, maxSize); err != nil {
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
