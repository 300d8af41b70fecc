package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"berth.dev/services/internal/store"
)

func TestUsage(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	other := e.signup("bob@example.com")
	ctx := context.Background()
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	ins := func(tid, node string, at time.Time, msgsIn, stored int64) {
		t.Helper()
		if _, err := e.pool.Exec(ctx,
			`INSERT INTO usage (tenant_id, node_id, bucket, messages_in, messages_out, bytes_in, bytes_out, connection_seconds, stored_bytes, messages_accepted)
			 VALUES ($1, $2, $3, $4::bigint, $4::bigint * 2, $4::bigint * 10, $4::bigint * 20, 60, $5, $4::bigint - 1)`, tid, node, at, msgsIn, stored); err != nil {
			t.Fatal(err)
		}
	}
	ins(u.tenantID, "n1", base, 5, 100)
	ins(u.tenantID, "n2", base, 7, 50)                   // same minute, another node: stored adds up to 150
	ins(u.tenantID, "n1", base.Add(time.Minute), 1, 120) // same hour; stored level 120 < 150
	ins(u.tenantID, "n1", base.Add(2*time.Hour+5*time.Minute), 3, 10)
	ins(u.tenantID, "n1", base.Add(-time.Minute), 1000, 0)    // before the range
	ins(other.tenantID, "n1", base.Add(time.Minute), 1000, 0) // another tenant
	if _, err := e.pool.Exec(ctx, `INSERT INTO usage_drops (tenant_id, node_id, bucket, reason, count) VALUES
		($1, 'n1', $2, 'quota_rate', 4), ($1, 'n2', $2, 'quota_rate', 1), ($1, 'n1', $3, 'queue_full', 2)`,
		u.tenantID, base, base.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}

	q := url.Values{"from": {base.Format(time.RFC3339)}, "to": {base.Add(3 * time.Hour).Format(time.RFC3339)}, "step": {"1h"}}
	r := e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/usage?"+q.Encode(), u.key, nil)
	want(t, r, http.StatusOK)
	var out struct {
		StepSeconds int64 `json:"step_seconds"`
		Points      []struct {
			T                 time.Time
			MessagesIn        int64 `json:"messages_in"`
			MessagesAccepted  int64 `json:"messages_accepted"` // one refused per row
			MessagesOut       int64 `json:"messages_out"`
			BytesIn           int64 `json:"bytes_in"`
			ConnectionSeconds int64 `json:"connection_seconds"`
			StoredBytes       int64 `json:"stored_bytes"`
			Drops             map[string]int64
		}
	}
	r.json(t, &out)
	if out.StepSeconds != 3600 || len(out.Points) != 3 {
		t.Fatalf("series %s", r.body)
	}
	p0, p1, p2 := out.Points[0], out.Points[1], out.Points[2]
	if !p0.T.Equal(base) || p0.MessagesIn != 13 || p0.MessagesAccepted != 10 || p0.MessagesOut != 26 || p0.BytesIn != 130 || p0.ConnectionSeconds != 180 || p0.StoredBytes != 150 || p0.Drops["quota_rate"] != 5 {
		t.Fatalf("point 0 %+v", p0)
	}
	if p1.MessagesIn != 0 || len(p1.Drops) != 0 || !p1.T.Equal(base.Add(time.Hour)) {
		t.Fatalf("point 1 %+v", p1)
	}
	if p2.MessagesIn != 3 || p2.MessagesAccepted != 2 || p2.Drops["queue_full"] != 2 {
		t.Fatalf("point 2 %+v", p2)
	}

	// Buckets align to step boundaries (UTC, from the Unix epoch), not to
	// from: each point is a whole bucket [k·step, (k+1)·step) meeting
	// [from, to).
	for _, c := range []struct {
		name, from, to, step string
		first                time.Time
		n                    int
		firstIn              int64
	}{
		{"hour from mid-hour", "2026-03-01T00:30:00Z", "2026-03-01T02:30:00Z", "1h", base, 3, 13},
		{"15m from 7m", "2026-03-01T00:07:00Z", "2026-03-01T00:20:00Z", "15m", base, 2, 13},
		{"day from noon", "2026-03-01T12:00:00Z", "2026-03-02T12:00:00Z", "24h", base, 2, 16},
		{"aligned", "2026-03-01T01:00:00Z", "2026-03-01T03:00:00Z", "1h", base.Add(time.Hour), 2, 0},
	} {
		t.Run("aligned/"+c.name, func(t *testing.T) {
			q := url.Values{"from": {c.from}, "to": {c.to}, "step": {c.step}}
			r := e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/usage?"+q.Encode(), u.key, nil)
			want(t, r, http.StatusOK)
			var got struct {
				From, To time.Time
				Points   []struct {
					T          time.Time
					MessagesIn int64 `json:"messages_in"`
				}
			}
			r.json(t, &got)
			if len(got.Points) != c.n || !got.Points[0].T.Equal(c.first) || got.Points[0].MessagesIn != c.firstIn || !got.From.Equal(c.first) {
				t.Fatalf("series %s", r.body)
			}
			step, _ := time.ParseDuration(c.step)
			for i, p := range got.Points {
				if p.T.UnixNano()%int64(step) != 0 || !p.T.Equal(c.first.Add(time.Duration(i)*step)) {
					t.Fatalf("point %d at %s is not on a %s boundary: %s", i, p.T, c.step, r.body)
				}
			}
			if !got.To.Equal(got.Points[len(got.Points)-1].T.Add(step)) {
				t.Fatalf("to %s, want the end of the last bucket: %s", got.To, r.body)
			}
		})
	}

	for _, c := range []struct {
		name, query, field string
	}{
		{"from after to", fmt.Sprintf("from=%s&to=%s", base.Add(time.Hour).Format(time.RFC3339), base.Format(time.RFC3339)), "from"},
		{"step too small", "step=30s", "step"},
		{"step not a duration", "step=hourly", "step"},
		{"too many points", fmt.Sprintf("from=%s&to=%s&step=1m", base.Format(time.RFC3339), base.Add(48*time.Hour).Format(time.RFC3339)), "step"},
		{"bad time", "from=yesterday", "from"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/usage?"+c.query, u.key, nil)
			want(t, r, http.StatusUnprocessableEntity)
			if p := r.problem(t); len(p.Errors) == 0 || p.Errors[0].Field != c.field {
				t.Fatalf("errors %+v, want %s", p.Errors, c.field)
			}
		})
	}
	// Defaults: the last 24 hours by the hour.
	r = e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/usage", u.key, nil)
	want(t, r, http.StatusOK)
	r.json(t, &out)
	if len(out.Points) != 24 {
		t.Fatalf("default series has %d points", len(out.Points))
	}
	if p := out.Points[0].T; !p.Equal(p.Truncate(time.Hour)) {
		t.Fatalf("default series starts at %s, not on the hour", p)
	}
}

func TestTraces(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	root := "aaaaaaaaaaaaaaaa"
	var spans []store.Span
	for i := range 3 {
		trace := fmt.Sprintf("%032x", i+1)
		start := now.Add(-time.Duration(3-i) * time.Minute)
		spans = append(spans,
			store.Span{TenantID: u.tenantID, TraceID: trace, SpanID: root, Name: "broker.publish", Start: start, DurationNS: 5_000_000,
				Attributes: []byte(`{"topic":"a/b"}`)},
			store.Span{TenantID: u.tenantID, TraceID: trace, SpanID: "bbbbbbbbbbbbbbbb", ParentSpanID: &root, Name: "wal.append",
				Start: start.Add(time.Millisecond), DurationNS: 6_000_000},
		)
	}
	if err := e.store.InsertSpans(ctx, spans); err != nil {
		t.Fatal(err)
	}
	var page struct {
		Items []struct {
			TraceID    string `json:"trace_id"`
			RootName   string `json:"root_name"`
			DurationNS int64  `json:"duration_ns"`
			SpanCount  int    `json:"span_count"`
		}
		NextCursor *string `json:"next_cursor"`
	}
	r := e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/traces?limit=2", u.key, nil)
	want(t, r, http.StatusOK)
	r.json(t, &page)
	if len(page.Items) != 2 || page.NextCursor == nil || page.Items[0].TraceID != fmt.Sprintf("%032x", 3) {
		t.Fatalf("page 1 %s", r.body)
	}
	if it := page.Items[0]; it.RootName != "broker.publish" || it.SpanCount != 2 || it.DurationNS != 7_000_000 {
		t.Fatalf("summary %+v", it)
	}
	e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/traces?limit=2&cursor="+*page.NextCursor, u.key, nil).json(t, &page)
	if len(page.Items) != 1 || page.Items[0].TraceID != fmt.Sprintf("%032x", 1) || page.NextCursor != nil {
		t.Fatalf("page 2 %+v", page)
	}

	r = e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/traces/"+fmt.Sprintf("%032x", 2), u.key, nil)
	want(t, r, http.StatusOK)
	var tr struct {
		Spans []struct {
			SpanID       string  `json:"span_id"`
			ParentSpanID *string `json:"parent_span_id"`
			Attributes   map[string]any
		}
	}
	r.json(t, &tr)
	if len(tr.Spans) != 2 || tr.Spans[0].ParentSpanID != nil || *tr.Spans[1].ParentSpanID != root || tr.Spans[0].Attributes["topic"] != "a/b" {
		t.Fatalf("trace %s", r.body)
	}
	want(t, e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/traces/"+fmt.Sprintf("%032x", 9), u.key, nil), http.StatusNotFound)
	want(t, e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/traces/not-hex", u.key, nil), http.StatusNotFound)
	want(t, e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/traces?cursor=bogus", u.key, nil), http.StatusUnprocessableEntity)
}

// The trace list narrows by root name, client id, duration and error
// status on the server, so a tenant with many traces finds the one it
// wants without paging through the rest.
func TestTraceFilters(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	now := time.Now().UTC().Truncate(time.Millisecond)
	root := "aaaaaaaaaaaaaaaa"
	mk := func(n int, name string, dur int64, attrs, childAttrs string) []store.Span {
		trace := fmt.Sprintf("%032x", n)
		start := now.Add(-time.Duration(n) * time.Minute)
		return []store.Span{
			{TenantID: u.tenantID, TraceID: trace, SpanID: root, Name: name, Start: start, DurationNS: dur, Attributes: []byte(attrs)},
			{TenantID: u.tenantID, TraceID: trace, SpanID: "bbbbbbbbbbbbbbbb", ParentSpanID: &root, Name: "auth", Start: start, DurationNS: dur / 2, Attributes: []byte(childAttrs)},
		}
	}
	var spans []store.Span
	spans = append(spans, mk(1, "mqtt.connect", 2_000_000, `{"client_id":"sensor-1","outcome":"connected"}`, `{}`)...)
	spans = append(spans, mk(2, "mqtt.connect", 9_000_000, `{"client_id":"sensor-2","outcome":"refused","otel.status_code":"ERROR"}`,
		`{"otel.status_code":"ERROR","otel.status_description":"jwtauth: bad signature"}`)...)
	spans = append(spans, mk(3, "mqtt.publish", 500_000, `{"topic":"a/b"}`, `{"client_id":"sensor-1"}`)...)
	if err := e.store.InsertSpans(context.Background(), spans); err != nil {
		t.Fatal(err)
	}
	type item struct {
		TraceID  string `json:"trace_id"`
		ClientID string `json:"client_id"`
		Error    bool   `json:"error"`
	}
	list := func(query string) []item {
		t.Helper()
		var page struct{ Items []item }
		r := e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/traces?"+query, u.key, nil)
		want(t, r, http.StatusOK)
		r.json(t, &page)
		return page.Items
	}
	ids := func(items []item) (out []int) {
		for _, it := range items {
			var n int
			fmt.Sscanf(it.TraceID, "%x", &n)
			out = append(out, n)
		}
		return out
	}
	for _, tc := range []struct {
		query string
		want  []int
	}{
		{"", []int{1, 2, 3}},
		{"kind=mqtt.connect", []int{1, 2}},
		{"kind=mqtt.publish", []int{3}},
		{"client_id=sensor-1", []int{1, 3}}, // a child span's client_id counts too
		{"min_duration=5ms", []int{2}},
		{"errors=true", []int{2}},
		{"errors=false&kind=mqtt.connect&min_duration=1ms", []int{1, 2}},
		{"kind=nothing", nil},
	} {
		if got := ids(list(tc.query)); !slices.Equal(got, tc.want) {
			t.Errorf("?%s: traces %v, want %v", tc.query, got, tc.want)
		}
	}
	all := list("")
	if all[0].ClientID != "sensor-1" || all[0].Error || all[1].ClientID != "sensor-2" || !all[1].Error {
		t.Errorf("summaries %+v", all)
	}
	for _, bad := range []string{"min_duration=soon", "min_duration=-1s", "errors=maybe"} {
		want(t, e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/traces?"+bad, u.key, nil), http.StatusUnprocessableEntity)
	}
}
