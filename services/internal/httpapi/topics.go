package httpapi

import (
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
	p, err := plan.Lookup(t.Plan)
	if err != nil {
		return err
	}
	var v validator
	checkTopicFilter(&v, "filter", req.Filter)
	if req.RetentionSeconds != nil {
		v.check(*req.RetentionSeconds >= 0 && *req.RetentionSeconds <= p.Max.RetentionSeconds,
			"retention_seconds", "must be between 0 and the plan's "+itoa(p.Max.RetentionSeconds))
	}
	rule := store.TopicRule{ID: store.NewID(store.PrefixTopicRule), TenantID: t.ID, Filter: req.Filter, RetentionSeconds: req.RetentionSeconds, RetainedAllowed: true}
	if req.MaxMessageSize != nil {
		ok := *req.MaxMessageSize >= 1 && *req.MaxMessageSize <= p.Max.MaxMessageSize
		v.check(ok, "max_message_size", "must be between 1 and the plan's "+itoa(p.Max.MaxMessageSize))
		if ok {
			n := int32(*req.MaxMessageSize)
			rule.MaxMessageSize = &n
		}
	}
	if req.RetainedAllowed != nil {
		rule.RetainedAllowed = *req.RetainedAllowed
	}
	if err := v.err(); err != nil {
		return err
	}
	if err := a.store.CreateTopicRule(r.Context(), &rule); err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/tenants/"+t.ID+"/topics/"+rule.ID)
	return writeJSON(w, http.StatusCreated, topicRuleOut(rule))
}

func (a *api) deleteTopicRule(w http.ResponseWriter, r *http.Request) error {
	if err := a.store.DeleteTopicRule(r.Context(), tenantFrom(r.Context()).ID, urlParam(r, "id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
