package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"berth.dev/services/internal/store"
)

// TestCrossTenant: account B's key on account A's ids is 404 on every
// tenant-scoped endpoint, indistinguishable from an id that does not exist,
// and changes nothing.
func TestCrossTenant(t *testing.T) {
	e := newEnv(t, writeRate(1000, 1000)) // B makes some 60 writes at once
	a := e.signup("a@example.com")
	b := e.signup("b@example.com")
	ctx := context.Background()

	cred := e.createCredential(a, map[string]any{"name": "sensor", "acl": map[string]any{"pub": []string{"a/#"}, "sub": []string{"a/#"}}})
	cid := cred["id"].(string)
	r := e.do(t, "POST", "/v1/tenants/"+a.tenantID+"/topics", a.key, map[string]any{"filter": "a/#"})
	want(t, r, http.StatusCreated)
	var rule struct{ ID string }
	r.json(t, &rule)
	trace := "0123456789abcdef0123456789abcdef"
	if err := e.store.InsertSpans(ctx, []store.Span{{TenantID: a.tenantID, TraceID: trace, SpanID: "0123456789abcdef", Name: "publish", Start: time.Now(), DurationNS: 1000}}); err != nil {
		t.Fatal(err)
	}
	// A's tenant is on a live node, so a live view would succeed for A.
	if err := e.store.UpsertNode(ctx, store.Node{ID: "node-1", MQTTAddr: "127.0.0.1:7883", AdminAddr: "127.0.0.1:1", Capacity: 10, HeartbeatAt: time.Now()}); err != nil {
		t.Fatal(err)
	}

	// B calls with its API key and with a dashboard session.
	login := e.do(t, "POST", "/v1/login", "", map[string]string{"email": "b@example.com", "password": "correct horse battery"})
	want(t, login, http.StatusCreated)
	var ses struct{ Token string }
	login.json(t, &ses)
	callers := []struct{ name, token string }{{"key", b.key}, {"session", ses.Token}}

	ta, tb := "/v1/tenants/"+a.tenantID, "/v1/tenants/"+b.tenantID
	endpoints := []struct {
		method, path string
		body         any
	}{
		{"GET", ta, nil},
		{"PATCH", ta, map[string]string{"slug": "stolen"}},
		{"DELETE", ta, nil},
		{"GET", ta + "/credentials", nil},
		{"POST", ta + "/credentials", map[string]any{"name": "x", "acl": map[string]any{"pub": []string{"#"}}}},
		{"GET", ta + "/credentials/" + cid, nil},
		{"DELETE", ta + "/credentials/" + cid, nil},
		{"POST", ta + "/credentials/" + cid + "/token", nil},
		{"POST", ta + "/inspector-token", map[string]bool{"publish": true}},
		{"GET", ta + "/quotas", nil},
		{"PUT", ta + "/quotas", map[string]int{"max_connections": 1}},
		{"GET", ta + "/topics", nil},
		{"POST", ta + "/topics", map[string]any{"filter": "x/#"}},
		{"DELETE", ta + "/topics/" + rule.ID, nil},
		{"PATCH", ta + "/topics/" + rule.ID, map[string]any{"filter": "y/#"}},
		{"GET", ta + "/topics/live", nil},
		{"GET", ta + "/retained", nil},
		{"DELETE", ta + "/retained?filter=%23", nil},
		{"POST", ta + "/publish", map[string]any{"topic": "a/b", "payload": "x"}},
		{"GET", ta + "/sessions", nil},
		{"DELETE", ta + "/sessions/client-1", nil},
		{"GET", ta + "/usage", nil},
		{"GET", ta + "/traces", nil},
		{"GET", ta + "/traces/" + trace, nil},
		// A's resources under B's own tenant are not found either.
		{"GET", tb + "/credentials/" + cid, nil},
		{"DELETE", tb + "/credentials/" + cid, nil},
		{"POST", tb + "/credentials/" + cid + "/token", nil},
		{"DELETE", tb + "/topics/" + rule.ID, nil},
		{"GET", tb + "/traces/" + trace, nil},
	}
	for _, caller := range callers {
		for _, ep := range endpoints {
			crossCheck(t, e, caller.name, caller.token, ep.method, ep.path, a.tenantID, ep.body)
		}
	}

	// Nothing of A's changed.
	var revoked *time.Time
	var slug string
	var maxConn int
	if err := e.pool.QueryRow(ctx, `SELECT revoked_at FROM credentials WHERE id = $1`, cid).Scan(&revoked); err != nil || revoked != nil {
		t.Fatalf("credential revoked by another account: %v %v", revoked, err)
	}
	if err := e.pool.QueryRow(ctx, `SELECT t.slug, q.max_connections FROM tenants t JOIN quotas q ON q.tenant_id = t.id WHERE t.id = $1`, a.tenantID).Scan(&slug, &maxConn); err != nil || slug != a.slug || maxConn == 1 {
		t.Fatalf("tenant changed by another account: %s %d %v", slug, maxConn, err)
	}
	var rules, creds int
	if err := e.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM topic_rules WHERE tenant_id = $1), (SELECT count(*) FROM credentials WHERE tenant_id = $1)`, a.tenantID).Scan(&rules, &creds); err != nil || rules != 1 || creds != 1 {
		t.Fatalf("rules %d creds %d %v", rules, creds, err)
	}
	// A still sees its own things.
	want(t, e.do(t, "GET", ta+"/credentials/"+cid, a.key, nil), http.StatusOK)
	// B's list of tenants holds only B's.
	l := e.do(t, "GET", "/v1/tenants", b.key, nil)
	var list struct{ Items []struct{ ID string } }
	if err := json.Unmarshal(l.body, &list); err != nil || len(list.Items) != 1 || list.Items[0].ID != b.tenantID {
		t.Fatalf("B's tenants: %s", l.body)
	}
	// API keys are account-scoped the same way.
	var aKeyID string
	if err := e.pool.QueryRow(ctx, `SELECT id FROM api_keys WHERE account_id = $1`, a.accountID).Scan(&aKeyID); err != nil {
		t.Fatal(err)
	}
	want(t, e.do(t, "DELETE", "/v1/api-keys/"+aKeyID, b.key, nil), http.StatusNotFound)
	want(t, e.do(t, "GET", "/v1/tenants", a.key, nil), http.StatusOK)
}

// crossCheck asserts that a foreign tenant's path answers 404 exactly like
// a tenant id that does not exist.
func crossCheck(t *testing.T, e *env, caller, token, method, path, foreignTID string, body any) {
	t.Run(caller+" "+method+" "+strings.ReplaceAll(path, foreignTID, "A"), func(t *testing.T) {
		got := e.do(t, method, path, token, body)
		want(t, got, http.StatusNotFound)
		missing := strings.ReplaceAll(path, foreignTID, "ten_doesnotexist00000")
		if missing == path {
			got.problem(t)
			return
		}
		ghost := e.do(t, method, missing, token, body)
		want(t, ghost, http.StatusNotFound)
		gp, p := ghost.problem(t), got.problem(t)
		if gp.Type != p.Type || gp.Title != p.Title || gp.Detail != p.Detail {
			t.Fatalf("foreign %+v differs from missing %+v", p, gp)
		}
	})
}
