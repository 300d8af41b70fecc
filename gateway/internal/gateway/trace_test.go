package gateway

import (
	"context"
	"crypto/tls"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"berth.dev/broker/tracing"
)

// newTracedEnv is newEnv with the gateway's spans going to an in-memory
// recorder, sampled by the gateway's own sampler at ratio.
func newTracedEnv(t *testing.T, ratio float64, o envOptions) (*testEnv, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(tracing.Sampler(ratio)), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(t.Context()) })
	o.tracer = func(*pgxpool.Pool) trace.TracerProvider { return tp }
	return newEnv(t, o), rec
}

// connectTrace waits for the one gateway.connect span the recorder holds
// and returns it with its children in start order.
func connectTrace(t *testing.T, rec *tracetest.SpanRecorder) (root sdktrace.ReadOnlySpan, children []sdktrace.ReadOnlySpan) {
	t.Helper()
	waitUntil(t, func() bool {
		return slices.ContainsFunc(rec.Ended(), func(s sdktrace.ReadOnlySpan) bool { return s.Name() == spanConnect })
	})
	ended := rec.Ended()
	for _, s := range ended {
		if s.Name() == spanConnect {
			if root != nil {
				t.Fatalf("two %s spans", spanConnect)
			}
			root = s
		}
	}
	for _, s := range ended {
		if s.Parent().SpanID() == root.SpanContext().SpanID() {
			children = append(children, s)
		} else if s != root {
			t.Fatalf("span %q is not a child of %s", s.Name(), spanConnect)
		}
	}
	slices.SortFunc(children, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	return root, children
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]any {
	m := map[attribute.Key]any{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value.AsInterface()
	}
	return m
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name()
	}
	return out
}

// checkTree asserts what every connect's trace has: children named want,
// back to back inside the connect span, in its trace, with its tenant.
func checkTree(t *testing.T, root sdktrace.ReadOnlySpan, children []sdktrace.ReadOnlySpan, want []string, tenant string) {
	t.Helper()
	if got := names(children); !slices.Equal(got, want) {
		t.Fatalf("children %v, want %v", got, want)
	}
	if root.SpanKind() != trace.SpanKindServer {
		t.Errorf("%s kind %v, want server", spanConnect, root.SpanKind())
	}
	if got, _ := attrs(root)[keyTenant].(string); got != tenant {
		t.Errorf("%s tenant_id %q, want %q", spanConnect, got, tenant)
	}
	prevEnd := root.StartTime()
	for _, c := range children {
		if c.SpanContext().TraceID() != root.SpanContext().TraceID() {
			t.Errorf("%s in another trace", c.Name())
		}
		if c.StartTime().Before(prevEnd) || c.EndTime().Before(c.StartTime()) {
			t.Errorf("%s runs %v..%v, overlapping what came before (until %v)", c.Name(), c.StartTime(), c.EndTime(), prevEnd)
		}
		if got, _ := attrs(c)[keyTenant].(string); got != tenant {
			t.Errorf("%s tenant_id %q, want %q", c.Name(), got, tenant)
		}
		prevEnd = c.EndTime()
	}
	if root.EndTime().Before(prevEnd) {
		t.Errorf("%s ends at %v, before its last child (%v)", spanConnect, root.EndTime(), prevEnd)
	}
}

var allPhases = []string{"parse", "auth", "admission", "route"}

func TestConnectSpans(t *testing.T) {
	cert := newTestCert(t)
	e, rec := newTracedEnv(t, 1, envOptions{config: cert.config})
	id, tok := e.credential(t, tenantAcme, nil)
	tests := []struct {
		name, transport string
		version         int64
		connect         func(t *testing.T) error
	}{
		{"MQTT 3.1.1 over TCP", KindTCP, 4, func(t *testing.T) error {
			_, _, err := connect311(t, "tcp://"+e.addr(KindTCP), id, tok, nil)
			return err
		}},
		{"MQTT 5 over TCP", KindTCP, 5, func(t *testing.T) error {
			_, _, err := connect5(t, e.addr(KindTCP), id, tok)
			return err
		}},
		{"MQTT 3.1.1 over TLS", KindTLS, 4, func(t *testing.T) error {
			_, _, err := connect311(t, "ssl://"+e.addr(KindTLS), id, tok, &tls.Config{ServerName: "acme.mqtt.test", RootCAs: cert.roots})
			return err
		}},
		{"MQTT 3.1.1 over WebSocket", KindWS, 4, func(t *testing.T) error {
			_, _, err := connect311(t, "ws://"+e.addr(KindWS)+"/mqtt", id, tok, nil)
			return err
		}},
		{"MQTT 5 over WebSocket over TLS", KindWSS, 5, func(t *testing.T) error {
			nc, _ := dialWSS(t, e, &tls.Config{ServerName: "acme.mqtt.test", RootCAs: cert.roots})
			_, _, err := connect5Conn(t, nc, id, tok, nil)
			return err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec.Reset()
			if err := tc.connect(t); err != nil {
				t.Fatalf("connect: %v", err)
			}
			if nc := e.node.next(t); nc.err != nil {
				t.Fatal(nc.err)
			}
			root, children := connectTrace(t, rec)
			checkTree(t, root, children, allPhases, tenantAcme)
			a := attrs(root)
			for k, want := range map[attribute.Key]any{
				keyTransport: tc.transport, keyVersion: tc.version, keyOutcome: outcomeConnected,
				keyClientID: map[int64]string{4: "dev-311", 5: "dev-5"}[tc.version],
			} {
				if a[k] != want {
					t.Errorf("%s = %v, want %v", k, a[k], want)
				}
			}
			if _, ok := a[keyReason]; ok || root.Status().Code != codes.Unset {
				t.Errorf("a relayed connect has reason %v, status %v", a[keyReason], root.Status())
			}
			if root.Parent().IsValid() {
				t.Errorf("without a traceparent the connect span has parent %v", root.Parent())
			}
			if got := attrs(children[1])[keyCredential]; got != id {
				t.Errorf("auth credential_id %v, want %s", got, id)
			}
			if got := attrs(children[2])[keyLimit]; got != int64(e.cfg.DefaultMaxConnections) {
				t.Errorf("admission max_connections %v, want the default %d", got, e.cfg.DefaultMaxConnections)
			}
			if got := attrs(children[3])[keyNode]; got != "node_1" {
				t.Errorf("route node_id %v, want node_1 (an id, never an address)", got)
			}
		})
	}
}

func TestRefusedConnectSpans(t *testing.T) {
	e, rec := newTracedEnv(t, 1, envOptions{})
	deadID, deadTok := e.credential(t, tenantDead, nil)
	nobodyID, nobodyTok := e.credential(t, "ten_nobody", nil)
	tests := []struct {
		name    string
		connect func(t *testing.T)
		phases  []string // the last one failed
		tenant  string
		reason  string
		code    int64 // 0: closed without CONNACK
		version int64
	}{
		{"bad token, MQTT 5", func(t *testing.T) { connect5(t, e.addr(KindTCP), "crd_x", "not-a-jwt") },
			allPhases[:2], "", "bad_credentials", 0x86, 5},
		{"unknown tenant, MQTT 3.1.1", func(t *testing.T) { connect311(t, "tcp://"+e.addr(KindTCP), nobodyID, nobodyTok, nil) },
			allPhases[:3], "ten_nobody", "unknown_tenant", 0x87, 4},
		{"node unreachable, MQTT 5", func(t *testing.T) { connect5(t, e.addr(KindTCP), deadID, deadTok) },
			allPhases, tenantDead, "node_unreachable", 0x88, 5},
		{"3.1.1 CONNECT with a reserved flag", func(t *testing.T) {
			rawConnect(t, e.addr(KindTCP), []byte{0x10, 0x0C, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x04, 0x03, 0x00, 0x3C, 0x00, 0x00})
		}, allPhases[:1], "", "malformed", 0, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec.Reset()
			tc.connect(t)
			root, children := connectTrace(t, rec)
			checkTree(t, root, children, tc.phases, tc.tenant)
			a := attrs(root)
			if a[keyOutcome] != outcomeRefused || a[keyReason] != tc.reason || a[keyVersion] != tc.version {
				t.Errorf("outcome %v reason %v version %v, want refused %s %d", a[keyOutcome], a[keyReason], a[keyVersion], tc.reason, tc.version)
			}
			if code, ok := a[keyReasonCode]; tc.code == 0 && ok || tc.code != 0 && code != tc.code {
				t.Errorf("reason_code %v, want %#x", code, tc.code)
			}
			if st := root.Status(); st.Code != codes.Error || st.Description != tc.reason {
				t.Errorf("%s status %v, want an error %q", spanConnect, st, tc.reason)
			}
			failed := children[len(children)-1]
			if failed.Status().Code != codes.Error || failed.Status().Description == "" {
				t.Errorf("failed phase %s status %v, want the cause", failed.Name(), failed.Status())
			}
			if ev := failed.Events(); len(ev) != 1 || ev[0].Name != "exception" {
				t.Errorf("failed phase %s events %v, want the recorded error", failed.Name(), ev)
			}
			for _, c := range children[:len(children)-1] {
				if c.Status().Code != codes.Unset || len(c.Events()) != 0 {
					t.Errorf("phase %s before the failure has status %v", c.Name(), c.Status())
				}
			}
			if tc.reason == "node_unreachable" {
				// The dial error names the node's address: the span says
				// only the refusal (the gateway's log has the error).
				if attrs(failed)[keyNode] != "node_dead" || failed.Status().Description != "node_unreachable" {
					t.Errorf("route node_id %v, status %q; want node_dead, node_unreachable", attrs(failed)[keyNode], failed.Status().Description)
				}
				if msg := fmt.Sprint(failed.Events()[0].Attributes); strings.Contains(msg, e.dead) {
					t.Errorf("the recorded error names the node's address: %v", msg)
				}
			}
		})
	}
}

func TestTraceparentJoinsDeviceTrace(t *testing.T) {
	// Ratio 0: the gateway starts no trace of its own, so every span here
	// exists because the device's traceparent said sampled.
	e, rec := newTracedEnv(t, 0, envOptions{})
	id, tok := e.credential(t, tenantAcme, nil)
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		spanID  = "00f067aa0ba902b7"
	)
	tests := []struct {
		name string
		key  string
	}{
		{"traceparent", "traceparent"},
		{"key in another case", "TraceParent"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec.Reset()
			props := paho.UserProperties{{Key: "site", Value: "lab"}, {Key: tc.key, Value: "00-" + traceID + "-" + spanID + "-01"}, {Key: "tracestate", Value: "dev=1"}}
			if _, rc, err := connect5Props(t, e.addr(KindTCP), id, tok, props); err != nil || rc != 0 {
				t.Fatalf("connect: %#x %v", byte(rc), err)
			}
			e.node.next(t)
			root, children := connectTrace(t, rec)
			checkTree(t, root, children, allPhases, tenantAcme)
			p := root.Parent()
			if root.SpanContext().TraceID().String() != traceID || p.SpanID().String() != spanID || !p.IsRemote() {
				t.Fatalf("connect span in trace %s with parent %s (remote %v), want trace %s parent %s",
					root.SpanContext().TraceID(), p.SpanID(), p.IsRemote(), traceID, spanID)
			}
			if got := root.SpanContext().TraceState().Get("dev"); got != "1" {
				t.Errorf("tracestate dev=%q, want 1", got)
			}
		})
	}

	for _, tc := range []struct {
		name  string
		props paho.UserProperties
	}{
		{"not sampled by the device: no spans", paho.UserProperties{{Key: "traceparent", Value: "00-" + traceID + "-" + spanID + "-00"}}},
		{"no traceparent at ratio 0: no spans", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec.Reset()
			c, rc, err := connect5Props(t, e.addr(KindTCP), id, tok, tc.props)
			if err != nil || rc != 0 {
				t.Fatalf("connect: %#x %v", byte(rc), err)
			}
			e.node.next(t)
			c.Disconnect(&paho.Disconnect{})
			// The handler has finished (spans or not) once the connection is gone.
			waitUntil(t, func() bool { return testutil.ToFloat64(e.gw.m.active) == 0 })
			if n := len(rec.Started()); n != 0 {
				t.Fatalf("%d spans recorded", n)
			}
		})
	}
}

func TestTraceparentMalformedStartsNewTrace(t *testing.T) {
	e, rec := newTracedEnv(t, 1, envOptions{})
	id, tok := e.credential(t, tenantAcme, nil)
	props := paho.UserProperties{{Key: "traceparent", Value: "00-not-a-trace-01"}}
	if _, rc, err := connect5Props(t, e.addr(KindTCP), id, tok, props); err != nil || rc != 0 {
		t.Fatalf("connect: %#x %v", byte(rc), err)
	}
	e.node.next(t)
	root, children := connectTrace(t, rec)
	checkTree(t, root, children, allPhases, tenantAcme)
	if root.Parent().IsValid() {
		t.Fatalf("a malformed traceparent became parent %v", root.Parent())
	}
}

// TestConnectSpansKeptInPostgres runs the gateway with its real tracing
// pipeline: a relayed connect's five spans land in the spans table for the
// tenant, where the API's traces endpoints read them.
func TestConnectSpansKeptInPostgres(t *testing.T) {
	var p *tracing.Provider
	e := newEnv(t, envOptions{tracer: func(pool *pgxpool.Pool) trace.TracerProvider {
		var err error
		p, err = tracing.New(t.Context(), tracing.Options{SampleRatio: 1, Pool: pool, Store: tracing.StoreOptions{FlushInterval: 10 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Shutdown(context.Background()) })
		return p.TracerProvider()
	}})
	id, tok := e.credential(t, tenantAcme, nil)
	if _, rc, err := connect311(t, "tcp://"+e.addr(KindTCP), id, tok, nil); err != nil || rc != 0 {
		t.Fatalf("connect: %d %v", rc, err)
	}
	e.node.next(t)
	// Refused before the tenant is known: exported, but not kept.
	connect311(t, "tcp://"+e.addr(KindTCP), id, "not-a-jwt", nil)

	count := func() (n int) {
		if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM spans`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitUntil(t, func() bool { return count() >= 5 })
	rows, err := e.pool.Query(t.Context(), `SELECT tenant_id, name, trace_id, span_id, parent_span_id, attributes->>'outcome'
		FROM spans ORDER BY start, name <> 'gateway.connect'`)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		tenant, name, trace, span string
		parent, outcome           *string
	}
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.tenant, &r.name, &r.trace, &r.span, &r.parent, &r.outcome); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 || got[0].name != spanConnect || got[0].parent != nil || got[0].outcome == nil || *got[0].outcome != outcomeConnected {
		t.Fatalf("rows %+v, want %s (a root, outcome connected) first", got, spanConnect)
	}
	for i, r := range got[1:] {
		if r.tenant != tenantAcme || r.name != allPhases[i] || r.trace != got[0].trace || r.parent == nil || *r.parent != got[0].span {
			t.Errorf("row %d: %+v, want %s, a child of %s in tenant %s", i+1, r, allPhases[i], got[0].span, tenantAcme)
		}
	}
	if d := p.Store().Dropped(tracing.DropQueueFull) + p.Store().Dropped(tracing.DropWriteFailed); d != 0 {
		t.Errorf("%d spans dropped", d)
	}
}

func TestTraceParentAllocs(t *testing.T) {
	none := []byte("site")
	props := userProps{{Key: none, Value: []byte("lab")}}
	if a := testing.AllocsPerRun(100, func() { traceParent(props) }); a != 0 {
		t.Fatalf("%v allocations per CONNECT without a traceparent", a)
	}
	ct := connTrace{start: time.Now(), transport: KindTCP}
	if a := testing.AllocsPerRun(100, func() {
		ct.enter(phaseParse, time.Now())
		ct.enter(phaseAuth, time.Now())
		ct.leave(time.Now())
	}); a != 0 {
		t.Fatalf("%v allocations noting a connect's phases", a)
	}
}

// BenchmarkTraceConnect isolates what tracing adds to one connect: the
// phase notes and traceConnect, unsampled (the common case at the default
// ratio) and sampled (five spans into a processor that keeps nothing).
func BenchmarkTraceConnect(b *testing.B) {
	for _, bc := range []struct {
		name  string
		ratio float64
	}{{"unsampled", 0}, {"sampled", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(tracing.Sampler(bc.ratio)), sdktrace.WithSpanProcessor(discard{}))
			g := &Gateway{tr: tp.Tracer(tracerName)}
			r := refuseNodeDown
			b.ReportAllocs()
			for b.Loop() {
				ct := connTrace{start: time.Now(), transport: KindTCP}
				for p := phaseParse; p < numPhases; p++ {
					ct.enter(p, time.Now())
				}
				ct.version, ct.clientID, ct.tenant, ct.credential, ct.node = 5, "dev", tenantAcme, "crd_1", "node_1"
				ct.leave(time.Now())
				g.traceConnect(&ct, time.Now(), &r, errNotConnect)
			}
		})
	}
}

type discard struct{}

func (discard) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (discard) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (discard) Shutdown(context.Context) error                  { return nil }
func (discard) ForceFlush(context.Context) error                { return nil }
