package httpapi_test

import (
	"net/http"
	"testing"
)

// PATCH changes a topic rule (null clears a setting back to the
// tenant's quota), refuse what the plan or MQTT refuses, delete.
func TestTopicRulePatch(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	base := "/v1/tenants/" + u.tenantID + "/topics"
	type rule struct {
		ID               string `json:"id"`
		Filter           string `json:"filter"`
		RetentionSeconds *int64 `json:"retention_seconds"`
		RetainedAllowed  bool   `json:"retained_allowed"`
		MaxMessageSize   *int64 `json:"max_message_size"`
	}
	var a rule
	r := e.do(t, "POST", base, u.key, map[string]any{"filter": "sensors/#", "retention_seconds": 60, "max_message_size": 1024})
	want(t, r, http.StatusCreated)
	r.json(t, &a)
	if a.Filter != "sensors/#" || *a.RetentionSeconds != 60 || *a.MaxMessageSize != 1024 || !a.RetainedAllowed {
		t.Fatalf("created %s", r.body)
	}
	want(t, e.do(t, "POST", base, u.key, map[string]any{"filter": "other/+"}), http.StatusCreated)

	var b rule
	r = e.do(t, "PATCH", base+"/"+a.ID, u.key, map[string]any{"filter": "sensors/+/temp", "retained_allowed": false, "retention_seconds": nil})
	want(t, r, http.StatusOK)
	r.json(t, &b)
	if b.ID != a.ID || b.Filter != "sensors/+/temp" || b.RetainedAllowed || b.RetentionSeconds != nil || b.MaxMessageSize == nil || *b.MaxMessageSize != 1024 {
		t.Fatalf("patched %s", r.body)
	}
	var page struct{ Items []rule }
	e.do(t, "GET", base, u.key, nil).json(t, &page)
	if len(page.Items) != 2 || page.Items[0].Filter != "sensors/+/temp" || page.Items[0].RetainedAllowed {
		t.Fatalf("list after patch %+v", page.Items)
	}

	for _, tc := range []struct {
		name string
		body map[string]any
		code int
	}{
		{"invalid filter", map[string]any{"filter": "a/#/b"}, http.StatusUnprocessableEntity},
		{"null filter", map[string]any{"filter": nil}, http.StatusUnprocessableEntity},
		{"another rule's filter", map[string]any{"filter": "other/+"}, http.StatusConflict},
		{"size over the plan", map[string]any{"max_message_size": 1 << 40}, http.StatusUnprocessableEntity},
		{"negative retention", map[string]any{"retention_seconds": -1}, http.StatusUnprocessableEntity},
		{"unknown field", map[string]any{"colour": "red"}, http.StatusUnprocessableEntity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want(t, e.do(t, "PATCH", base+"/"+a.ID, u.key, tc.body), tc.code)
		})
	}
	// Refusals changed nothing.
	e.do(t, "GET", base, u.key, nil).json(t, &page)
	if page.Items[0].Filter != "sensors/+/temp" || *page.Items[0].MaxMessageSize != 1024 {
		t.Fatalf("a refused patch changed the rule: %+v", page.Items[0])
	}
	want(t, e.do(t, "PATCH", base+"/top_missing", u.key, map[string]any{"filter": "x"}), http.StatusNotFound)
	want(t, e.do(t, "DELETE", base+"/"+a.ID, u.key, nil), http.StatusNoContent)
	want(t, e.do(t, "PATCH", base+"/"+a.ID, u.key, map[string]any{"filter": "x"}), http.StatusNotFound)
}
