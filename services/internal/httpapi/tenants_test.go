package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/billing/plan"
	"berth.dev/quotas"
	"berth.dev/services/internal/httpapi"
	"berth.dev/services/internal/store"
)

func listen(t *testing.T, e *env, channel string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
		t.Fatal(err)
	}
	return conn
}

func waitNotify(t *testing.T, conn *pgx.Conn, channel, payload string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("waiting for %s %q: %v", channel, payload, err)
		}
		if n.Channel == channel && n.Payload == payload {
			return
		}
	}
}

type tenantOut struct {
	ID, Slug, Plan, Endpoint string
	NodeID                   *string `json:"node_id"`
}

func TestTenantPlacement(t *testing.T) {
	// Four tenants in one account: over free's cap of 3, so pro is open.
	e := newEnv(t, openPlans("free", "pro"))
	u := e.signup("ada@example.com") // no nodes yet
	ctx := context.Background()
	var first tenantOut
	r := e.do(t, "GET", "/v1/tenants/"+u.tenantID, u.key, nil)
	want(t, r, http.StatusOK)
	r.json(t, &first)
	if first.NodeID != nil {
		t.Fatalf("placed with no nodes: %v", *first.NodeID)
	}

	now := time.Now()
	for _, n := range []store.Node{
		{ID: "dead", MQTTAddr: "x:1", AdminAddr: "x:2", Capacity: 100, HeartbeatAt: now.Add(-time.Minute)},
		{ID: "draining", MQTTAddr: "x:1", AdminAddr: "x:2", Capacity: 100, HeartbeatAt: now, Draining: true},
		{ID: "small", MQTTAddr: "x:1", AdminAddr: "x:2", Capacity: 2, HeartbeatAt: now},
		{ID: "big", MQTTAddr: "x:1", AdminAddr: "x:2", Capacity: 10, HeartbeatAt: now},
	} {
		if err := e.store.UpsertNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	// Lazy placement: the unplaced tenant gets a node when next read, and
	// the gateways hear of it.
	conn := listen(t, e, "berth_placement")
	r = e.do(t, "GET", "/v1/tenants/"+u.tenantID, u.key, nil)
	want(t, r, http.StatusOK)
	r.json(t, &first)
	if first.NodeID == nil || *first.NodeID != "big" { // 0/10 vs 0/2: tie on ratio, "big" < "small"
		t.Fatalf("lazy placement: %v", first.NodeID)
	}
	waitNotify(t, conn, "berth_placement", u.tenantID)

	// Fewest tenants relative to capacity: small 0/2 beats big 1/10; then
	// big 1/10 beats small 1/2, and big 2/10 still does.
	var got []string
	for _, slug := range []string{"t1", "t2", "t3"} {
		r := e.do(t, "POST", "/v1/tenants", u.key, map[string]string{"slug": slug})
		want(t, r, http.StatusCreated)
		var out tenantOut
		r.json(t, &out)
		if out.NodeID == nil {
			t.Fatalf("%s unplaced", slug)
		}
		got = append(got, *out.NodeID)
	}
	if want := []string{"small", "big", "big"}; got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("placements %v, want %v", got, want)
	}
}

func TestTenantCRUD(t *testing.T) {
	e := newEnv(t, openPlans("free", "pro"))
	u := e.signup("ada@example.com")
	r := e.do(t, "POST", "/v1/tenants", u.key, map[string]string{"slug": "factory-7", "plan": "pro"})
	want(t, r, http.StatusCreated)
	var tn tenantOut
	r.json(t, &tn)
	if tn.Slug != "factory-7" || tn.Plan != "pro" || tn.Endpoint != "factory-7.mqtt.test" || r.header.Get("Location") != "/v1/tenants/"+tn.ID {
		t.Fatalf("tenant %+v", tn)
	}
	pro, _ := plan.Lookup("pro")
	var q struct{ Quotas quotas.Quotas }
	e.do(t, "GET", "/v1/tenants/"+tn.ID+"/quotas", u.key, nil).json(t, &q)
	if q.Quotas != pro.Defaults {
		t.Fatalf("quotas %+v, want pro defaults", q.Quotas)
	}

	for _, c := range []struct {
		name   string
		body   any
		status int
	}{
		{"duplicate slug", map[string]string{"slug": "factory-7"}, 409},
		{"uppercase", map[string]string{"slug": "Factory"}, 422},
		{"leading hyphen", map[string]string{"slug": "-x"}, 422},
		{"dot", map[string]string{"slug": "a.b"}, 422},
		{"empty", map[string]string{"slug": ""}, 422},
		{"unknown plan", map[string]string{"slug": "ok", "plan": "gold"}, 422},
		{"sql", map[string]string{"slug": "'; DELETE FROM tenants; --"}, 422},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(t, "POST", "/v1/tenants", u.key, c.body)
			want(t, r, c.status)
			r.problem(t)
		})
	}

	// A downgrade while quotas are above the new plan's bounds (pro's
	// defaults are) is refused naming one, and changes nothing, not even
	// the slug sent with it; with the quotas lowered first it goes through.
	free, _ := plan.Lookup("free")
	p := e.do(t, "PATCH", "/v1/tenants/"+tn.ID, u.key, map[string]string{"plan": "free", "slug": "factory-8"})
	want(t, p, http.StatusConflict)
	if pr := p.problem(t); !strings.HasSuffix(pr.Type, "plan-change-refused") || len(pr.Errors) != 1 || !strings.Contains(pr.Detail, pr.Errors[0].Field) {
		t.Fatalf("downgrade over the bounds: %+v", pr)
	}
	e.do(t, "GET", "/v1/tenants/"+tn.ID, u.key, nil).json(t, &tn)
	if tn.Plan != "pro" || tn.Slug != "factory-7" {
		t.Fatalf("a refused downgrade changed the tenant: %+v", tn)
	}
	want(t, e.do(t, "PUT", "/v1/tenants/"+tn.ID+"/quotas", u.key, free.Defaults), http.StatusOK)
	planc := listen(t, e, "berth_quotas") // the nodes follow the plan: the replication factor
	p = e.do(t, "PATCH", "/v1/tenants/"+tn.ID, u.key, map[string]string{"plan": "free", "slug": "factory-8"})
	want(t, p, http.StatusOK)
	waitNotify(t, planc, "berth_quotas", tn.ID)
	p.json(t, &tn)
	if tn.Plan != "free" || tn.Slug != "factory-8" {
		t.Fatalf("patched %+v", tn)
	}
	want(t, e.do(t, "PATCH", "/v1/tenants/"+tn.ID, u.key, map[string]string{"slug": u.slug}), http.StatusConflict)
	want(t, e.do(t, "PATCH", "/v1/tenants/"+tn.ID, u.key, map[string]string{"plan": "gold"}), http.StatusUnprocessableEntity)

	// The trace sample rate: 0.001 by default, 0..1, announced to the nodes.
	var rated struct {
		TraceSampleRate *float64 `json:"trace_sample_rate"`
	}
	e.do(t, "GET", "/v1/tenants/"+tn.ID, u.key, nil).json(t, &rated)
	if rated.TraceSampleRate == nil || *rated.TraceSampleRate != 0.001 {
		t.Fatalf("trace_sample_rate %v, want 0.001", rated.TraceSampleRate)
	}
	for _, bad := range []any{-0.1, 1.5, "all"} {
		r := e.do(t, "PATCH", "/v1/tenants/"+tn.ID, u.key, map[string]any{"trace_sample_rate": bad})
		if r.status != http.StatusUnprocessableEntity && r.status != http.StatusBadRequest {
			t.Fatalf("trace_sample_rate %v: status %d", bad, r.status)
		}
	}
	rc := listen(t, e, "berth_quotas")
	p = e.do(t, "PATCH", "/v1/tenants/"+tn.ID, u.key, map[string]any{"trace_sample_rate": 0.25})
	want(t, p, http.StatusOK)
	p.json(t, &rated)
	if *rated.TraceSampleRate != 0.25 {
		t.Fatalf("patched trace_sample_rate %v", *rated.TraceSampleRate)
	}
	waitNotify(t, rc, "berth_quotas", tn.ID)

	pc := listen(t, e, "berth_placement")
	want(t, e.do(t, "DELETE", "/v1/tenants/"+tn.ID, u.key, nil), http.StatusNoContent)
	waitNotify(t, pc, "berth_placement", tn.ID)
	want(t, e.do(t, "GET", "/v1/tenants/"+tn.ID, u.key, nil), http.StatusNotFound)
	want(t, e.do(t, "DELETE", "/v1/tenants/"+tn.ID, u.key, nil), http.StatusNotFound)
}

func TestQuotas(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	path := "/v1/tenants/" + u.tenantID + "/quotas"
	free, _ := plan.Lookup("free")
	var got struct {
		Plan   string
		Quotas quotas.Quotas
		Max    quotas.Quotas
	}
	r := e.do(t, "GET", path, u.key, nil)
	want(t, r, http.StatusOK)
	r.json(t, &got)
	if got.Plan != "free" || got.Quotas != free.Defaults || got.Max != free.Max {
		t.Fatalf("quotas %+v", got)
	}

	conn := listen(t, e, "berth_quotas")
	r = e.do(t, "PUT", path, u.key, map[string]int64{"max_connections": 20, "max_message_size": 1024})
	want(t, r, http.StatusOK)
	waitNotify(t, conn, "berth_quotas", u.tenantID)
	r.json(t, &got)
	wantQ := free.Defaults
	wantQ.MaxConnections, wantQ.MaxMessageSize = 20, 1024
	if got.Quotas != wantQ {
		t.Fatalf("after PUT %+v, want %+v", got.Quotas, wantQ)
	}
	e.do(t, "GET", path, u.key, nil).json(t, &got)
	if got.Quotas != wantQ {
		t.Fatalf("stored %+v", got.Quotas)
	}

	for _, c := range []struct {
		name   string
		body   any
		status int
		field  string
	}{
		{"above plan", map[string]int64{"max_connections": free.Max.MaxConnections + 1}, 422, "max_connections"},
		{"zero", map[string]int64{"monthly_messages": 0}, 422, "monthly_messages"},
		{"negative", map[string]int64{"max_inflight": -5}, 422, "max_inflight"},
		{"unknown quota", map[string]int64{"max_tenants": 5}, 422, "max_tenants"},
		{"not a number", map[string]any{"max_connections": "lots"}, 422, "max_connections"},
		{"malformed", `{"max_connections":`, 400, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(t, "PUT", path, u.key, c.body)
			want(t, r, c.status)
			p := r.problem(t)
			if c.field != "" && (len(p.Errors) != 1 || p.Errors[0].Field != c.field) {
				t.Fatalf("errors %+v, want %s", p.Errors, c.field)
			}
		})
	}
	e.do(t, "GET", path, u.key, nil).json(t, &got)
	if got.Quotas != wantQ {
		t.Fatalf("refused PUTs changed quotas: %+v", got.Quotas)
	}
}

func TestTopicRules(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	path := "/v1/tenants/" + u.tenantID + "/topics"
	r := e.do(t, "POST", path, u.key, map[string]any{"filter": "sensors/+/temp", "retention_seconds": 3600, "retained_allowed": false, "max_message_size": 512})
	want(t, r, http.StatusCreated)
	var rule struct {
		ID               string
		Filter           string
		RetentionSeconds *int64 `json:"retention_seconds"`
		RetainedAllowed  bool   `json:"retained_allowed"`
		MaxMessageSize   *int64 `json:"max_message_size"`
	}
	r.json(t, &rule)
	if rule.Filter != "sensors/+/temp" || *rule.RetentionSeconds != 3600 || rule.RetainedAllowed || *rule.MaxMessageSize != 512 {
		t.Fatalf("rule %+v", rule)
	}
	r = e.do(t, "POST", path, u.key, map[string]any{"filter": "logs/#"})
	want(t, r, http.StatusCreated)

	for _, c := range []struct {
		name   string
		body   any
		status int
		field  string
	}{
		{"duplicate", map[string]any{"filter": "sensors/+/temp"}, 409, "filter"},
		{"bad hash", map[string]any{"filter": "a/#/b"}, 422, "filter"},
		{"bad plus", map[string]any{"filter": "a+"}, 422, "filter"},
		{"empty", map[string]any{"filter": ""}, 422, "filter"},
		{"retention over plan", map[string]any{"filter": "x", "retention_seconds": 1 << 40}, 422, "retention_seconds"},
		{"size over plan", map[string]any{"filter": "x", "max_message_size": 1 << 30}, 422, "max_message_size"},
		{"size zero", map[string]any{"filter": "x", "max_message_size": 0}, 422, "max_message_size"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(t, "POST", path, u.key, c.body)
			want(t, r, c.status)
			if p := r.problem(t); len(p.Errors) == 0 || p.Errors[0].Field != c.field {
				t.Fatalf("errors %+v, want %s", p.Errors, c.field)
			}
		})
	}
	l := e.do(t, "GET", path+"?limit=1", u.key, nil)
	want(t, l, http.StatusOK)
	var page struct {
		Items      []struct{ ID, Filter string }
		NextCursor *string `json:"next_cursor"`
	}
	l.json(t, &page)
	if len(page.Items) != 1 || page.Items[0].ID != rule.ID || page.NextCursor == nil {
		t.Fatalf("page 1: %s", l.body)
	}
	e.do(t, "GET", path+"?limit=1&cursor="+*page.NextCursor, u.key, nil).json(t, &page)
	if len(page.Items) != 1 || page.Items[0].Filter != "logs/#" || page.NextCursor != nil {
		t.Fatalf("page 2: %+v", page)
	}

	want(t, e.do(t, "DELETE", path+"/"+rule.ID, u.key, nil), http.StatusNoContent)
	want(t, e.do(t, "DELETE", path+"/"+rule.ID, u.key, nil), http.StatusNotFound)
}

// Every tenant answer (get, create, list, update) carries the gateway's
// endpoints; a listener the API was not told about is left out.
func TestTenantEndpoints(t *testing.T) {
	all := func(o *httpapi.Options) {
		o.MQTTTLSAddr = "mqtt.example.com:8883"
		o.MQTTWSURL = "ws://mqtt.example.com:8083/mqtt"
		o.MQTTWSSURL = "wss://mqtt.example.com:8084/mqtt"
	}
	wsOnly := func(o *httpapi.Options) { o.MQTTWSURL = "ws://127.0.0.1:8083/mqtt" }
	for _, tc := range []struct {
		name   string
		opt    func(*httpapi.Options)
		want   string // the endpoints object
		wantWS string // the inspector token's ws_url ("" for null)
	}{
		{"only TCP", func(*httpapi.Options) {}, `{"mqtt":"127.0.0.1:1883"}`, ""},
		{"TCP and WebSocket", wsOnly, `{"mqtt":"127.0.0.1:1883","ws":"ws://127.0.0.1:8083/mqtt"}`, "ws://127.0.0.1:8083/mqtt"},
		{"every listener", all,
			`{"mqtt":"127.0.0.1:1883","mqtts":"mqtt.example.com:8883","ws":"ws://mqtt.example.com:8083/mqtt","wss":"wss://mqtt.example.com:8084/mqtt"}`,
			"wss://mqtt.example.com:8084/mqtt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.opt)
			u := e.signup("ada@example.com")
			type withEndpoints struct {
				Endpoints json.RawMessage `json:"endpoints"`
			}
			check := func(what string, r resp, status int) {
				t.Helper()
				want(t, r, status)
				var one withEndpoints
				var list struct{ Items []withEndpoints }
				r.json(t, &one)
				r.json(t, &list)
				got := [][]byte{one.Endpoints}
				if one.Endpoints == nil {
					got = nil
					for _, it := range list.Items {
						got = append(got, it.Endpoints)
					}
				}
				if len(got) == 0 {
					t.Fatalf("%s: no endpoints in %s", what, r.body)
				}
				for _, g := range got {
					if string(g) != tc.want {
						t.Fatalf("%s: endpoints %s, want %s", what, g, tc.want)
					}
				}
			}
			check("get", e.do(t, "GET", "/v1/tenants/"+u.tenantID, u.key, nil), http.StatusOK)
			check("create", e.do(t, "POST", "/v1/tenants", u.key, map[string]string{"slug": "second"}), http.StatusCreated)
			check("list", e.do(t, "GET", "/v1/tenants", u.key, nil), http.StatusOK)
			check("update", e.do(t, "PATCH", "/v1/tenants/"+u.tenantID, u.key, map[string]string{"slug": "renamed"}), http.StatusOK)

			out := e.inspectorToken(t, u, u.key, nil)
			got := "" // null
			if out.WSURL != nil {
				got = *out.WSURL
			}
			if got != tc.wantWS {
				t.Fatalf("inspector ws_url %q, want %q", got, tc.wantWS)
			}
		})
	}
}
