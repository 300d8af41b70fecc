package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

type ruleOut struct {
	ID               string `json:"id"`
	Filter           string `json:"filter"`
	RetentionSeconds *int64 `json:"retention_seconds"`
	RetainedAllowed  bool   `json:"retained_allowed"`
	MaxMessageSize   *int64 `json:"max_message_size"`
	MaxMsgsPerSec    *int64 `json:"max_msgs_per_sec"`
}

func (e *env) createRule(t *testing.T, u user, body map[string]any) ruleOut {
	t.Helper()
	r := e.do(t, "POST", "/v1/tenants/"+u.tenantID+"/topics", u.key, body)
	want(t, r, http.StatusCreated)
	var out ruleOut
	r.json(t, &out)
	return out
}

// A filter another rule of the tenant has is refused on POST and PATCH
// with a 409 naming that rule; another tenant may use it.
func TestTopicRuleDuplicateNamesTheRule(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	other := e.signup("bob@example.com")
	base := "/v1/tenants/" + u.tenantID + "/topics"
	a := e.createRule(t, u, map[string]any{"filter": "sensors/#"})
	b := e.createRule(t, u, map[string]any{"filter": "sensors/+/temp"})
	e.createRule(t, other, map[string]any{"filter": "sensors/#"}) // another tenant: no conflict

	check := func(t *testing.T, r resp) {
		t.Helper()
		want(t, r, http.StatusConflict)
		p := r.problem(t)
		if !strings.Contains(p.Detail, a.ID) || len(p.Errors) != 1 || p.Errors[0].Field != "filter" || !strings.Contains(p.Errors[0].Reason, a.ID) {
			t.Fatalf("conflict %s does not name rule %s on filter", r.body, a.ID)
		}
	}
	t.Run("POST", func(t *testing.T) {
		check(t, e.do(t, "POST", base, u.key, map[string]any{"filter": "sensors/#", "retained_allowed": false}))
	})
	t.Run("PATCH", func(t *testing.T) {
		check(t, e.do(t, "PATCH", base+"/"+b.ID, u.key, map[string]any{"filter": "sensors/#"}))
	})
	// A PATCH that keeps a rule's own filter is no conflict.
	want(t, e.do(t, "PATCH", base+"/"+a.ID, u.key, map[string]any{"filter": "sensors/#", "max_message_size": 10}), http.StatusOK)
}

// Invalid filters are refused with 422 naming the field; empty levels are
// valid MQTT.
func TestTopicRuleFilters(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	base := "/v1/tenants/" + u.tenantID + "/topics"
	patched := e.createRule(t, u, map[string]any{"filter": "patch/me"})
	for _, f := range []string{"a//b", "/", "a/", "+/+", "#", "$SYS/#"} {
		e.createRule(t, u, map[string]any{"filter": f})
	}
	for _, tc := range []struct{ name, filter string }{
		{"empty", ""},
		{"# not last", "a/#/b"},
		{"# inside a level", "a/b#"},
		{"+ inside a level", "a/+b"},
		{"shared subscription", "$share/group/a/b"},
		{"NUL", "a/\x00/b"},
		{"over 65535 bytes", strings.Repeat("a", 65536)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range []resp{
				e.do(t, "POST", base, u.key, map[string]any{"filter": tc.filter}),
				e.do(t, "PATCH", base+"/"+patched.ID, u.key, map[string]any{"filter": tc.filter}),
			} {
				want(t, r, http.StatusUnprocessableEntity)
				if p := r.problem(t); len(p.Errors) == 0 || p.Errors[0].Field != "filter" {
					t.Fatalf("problem %+v does not name the filter", p)
				}
			}
		})
	}
}

// A rule's retention may shorten the tenant's retention_seconds quota,
// never exceed it; a quota lowered later leaves existing rules valid.
func TestTopicRuleRetentionWithinTheQuota(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	base := "/v1/tenants/" + u.tenantID + "/topics"
	var q struct {
		Quotas struct {
			RetentionSeconds int64 `json:"retention_seconds"`
		} `json:"quotas"`
	}
	e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/quotas", u.key, nil).json(t, &q)
	limit := q.Quotas.RetentionSeconds
	r := e.do(t, "POST", base, u.key, map[string]any{"filter": "a/#", "retention_seconds": limit + 1})
	want(t, r, http.StatusUnprocessableEntity)
	if p := r.problem(t); len(p.Errors) != 1 || p.Errors[0].Field != "retention_seconds" || !strings.Contains(p.Errors[0].Reason, "retention_seconds quota") {
		t.Fatalf("problem %s", r.body)
	}
	a := e.createRule(t, u, map[string]any{"filter": "a/#", "retention_seconds": limit})
	want(t, e.do(t, "PUT", "/v1/tenants/"+u.tenantID+"/quotas", u.key, map[string]int64{"retention_seconds": 3600}), http.StatusOK)
	want(t, e.do(t, "PATCH", base+"/"+a.ID, u.key, map[string]any{"retained_allowed": false}), http.StatusOK)
	want(t, e.do(t, "PATCH", base+"/"+a.ID, u.key, map[string]any{"retention_seconds": 3601}), http.StatusUnprocessableEntity)
	want(t, e.do(t, "PATCH", base+"/"+a.ID, u.key, map[string]any{"retention_seconds": 0}), http.StatusOK)
}

// max_msgs_per_sec: optional, null or 0 for none, within the plan.
func TestTopicRuleRate(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	base := "/v1/tenants/" + u.tenantID + "/topics"
	a := e.createRule(t, u, map[string]any{"filter": "r/#", "max_msgs_per_sec": 10})
	if a.MaxMsgsPerSec == nil || *a.MaxMsgsPerSec != 10 {
		t.Fatalf("created %+v", a)
	}
	if n := e.createRule(t, u, map[string]any{"filter": "n/#"}); n.MaxMsgsPerSec != nil {
		t.Fatalf("a rule without a rate: %+v", n)
	}
	var got ruleOut
	r := e.do(t, "PATCH", base+"/"+a.ID, u.key, map[string]any{"max_msgs_per_sec": nil})
	want(t, r, http.StatusOK)
	r.json(t, &got)
	if got.MaxMsgsPerSec != nil {
		t.Fatalf("patched to null: %s", r.body)
	}
	for _, bad := range []any{-1, 1 << 40, "ten"} {
		want(t, e.do(t, "POST", base, u.key, map[string]any{"filter": "bad/#", "max_msgs_per_sec": bad}), http.StatusUnprocessableEntity)
		want(t, e.do(t, "PATCH", base+"/"+a.ID, u.key, map[string]any{"max_msgs_per_sec": bad}), http.StatusUnprocessableEntity)
	}
	var page struct{ Items []ruleOut }
	e.do(t, "GET", base, u.key, nil).json(t, &page)
	if len(page.Items) != 2 || page.Items[0].MaxMsgsPerSec != nil {
		t.Fatalf("list %+v", page.Items)
	}
}

// Every change is announced on berth_topic_rules with the tenant id,
// committed with the change; a refused one announces nothing.
func TestTopicRuleChangesNotify(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	base := "/v1/tenants/" + u.tenantID + "/topics"
	conn := listen(t, e, "berth_topic_rules")
	a := e.createRule(t, u, map[string]any{"filter": "a/#"})
	waitNotify(t, conn, "berth_topic_rules", u.tenantID)
	want(t, e.do(t, "PATCH", base+"/"+a.ID, u.key, map[string]any{"retained_allowed": false}), http.StatusOK)
	waitNotify(t, conn, "berth_topic_rules", u.tenantID)
	want(t, e.do(t, "POST", base, u.key, map[string]any{"filter": "a/#"}), http.StatusConflict)
	want(t, e.do(t, "PATCH", base+"/top_missing", u.key, map[string]any{"filter": "b"}), http.StatusNotFound)
	noNotify(t, conn)
	want(t, e.do(t, "DELETE", base+"/"+a.ID, u.key, nil), http.StatusNoContent)
	waitNotify(t, conn, "berth_topic_rules", u.tenantID)
	want(t, e.do(t, "DELETE", base+"/"+a.ID, u.key, nil), http.StatusNotFound)
	noNotify(t, conn)
}

func noNotify(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if n, err := conn.WaitForNotification(ctx); err == nil {
		t.Fatalf("unexpected notification %s %q", n.Channel, n.Payload)
	}
}
