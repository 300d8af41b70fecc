package httpapi_test

import (
	"net/http"
	"testing"

	"berth.dev/services/internal/httpapi"
)

// dashboardStandIn answers like a dashboard would, naming the path it got.
var dashboardStandIn = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("dashboard " + r.URL.Path))
})

func TestDashboardFallback(t *testing.T) {
	e := newEnv(t, func(o *httpapi.Options) { o.Dashboard = dashboardStandIn })
	for _, tc := range []struct {
		method, path string
		status       int
		body         string // "" = a problem document
	}{
		{"GET", "/", 200, "dashboard /"},
		{"GET", "/some/page", 200, "dashboard /some/page"},
		{"GET", "/assets/index-4f2a.js", 200, "dashboard /assets/index-4f2a.js"},
		{"GET", "/v1x", 200, "dashboard /v1x"},
		{"HEAD", "/some/page", 200, ""},
		{"GET", "/v1/nope", 404, ""},
		{"GET", "/v1", 404, ""},
		{"GET", "/v1/", 404, ""},
		{"HEAD", "/v1/nope", 404, ""},
		{"GET", "/healthz/x", 404, ""},
		{"GET", "/metrics", 404, ""}, // served on the internal listener only
		{"GET", "/metrics/x", 404, ""},
		{"POST", "/x", 404, ""},
		{"DELETE", "/some/page", 404, ""},
		{"PUT", "/v1/signup", 405, ""},
		{"GET", "/healthz", 200, "ok\n"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			r := e.do(t, tc.method, tc.path, "", nil)
			want(t, r, tc.status)
			switch {
			case tc.method == "HEAD":
				if tc.status == 200 && r.header.Get("Content-Type") != "text/plain; charset=utf-8" {
					t.Fatalf("HEAD not sent to the dashboard: %v", r.header)
				}
			case tc.body == "":
				r.problem(t)
			case string(r.body) != tc.body:
				t.Fatalf("body %q, want %q", r.body, tc.body)
			}
		})
	}
	// Without a dashboard the API is as it was: unknown paths are problems.
	plain := newEnv(t)
	r := plain.do(t, "GET", "/some/page", "", nil)
	want(t, r, http.StatusNotFound)
	r.problem(t)
}
