package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"berth.dev/services/internal/httpapi"
	"berth.dev/services/internal/openapi"
)

// writeRate sets the accounts' write bucket (cmd/api's
// -account-write-rate, -account-write-burst).
func writeRate(rate float64, burst int) envOption {
	return func(o *httpapi.Options) { o.AccountWriteRate, o.AccountWriteBurst = rate, burst }
}

func wantWriteLimited(t *testing.T, r resp) {
	t.Helper()
	want(t, r, http.StatusTooManyRequests)
	p := r.problem(t)
	if !strings.HasSuffix(p.Type, "/rate-limited") || !strings.Contains(p.Detail, "0.001 a second") {
		t.Fatalf("problem %+v, want rate-limited naming the rate", p)
	}
	// One token every 1000 s: the wait is most of that, in whole seconds.
	if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 1 || s > 1000 {
		t.Fatalf("Retry-After %q, want whole seconds in [1, 1000]", r.header.Get("Retry-After"))
	}
}

// An account's authenticated writes share one bucket over all its API keys
// and sessions: past it they get 429 with Retry-After, while its reads,
// its HTTP publish and other accounts' writes go on.
func TestAccountWriteRate(t *testing.T) {
	// A token every 1000 s: nothing refills while the test runs.
	e := newEnv(t, writeRate(0.001, 3))
	u := e.signup("ada@example.com") // signup is not an authenticated write
	session := e.login(t, "ada@example.com")

	r := e.do(t, "POST", "/v1/api-keys", u.key, map[string]string{"name": "second"}) // 1
	want(t, r, http.StatusCreated)
	var second struct{ Secret string }
	r.json(t, &second)
	want(t, e.do(t, "POST", "/v1/tenants/"+u.tenantID+"/credentials", second.Secret,
		map[string]any{"name": "d1", "acl": map[string]any{"pub": []string{"a"}, "sub": []string{}}}), http.StatusCreated) // 2
	// A refused write takes its token too.
	want(t, e.do(t, "PUT", "/v1/tenants/"+u.tenantID+"/quotas", session, map[string]int64{"max_connections": 0}), http.StatusUnprocessableEntity) // 3

	// The bucket is empty for every key and session of the account, for
	// each write method.
	wantWriteLimited(t, e.do(t, "POST", "/v1/api-keys", u.key, map[string]string{"name": "third"}))
	wantWriteLimited(t, e.do(t, "PATCH", "/v1/tenants/"+u.tenantID, second.Secret, map[string]string{"slug": "renamed"}))
	wantWriteLimited(t, e.do(t, "PUT", "/v1/tenants/"+u.tenantID+"/quotas", session, map[string]int64{"max_connections": 5}))
	wantWriteLimited(t, e.do(t, "DELETE", "/v1/tenants/"+u.tenantID, u.key, nil))
	var tn tenantOut
	e.do(t, "GET", "/v1/tenants/"+u.tenantID, u.key, nil).json(t, &tn)
	if tn.Slug != u.slug {
		t.Fatalf("a refused PATCH changed the slug to %q", tn.Slug)
	}

	// Reads are not limited.
	for range 10 {
		want(t, e.do(t, "GET", "/v1/tenants", u.key, nil), http.StatusOK)
		want(t, e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/quotas", session, nil), http.StatusOK)
	}
	// HTTP publish is metered by the tenant's message quotas on its node,
	// not by the write rate: here it reaches the point of finding no node.
	r = e.do(t, "POST", "/v1/tenants/"+u.tenantID+"/publish", u.key, map[string]any{"topic": "a/b", "payload": "hi"})
	want(t, r, http.StatusServiceUnavailable)
	// Unauthenticated writes are refused as such, not counted.
	want(t, e.do(t, "POST", "/v1/api-keys", "", map[string]string{"name": "x"}), http.StatusUnauthorized)

	// Another account has its own bucket.
	v := e.signup("bob@example.com")
	for i := range 3 {
		want(t, e.do(t, "POST", "/v1/api-keys", v.key, map[string]string{"name": "k" + strconv.Itoa(i)}), http.StatusCreated)
	}
	wantWriteLimited(t, e.do(t, "POST", "/v1/api-keys", v.key, map[string]string{"name": "k3"}))
}

// The default bucket (20 a second, bursts of 40) lets a burst of writes
// through that no person at the dashboard makes.
func TestAccountWriteRateDefault(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	for i := range 40 {
		want(t, e.do(t, "POST", "/v1/api-keys", u.key, map[string]string{"name": "k" + strconv.Itoa(i)}), http.StatusCreated)
	}
}

// The API reference lists the refusals: 429 on every authenticated write,
// 402 and 403 where a plan or the tenant cap can refuse.
func TestOpenAPIDocumentsWriteRefusals(t *testing.T) {
	var doc struct {
		Security []any `json:"security"`
		Paths    map[string]map[string]struct {
			Security  *[]any                     `json:"security"`
			Responses map[string]json.RawMessage `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(openapi.Document(), &doc); err != nil {
		t.Fatal(err)
	}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			switch method {
			case "post", "put", "patch", "delete":
			default:
				continue
			}
			if op.Security != nil && len(*op.Security) == 0 {
				continue // unauthenticated: the signup/login limiter's own 429
			}
			if _, ok := op.Responses["429"]; !ok {
				t.Errorf("%s %s: no 429", strings.ToUpper(method), path)
			}
		}
	}
	for _, c := range []struct{ path, method, code string }{
		{"/v1/tenants", "post", "402"}, {"/v1/tenants", "post", "403"}, {"/v1/tenants/{tid}", "patch", "402"},
	} {
		if _, ok := doc.Paths[c.path][c.method].Responses[c.code]; !ok {
			t.Errorf("%s %s: no %s", strings.ToUpper(c.method), c.path, c.code)
		}
	}
}
