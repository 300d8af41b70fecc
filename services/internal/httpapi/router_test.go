package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/services/internal/account"
	"berth.dev/services/internal/httpapi"
	"berth.dev/services/internal/openapi"
)

func TestHealthReadyMetrics(t *testing.T) {
	e := newEnv(t)
	want(t, e.do(t, "GET", "/healthz", "", nil), http.StatusOK)
	r := e.do(t, "GET", "/readyz", "", nil)
	want(t, r, http.StatusOK)
	u := e.signup("ada@example.com")
	want(t, e.do(t, "GET", "/v1/tenants/"+u.tenantID, u.key, nil), http.StatusOK)
	// /metrics is not public: the router answers 404 (a problem, not the
	// dashboard); the internal listener's handler serves the registry.
	pub := e.do(t, "GET", "/metrics", "", nil)
	want(t, pub, http.StatusNotFound)
	pub.problem(t)
	internal := httptest.NewServer(httpapi.MetricsHandler(e.opts.Registry))
	defer internal.Close()
	res, err := http.Get(internal.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("internal /metrics: %d %v", res.StatusCode, err)
	}
	m := resp{status: res.StatusCode, header: res.Header, body: body}
	for _, line := range []string{
		`berth_api_requests_total{code="200",method="GET",route="/v1/tenants/{tid}"} 1`,
		`berth_api_requests_total{code="202",method="POST",route="/v1/signup"} 1`,
		`berth_api_request_duration_seconds_count{method="GET",route="/v1/tenants/{tid}"} 1`,
	} {
		if !strings.Contains(string(m.body), line) {
			t.Fatalf("metrics lack %q:\n%s", line, m.body)
		}
	}
	// Not ready once Postgres is gone.
	e.pool.Close()
	want(t, e.do(t, "GET", "/readyz", "", nil), http.StatusServiceUnavailable)
}

func TestRequestID(t *testing.T) {
	e := newEnv(t)
	r := e.do(t, "GET", "/healthz", "", nil)
	if len(r.header.Get("X-Request-Id")) != 24 {
		t.Fatalf("X-Request-Id %q", r.header.Get("X-Request-Id"))
	}
	r = e.do(t, "GET", "/healthz", "", nil, "X-Request-Id", "trace-42")
	if r.header.Get("X-Request-Id") != "trace-42" {
		t.Fatalf("incoming id not kept: %q", r.header.Get("X-Request-Id"))
	}
	r = e.do(t, "GET", "/healthz", "", nil, "X-Request-Id", "bad id\"with quotes")
	if got := r.header.Get("X-Request-Id"); got == "" || strings.Contains(got, " ") {
		t.Fatalf("unsafe incoming id kept: %q", got)
	}
}

func TestRoutingProblems(t *testing.T) {
	e := newEnv(t)
	r := e.do(t, "GET", "/v1/nope", "", nil)
	want(t, r, http.StatusNotFound)
	r.problem(t)
	r = e.do(t, "PUT", "/v1/signup", "", nil)
	want(t, r, http.StatusMethodNotAllowed)
	r.problem(t)
}

func TestCORS(t *testing.T) {
	e := newEnv(t)
	r := e.do(t, "OPTIONS", "/v1/tenants", "", nil, "Origin", "https://dash.example.com", "Access-Control-Request-Method", "POST")
	want(t, r, http.StatusNoContent)
	if r.header.Get("Access-Control-Allow-Origin") != "https://dash.example.com" || r.header.Get("Access-Control-Allow-Credentials") != "true" ||
		!strings.Contains(r.header.Get("Access-Control-Allow-Headers"), "Authorization") {
		t.Fatalf("preflight headers %v", r.header)
	}
	r = e.do(t, "GET", "/healthz", "", nil, "Origin", "https://evil.example.com")
	if r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatal("CORS allowed a foreign origin")
	}
}

func TestAuthRateLimit(t *testing.T) {
	e := newEnv(t, func(o *httpapi.Options) { o.AuthRateLimit = 3 })
	body := map[string]string{"email": "nobody@example.com", "password": "wrong password!"}
	for range 3 {
		want(t, e.do(t, "POST", "/v1/login", "", body), http.StatusUnauthorized)
	}
	r := e.do(t, "POST", "/v1/login", "", body)
	want(t, r, http.StatusTooManyRequests)
	r.problem(t)
	if r.header.Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
	want(t, e.do(t, "POST", "/v1/signup", "", map[string]string{"email": "a@example.com", "password": "correct horse battery"}), http.StatusTooManyRequests)
	want(t, e.do(t, "GET", "/healthz", "", nil), http.StatusOK) // other routes are not limited
}

// TestAuthRateLimitClientAddress: the limiter keys on the peer unless the
// peer is a trusted proxy; then on the right-most X-Forwarded-For address
// that is not itself a trusted proxy.
func TestAuthRateLimitClientAddress(t *testing.T) {
	body := map[string]string{"email": "nobody@example.com", "password": "wrong password!"}
	login := func(e *env, xff string) int {
		t.Helper()
		return e.do(t, "POST", "/v1/login", "", body, "X-Forwarded-For", xff).status
	}

	// No trusted proxies: a forged X-Forwarded-For does not buy a new budget.
	e := newEnv(t, func(o *httpapi.Options) { o.AuthRateLimit = 2 })
	for i, xff := range []string{"203.0.113.1", "203.0.113.2"} {
		if got := login(e, xff); got != http.StatusUnauthorized {
			t.Fatalf("request %d: %d", i, got)
		}
	}
	if got := login(e, "203.0.113.3"); got != http.StatusTooManyRequests {
		t.Fatalf("forged X-Forwarded-For changed the limiter key: %d, want 429", got)
	}

	// The test client (127.0.0.1) is a trusted proxy, as is 10.0.0.0/8
	// (a second hop): each forwarded client has its own budget.
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8")}
	e = newEnv(t, func(o *httpapi.Options) { o.AuthRateLimit = 2; o.TrustedProxies = trusted })
	for _, client := range []string{"198.51.100.7", "198.51.100.8"} {
		for i := range 2 {
			// What the client wrote left of its address is not trusted.
			xff := fmt.Sprintf("192.0.2.%d, %s, 10.1.2.3", i, client)
			if got := login(e, xff); got != http.StatusUnauthorized {
				t.Fatalf("%s request %d: %d", client, i, got)
			}
		}
		if got := login(e, client); got != http.StatusTooManyRequests {
			t.Fatalf("%s over its budget: %d, want 429", client, got)
		}
	}
}

// TestPasswordHashBusy: a login that cannot get a hash slot before the
// limiter's wait ends gets 503 with Retry-After.
func TestPasswordHashBusy(t *testing.T) {
	hashes := account.NewHashLimiter(1, 50*time.Millisecond)
	e := newEnv(t, func(o *httpapi.Options) {
		o.Accounts = account.NewService(o.Store, testParams, 15*time.Minute, 24*time.Hour, hashes)
	})
	held, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- hashes.Do(context.Background(), func() { close(held); <-release }) }()
	<-held
	for _, c := range []struct{ path, email string }{{"/v1/login", "nobody@example.com"}, {"/v1/signup", "new@example.com"}} {
		r := e.do(t, "POST", c.path, "", map[string]string{"email": c.email, "password": "correct horse battery"})
		want(t, r, http.StatusServiceUnavailable)
		if p := r.problem(t); !strings.HasSuffix(p.Type, "/busy") || r.header.Get("Retry-After") == "" {
			t.Fatalf("%s: problem %+v, Retry-After %q", c.path, p, r.header.Get("Retry-After"))
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want(t, e.do(t, "POST", "/v1/login", "", map[string]string{"email": "nobody@example.com", "password": "correct horse battery"}), http.StatusUnauthorized)
}

func TestPagination(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	for range 4 {
		want(t, e.do(t, "POST", "/v1/api-keys", u.key, map[string]string{"name": "k"}), http.StatusCreated)
	}
	seen := map[string]bool{}
	cursor := ""
	pages := 0
	for {
		path := "/v1/api-keys?limit=2"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		r := e.do(t, "GET", path, u.key, nil)
		want(t, r, http.StatusOK)
		var page struct {
			Items      []struct{ ID string }
			NextCursor *string `json:"next_cursor"`
		}
		r.json(t, &page)
		pages++
		for _, it := range page.Items {
			if seen[it.ID] {
				t.Fatalf("%s twice", it.ID)
			}
			seen[it.ID] = true
		}
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	if len(seen) != 5 || pages != 3 {
		t.Fatalf("%d keys in %d pages", len(seen), pages)
	}
	for _, q := range []string{"limit=0", "limit=201", "limit=x", "cursor=!!", "cursor=e30"} {
		r := e.do(t, "GET", "/v1/api-keys?"+q, u.key, nil)
		want(t, r, http.StatusUnprocessableEntity)
		r.problem(t)
	}
}

// TestOpenAPIMatchesRouter keeps the document true: every route is
// documented and every documented operation is routed.
func TestOpenAPIMatchesRouter(t *testing.T) {
	e := newEnv(t)
	o := e.opts
	o.Registry = prometheus.NewRegistry()
	r, err := httpapi.NewRouter(o)
	if err != nil {
		t.Fatal(err)
	}
	var routed []string
	err = chi.Walk(r, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routed = append(routed, method+" "+strings.TrimSuffix(route, "/"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openapi.Document(), &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Fatalf("openapi %q", doc.OpenAPI)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	sort.Strings(routed)
	sort.Strings(documented)
	if diff := cmp.Diff(documented, routed); diff != "" {
		t.Fatalf("OpenAPI paths (-documented +routed):\n%s", diff)
	}
	// And the document is served.
	got := e.do(t, "GET", "/v1/openapi.json", "", nil)
	want(t, got, http.StatusOK)
	if string(got.body) != string(openapi.Document()) {
		t.Fatal("served document differs from the embedded one")
	}
}
