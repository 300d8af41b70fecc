package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestNodeRebalance: `berthctl node rebalance ADDR` POSTs /admin/rebalance
// with the node token and the timeout, prints each node's target share,
// and exits 0 when the cluster is balanced, 1 when not in time, 3 when the
// token is refused, 2 without a token. The node's side (replicas and
// leaderships actually moving) is TestRebalanceOntoJoinedNode in
// broker/internal/node.
func TestNodeRebalance(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery+" "+r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		switch r.Header.Get("Authorization") {
		case "Bearer tok":
			_, _ = w.Write([]byte(`{"node_id":"node-1","balanced":true,"tenants":9,"leaderships_moved":2,"replicas_moved":1,"took_ms":900,
				"nodes":[{"id":"node-1","replicas":5,"leaderships":3,"alive":true,"following":true},{"id":"node-3","replicas":4,"leaderships":3,"alive":true,"following":true}]}`))
		case "Bearer slow":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"node_id":"node-1","balanced":false,"tenants":9,"nodes":[{"id":"node-2","replicas":4,"leaderships":3,"alive":false}]}`))
		default:
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"missing or wrong node token"}`))
		}
	}))
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	rebalance := func(token string, args ...string) (int, string, string) {
		var o, e bytes.Buffer
		vars := map[string]string{"BERTH_CONFIG": "/nonexistent/berth/config.json", "BERTH_NODE_TOKEN": token}
		code := run(context.Background(), append([]string{"node", "rebalance"}, args...), &env{stdin: strings.NewReader(""), stdout: &o, stderr: &e, getenv: func(k string) string { return vars[k] }})
		return code, o.String(), e.String()
	}
	if code, out, errOut := rebalance("tok", addr, "--timeout", "2m"); code != 0 || !strings.Contains(out, "cluster balanced") ||
		!strings.Contains(out, "node-3") || !strings.Contains(out, "4 replicas, 3 leaderships") {
		t.Fatalf("balanced: exit %d %q %q", code, out, errOut)
	}
	if got[0] != "POST /admin/rebalance?timeout=2m0s Bearer tok" {
		t.Fatalf("request %q", got[0])
	}
	if code, out, _ := rebalance("slow", addr); code != exitError || !strings.Contains(out, "NOT balanced") || !strings.Contains(out, "(down)") {
		t.Fatalf("not balanced: exit %d %q", code, out)
	}
	if code, out, _ := rebalance("tok", addr, "--json"); code != 0 || !strings.Contains(out, `"leaderships_moved": 2`) {
		t.Fatalf("--json: exit %d %q", code, out)
	}
	if code, _, errOut := rebalance("bad", addr); code != exitAuth || !strings.Contains(errOut, "refused the node token") {
		t.Fatalf("wrong token: exit %d %q", code, errOut)
	}
	if code, _, _ := rebalance("", addr); code != exitUsage {
		t.Fatalf("no token: exit %d", code)
	}
}
