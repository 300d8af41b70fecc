package httpapi

import (
	"net/http"
	"path"
	"strings"
)

// withDashboard sends what no route matched to the dashboard when it is a
// GET or HEAD outside the API's own paths; everything else, and every
// request when dash is nil, gets notFound. It stands in for chi's NotFound
// rather than a "/*" route, so the routes stay exactly the documented API.
func withDashboard(dash http.Handler, notFound http.HandlerFunc) http.HandlerFunc {
	if dash == nil {
		return notFound
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if (r.Method == http.MethodGet || r.Method == http.MethodHead) && !apiPath(r.URL.Path) {
			dash.ServeHTTP(w, r)
			return
		}
		notFound(w, r)
	}
}

// apiPath reports whether p belongs to the API rather than the dashboard:
// /v1 and the operational endpoints, and anything below them. /metrics is
// served only on the internal listener (MetricsHandler); it stays listed so
// the public port answers it with a plain 404, not the dashboard.
func apiPath(p string) bool {
	p = path.Clean("/" + p)
	for _, root := range []string{"/v1", "/healthz", "/readyz", "/metrics"} {
		if p == root || strings.HasPrefix(p, root+"/") {
			return true
		}
	}
	return false
}
