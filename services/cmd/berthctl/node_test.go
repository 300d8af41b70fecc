package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestNodeDrain: `berthctl node drain ADDR` POSTs /admin/drain with the
// node token (from BERTH_NODE_TOKEN) and the timeout, prints the report,
// and exits 0 when the node is drained, 1 when it still leads tenants, 3
// when the token is refused, 2 without a token. The node's side (the
// leaderships actually moving) is TestDrainMovesLeadershipUnderLoad in
// broker/internal/node.
func TestNodeDrain(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery+" "+r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		switch r.Header.Get("Authorization") {
		case "Bearer tok":
			_, _ = w.Write([]byte(`{"node_id":"node-1","drained":true,"moved":3,"remaining":[],"took_ms":120}`))
		case "Bearer slow":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"node_id":"node-1","drained":false,"moved":2,"remaining":["ten_x"],"took_ms":30000}`))
		default:
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"missing or wrong node token"}`))
		}
	}))
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	drain := func(token string, args ...string) (int, string, string) {
		var o, e bytes.Buffer
		vars := map[string]string{"BERTH_CONFIG": "/nonexistent/berth/config.json", "BERTH_NODE_TOKEN": token}
		code := run(context.Background(), append([]string{"node", "drain"}, args...), &env{stdin: strings.NewReader(""), stdout: &o, stderr: &e, getenv: func(k string) string { return vars[k] }})
		return code, o.String(), e.String()
	}
	if code, out, errOut := drain("tok", addr, "--timeout", "30s"); code != 0 || !strings.Contains(out, "node node-1 drained: 3 tenant leadership(s) moved") {
		t.Fatalf("drained: exit %d %q %q", code, out, errOut)
	}
	if got[0] != "POST /admin/drain?timeout=30s Bearer tok" {
		t.Fatalf("request %q", got[0])
	}
	if code, out, _ := drain("slow", addr); code != exitError || !strings.Contains(out, "NOT drained") || !strings.Contains(out, "ten_x") {
		t.Fatalf("not drained: exit %d %q", code, out)
	}
	if code, _, errOut := drain("bad", addr); code != exitAuth || !strings.Contains(errOut, "refused the node token") {
		t.Fatalf("wrong token: exit %d %q", code, errOut)
	}
	if code, _, _ := drain("", addr); code != exitUsage {
		t.Fatalf("no token: exit %d", code)
	}
}
