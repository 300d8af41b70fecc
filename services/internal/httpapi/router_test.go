package httpapi_test

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

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
	m := e.do(t, "GET", "/metrics", "", nil)
	want(t, m, http.StatusOK)
	for _, line := range []string{
		`berth_api_requests_total{code="200",method="GET",route="/v1/tenants/{tid}"} 1`,
		`berth_api_requests_total{code="201",method="POST",route="/v1/signup"} 1`,
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
