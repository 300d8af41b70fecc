package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"berth.dev/services/internal/store"
)

func liveEndpoints(tid string) []struct {
	method, path string
	body         any
} {
	p := "/v1/tenants/" + tid
	return []struct {
		method, path string
		body         any
	}{
		{"GET", p + "/topics/live", nil},
		{"GET", p + "/retained", nil},
		{"DELETE", p + "/retained?filter=a%2F%23", nil},
		{"POST", p + "/publish", map[string]any{"topic": "a/b", "payload": "hi"}},
		{"GET", p + "/sessions", nil},
		{"DELETE", p + "/sessions/dev-1", nil},
	}
}

func TestLiveViewsWithoutLiveNode(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	check := func(t *testing.T) {
		for _, ep := range liveEndpoints(u.tenantID) {
			r := e.do(t, ep.method, ep.path, u.key, ep.body)
			want(t, r, http.StatusServiceUnavailable)
			if p := r.problem(t); !strings.HasSuffix(p.Type, "/node-unavailable") || p.Detail == "" {
				t.Fatalf("%s %s: %+v", ep.method, ep.path, p)
			}
		}
	}
	t.Run("unassigned", check)

	// Placed on a node that then stops heartbeating.
	ctx := context.Background()
	n := store.Node{ID: "n1", MQTTAddr: "127.0.0.1:7883", AdminAddr: "127.0.0.1:1", Capacity: 10, HeartbeatAt: time.Now()}
	if err := e.store.UpsertNode(ctx, n); err != nil {
		t.Fatal(err)
	}
	if tn, err := e.store.AssignNode(ctx, u.accountID, u.tenantID); err != nil || tn.NodeID == nil {
		t.Fatalf("assign: %v %v", tn.NodeID, err)
	}
	n.HeartbeatAt = time.Now().Add(-time.Minute)
	if err := e.store.UpsertNode(ctx, n); err != nil {
		t.Fatal(err)
	}
	t.Run("dead node", check)

	// Live by heartbeat, but nothing listens at its admin address.
	n.HeartbeatAt = time.Now()
	if err := e.store.UpsertNode(ctx, n); err != nil {
		t.Fatal(err)
	}
	t.Run("unreachable node", check)
}

// fakeNode speaks the node admin protocol of docs/contracts.md. The real
// admin server lives in the broker module; this stands in for it at the
// HTTP level, recording what the API sent.
type fakeNode struct {
	mu       sync.Mutex
	requests []string
	publish  map[string]any
	sessions []map[string]any // GET sessions answers these when set
}

func (f *fakeNode) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+nodeToken {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	f.mu.Lock()
	f.requests = append(f.requests, r.Method+" "+r.URL.RequestURI())
	f.mu.Unlock()
	_, rest, _ := strings.Cut(r.URL.EscapedPath(), "/admin/tenants/")
	_, sub, _ := strings.Cut(rest, "/")
	js := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	switch {
	case r.Method == "GET" && sub == "sessions" && f.sessions != nil:
		f.mu.Lock()
		defer f.mu.Unlock()
		js(200, map[string]any{"sessions": f.sessions})
	case r.Method == "GET" && sub == "sessions":
		js(200, map[string]any{"sessions": []map[string]any{{"client_id": "dev-1", "connected": true, "protocol_version": 5,
			"remote_addr": "10.0.0.1:5000", "connected_at": "2026-01-01T00:00:00Z", "subscriptions": 2, "queued_messages": 0}}})
	case r.Method == "DELETE" && strings.HasPrefix(sub, "sessions/"):
		id, _ := url.PathUnescape(strings.TrimPrefix(sub, "sessions/"))
		if id == "dev/1" {
			w.WriteHeader(204)
			return
		}
		js(404, map[string]string{"error": "no such session"})
	case r.Method == "GET" && sub == "topics":
		js(200, map[string]any{"topics": []map[string]any{{"topic": "a/b", "messages": 10, "bytes": 100, "msgs_per_sec": 1.5, "bytes_per_sec": 15, "subscribers": 1}}})
	case r.Method == "GET" && sub == "retained":
		js(200, map[string]any{"retained": []map[string]any{{"topic": "a/b", "payload_base64": "aGk=", "qos": 1, "size": 2, "stored_at": "2026-01-01T00:00:00Z"}}})
	case r.Method == "DELETE" && sub == "retained":
		js(200, map[string]any{"deleted": 3})
	case r.Method == "POST" && sub == "publish":
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		f.mu.Lock()
		f.publish = body
		f.mu.Unlock()
		switch body["topic"] {
		case "too/big":
			js(413, map[string]string{"error": "message exceeds max_message_size", "quota": "size"})
			return
		case "over/month":
			js(429, map[string]string{"error": "the tenant's monthly messages quota (2) is used up until 2026-02-01T00:00:00Z", "quota": "monthly"})
			return
		case "no/retain":
			js(422, map[string]string{"error": "topic rule top_x (no/#) does not allow retained messages (retained_allowed is false); publish without retain",
				"quota": "topic_rule", "rule": "top_x"})
			return
		}
		js(202, map[string]bool{"accepted": true})
	default:
		js(404, map[string]string{"error": "no route"})
	}
}

func TestLiveViewsThroughNode(t *testing.T) {
	e := newEnv(t)
	fn := &fakeNode{}
	node := httptest.NewServer(fn)
	t.Cleanup(node.Close)
	ctx := context.Background()
	if err := e.store.UpsertNode(ctx, store.Node{ID: "n1", MQTTAddr: "127.0.0.1:7883", AdminAddr: node.Listener.Addr().String(), Capacity: 10, HeartbeatAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	u := e.signup("ada@example.com")
	p := "/v1/tenants/" + u.tenantID

	var items struct{ Items []map[string]any }
	r := e.do(t, "GET", p+"/sessions", u.key, nil)
	want(t, r, http.StatusOK)
	r.json(t, &items)
	if len(items.Items) != 1 || items.Items[0]["client_id"] != "dev-1" || items.Items[0]["protocol_version"] != 5.0 {
		t.Fatalf("sessions %s", r.body)
	}
	want(t, e.do(t, "DELETE", p+"/sessions/dev%2F1", u.key, nil), http.StatusNoContent)
	want(t, e.do(t, "DELETE", p+"/sessions/nobody", u.key, nil), http.StatusNotFound)

	r = e.do(t, "GET", p+"/topics/live", u.key, nil)
	want(t, r, http.StatusOK)
	r.json(t, &items)
	if len(items.Items) != 1 || items.Items[0]["msgs_per_sec"] != 1.5 {
		t.Fatalf("topics %s", r.body)
	}
	r = e.do(t, "GET", p+"/retained?filter=a%2F%2B", u.key, nil)
	want(t, r, http.StatusOK)
	r.json(t, &items)
	if len(items.Items) != 1 || items.Items[0]["payload_base64"] != "aGk=" {
		t.Fatalf("retained %s", r.body)
	}
	want(t, e.do(t, "GET", p+"/retained?filter=a%2F%23%2Fb", u.key, nil), http.StatusUnprocessableEntity)
	want(t, e.do(t, "DELETE", p+"/retained", u.key, nil), http.StatusUnprocessableEntity) // filter required
	r = e.do(t, "DELETE", p+"/retained?filter=%23", u.key, nil)
	want(t, r, http.StatusOK)
	if !strings.Contains(string(r.body), `"deleted":3`) {
		t.Fatalf("delete retained %s", r.body)
	}

	want(t, e.do(t, "POST", p+"/publish", u.key, map[string]any{"topic": "a/b", "payload_base64": "aGk=", "qos": 1, "retain": true,
		"user_properties": map[string]string{"traceparent": "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01"}}), http.StatusAccepted)
	fn.mu.Lock()
	if fn.publish["topic"] != "a/b" || fn.publish["payload_base64"] != "aGk=" || fn.publish["retain"] != true || fn.publish["qos"] != 1.0 {
		t.Fatalf("node got %v", fn.publish)
	}
	fn.mu.Unlock()
	want(t, e.do(t, "POST", p+"/publish", u.key, map[string]any{"topic": "too/big", "payload": "x"}), http.StatusRequestEntityTooLarge)
	r = e.do(t, "POST", p+"/publish", u.key, map[string]any{"topic": "over/month", "payload": "x"})
	want(t, r, http.StatusTooManyRequests)
	if pr := r.problem(t); !strings.HasSuffix(pr.Type, "/quota-exceeded") || !strings.Contains(pr.Detail, "monthly messages quota") {
		t.Fatalf("over the monthly quota: %s", r.body)
	}
	r = e.do(t, "POST", p+"/publish", u.key, map[string]any{"topic": "no/retain", "payload": "x", "retain": true})
	want(t, r, http.StatusUnprocessableEntity)
	if pr := r.problem(t); !strings.HasSuffix(pr.Type, "/retain-not-allowed") || !strings.Contains(pr.Detail, "top_x") {
		t.Fatalf("retained where a topic rule refuses it: %s", r.body)
	}
	for _, bad := range []map[string]any{
		{"topic": "a/+", "payload": "x"},
		{"topic": "", "payload": "x"},
		{"topic": "a", "qos": 3},
		{"topic": "a", "payload": "x", "payload_base64": "eA=="},
		{"topic": "a", "payload_base64": "not base64!"},
	} {
		r := e.do(t, "POST", p+"/publish", u.key, bad)
		want(t, r, http.StatusUnprocessableEntity)
		r.problem(t)
	}

	fn.mu.Lock()
	defer fn.mu.Unlock()
	for _, req := range fn.requests {
		if !strings.Contains(req, "/admin/tenants/"+u.tenantID+"/") {
			t.Fatalf("request %q not scoped to the tenant", req)
		}
	}
}

// TestSessionsPaging: the API filters the node's sessions by state and
// client-id prefix and pages them by client id, whatever order the node
// answers in.
func TestSessionsPaging(t *testing.T) {
	e := newEnv(t)
	fn := &fakeNode{sessions: []map[string]any{}}
	// 12 sessions in a scrambled order: sensor-00 … sensor-09 (even ones
	// connected), gw-a (connected) and gw-b (offline).
	for _, i := range []int{7, 3, 9, 0, 5, 1, 8, 2, 6, 4} {
		fn.sessions = append(fn.sessions, map[string]any{"client_id": fmt.Sprintf("sensor-%02d", i), "connected": i%2 == 0})
	}
	fn.sessions = append(fn.sessions, map[string]any{"client_id": "gw-b", "connected": false}, map[string]any{"client_id": "gw-a", "connected": true})
	node := httptest.NewServer(fn)
	t.Cleanup(node.Close)
	if err := e.store.UpsertNode(context.Background(), store.Node{ID: "n1", MQTTAddr: "127.0.0.1:7883", AdminAddr: node.Listener.Addr().String(), Capacity: 10, HeartbeatAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	u := e.signup("ada@example.com")
	base := "/v1/tenants/" + u.tenantID + "/sessions"

	type page struct {
		Items []struct {
			ClientID  string `json:"client_id"`
			Connected bool   `json:"connected"`
		} `json:"items"`
		NextCursor *string `json:"next_cursor"`
	}
	// walk follows next_cursor from query to the end and returns the ids
	// of each page.
	walk := func(t *testing.T, query string) [][]string {
		t.Helper()
		var pages [][]string
		cursor := ""
		for range 20 {
			q := query
			if cursor != "" {
				q += "&cursor=" + url.QueryEscape(cursor)
			}
			r := e.do(t, "GET", base+"?"+q, u.key, nil)
			want(t, r, http.StatusOK)
			var p page
			r.json(t, &p)
			ids := []string{}
			for _, it := range p.Items {
				ids = append(ids, it.ClientID)
			}
			pages = append(pages, ids)
			if p.NextCursor == nil {
				return pages
			}
			cursor = *p.NextCursor
		}
		t.Fatalf("%s: no end after 20 pages", query)
		return nil
	}
	for _, tc := range []struct {
		name, query string
		want        string
	}{
		{"everything, default limit", "", "[[gw-a gw-b sensor-00 sensor-01 sensor-02 sensor-03 sensor-04 sensor-05 sensor-06 sensor-07 sensor-08 sensor-09]]"},
		{"pages of 5", "limit=5", "[[gw-a gw-b sensor-00 sensor-01 sensor-02] [sensor-03 sensor-04 sensor-05 sensor-06 sensor-07] [sensor-08 sensor-09]]"},
		{"exact last page", "limit=6", "[[gw-a gw-b sensor-00 sensor-01 sensor-02 sensor-03] [sensor-04 sensor-05 sensor-06 sensor-07 sensor-08 sensor-09]]"},
		{"connected", "state=connected&limit=4", "[[gw-a sensor-00 sensor-02 sensor-04] [sensor-06 sensor-08]]"},
		{"offline", "state=offline", "[[gw-b sensor-01 sensor-03 sensor-05 sensor-07 sensor-09]]"},
		{"prefix", "prefix=sensor-0&limit=8", "[[sensor-00 sensor-01 sensor-02 sensor-03 sensor-04 sensor-05 sensor-06 sensor-07] [sensor-08 sensor-09]]"},
		{"prefix and state", "prefix=gw-&state=offline", "[[gw-b]]"},
		{"prefix matching nothing", "prefix=zzz", "[[]]"},
		{"prefix before every id", "prefix=a", "[[]]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fmt.Sprint(walk(t, tc.query)); got != tc.want {
				t.Fatalf("pages %s, want %s", got, tc.want)
			}
		})
	}

	// Fields pass through from the node.
	r := e.do(t, "GET", base+"?prefix=gw-a", u.key, nil)
	want(t, r, http.StatusOK)
	var p page
	r.json(t, &p)
	if len(p.Items) != 1 || !p.Items[0].Connected || p.NextCursor != nil {
		t.Fatalf("gw-a: %s", r.body)
	}

	// A tenants cursor (time and id) is not a sessions cursor.
	tl := e.do(t, "GET", "/v1/tenants?limit=1", u.key, nil)
	want(t, tl, http.StatusOK)
	e.do(t, "POST", "/v1/tenants", u.key, map[string]string{"slug": "second"})
	tl = e.do(t, "GET", "/v1/tenants?limit=1", u.key, nil)
	var tp page
	tl.json(t, &tp)
	if tp.NextCursor == nil {
		t.Fatalf("tenants page %s has no cursor", tl.body)
	}
	for _, tc := range []struct{ query, fields string }{
		{"limit=0", "[limit]"},
		{"limit=1001", "[limit]"},
		{"limit=ten", "[limit]"},
		{"state=online", "[state]"},
		{"cursor=not-a-cursor", "[cursor]"},
		{"cursor=" + url.QueryEscape(*tp.NextCursor), "[cursor]"},
		{"limit=0&state=online", "[limit state]"},
	} {
		r := e.do(t, "GET", base+"?"+tc.query, u.key, nil)
		want(t, r, http.StatusUnprocessableEntity)
		var fields []string
		for _, f := range r.problem(t).Errors {
			fields = append(fields, f.Field)
		}
		if fmt.Sprint(fields) != tc.fields {
			t.Fatalf("%s: fields %v, want %s", tc.query, fields, tc.fields)
		}
	}
	// And a sessions cursor is not a tenants cursor.
	r = e.do(t, "GET", base+"?limit=1", u.key, nil)
	r.json(t, &p)
	want(t, e.do(t, "GET", "/v1/tenants?cursor="+url.QueryEscape(*p.NextCursor), u.key, nil), http.StatusUnprocessableEntity)
	// The largest page is allowed.
	want(t, e.do(t, "GET", base+"?limit=1000", u.key, nil), http.StatusOK)
}
