package node

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"berth.dev/broker/internal/tenanttest"
	"berth.dev/testenv"
)

// setTraceRate sets a tenant's trace_sample_rate and announces it until
// the node applies it.
func (n *testNode) setTraceRate(t *testing.T, tenant string, rate float64) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := n.pool.Exec(ctx, `UPDATE tenants SET trace_sample_rate = $1 WHERE id = $2`, rate, tenant); err != nil {
			t.Fatal(err)
		}
		if _, err := n.pool.Exec(ctx, `SELECT pg_notify('berth_quotas', $1)`, tenant); err != nil {
			t.Fatal(err)
		}
		if tn, ok := n.lookup(tenant); ok && tn.traces.Rate() == rate {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace_sample_rate %v never applied", rate)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMessageSpansReachPostgres: with the tenant's trace_sample_rate
// raised to 1 live, a QoS 1 message through the node leaves its span tree
// in the spans table: mqtt.publish and its children, one trace.
func TestMessageSpansReachPostgres(t *testing.T) {
	t.Parallel()
	n := startNodeWith(t, testenv.DatabaseURL(t), t.TempDir(), true)
	c := cred{tenant: "ten_a", id: "crd_1", acl: allowAll}
	got := make(chan string, 4)
	sub := n.mqtt5(t, c, "sub", got)
	subscribe(t, sub, "tr/#")
	pub := n.mqtt5(t, c, "pub", nil)
	if tn, _ := n.lookup("ten_a"); tn.traces.Rate() != 0.001 {
		t.Fatalf("the default trace_sample_rate is %v, want 0.001", tn.traces.Rate())
	}
	n.setTraceRate(t, "ten_a", 1)
	if code := publish(t, pub, "tr/1", "hi"); code != 0 {
		t.Fatalf("PUBACK %#x", code)
	}
	expectMsg(t, got, "tr/1=hi")

	type row struct{ trace, span, parent, name string }
	want := []string{"mqtt.publish", "acl", "quota", "wal.append", "wal.fsync", "route", "deliver"}
	var rows []row
	deadline := time.Now().Add(15 * time.Second)
	for len(rows) < len(want) {
		if time.Now().After(deadline) {
			t.Fatalf("spans %v, want %v", rows, want)
		}
		time.Sleep(100 * time.Millisecond)
		r, err := n.pool.Query(context.Background(), `SELECT trace_id, span_id, coalesce(parent_span_id, ''), name FROM spans
			WHERE tenant_id = 'ten_a' AND attributes->>'topic' = 'tr/1'`)
		if err != nil {
			t.Fatal(err)
		}
		rows = rows[:0]
		for r.Next() {
			var x row
			if err := r.Scan(&x.trace, &x.span, &x.parent, &x.name); err != nil {
				t.Fatal(err)
			}
			rows = append(rows, x)
		}
		r.Close()
	}
	byName := map[string]row{}
	for _, r := range rows {
		byName[r.name] = r
	}
	root, ok := byName["mqtt.publish"]
	if !ok || root.parent != "" {
		t.Fatalf("root %+v in %v", root, rows)
	}
	for _, name := range want[1:] {
		r, ok := byName[name]
		if !ok || r.trace != root.trace || r.parent != root.span {
			t.Errorf("%s: %+v, want a child of %+v", name, r, root)
		}
	}
}

// TestDeviceCannotForceSamplingPastCap: a device whose every PUBLISH says
// "sampled" in its W3C traceparent gets at most -trace-cap messages a
// second traced (the bucket's burst of one second, then its rate), even
// at trace_sample_rate 0; and nothing the node stores in spans names an
// address: not the device's (the PROXY header's source), not the node's.
func TestDeviceCannotForceSamplingPastCap(t *testing.T) {
	t.Parallel()
	const traceCap, messages = 10, 200
	n := startNodeCfg(t, testenv.DatabaseURL(t), t.TempDir(), true, func(c *Config) { c.TraceCap = traceCap })
	q := tenanttest.Business()
	q.ClientMsgsPerSec, q.MaxMsgsPerSec = 1e6, 1e6 // only the trace cap may hold the device back
	tenanttest.Seed(t, n.pool, "ten_t", q)
	c := cred{tenant: "ten_t", id: "crd_t", acl: allowAll}
	got := make(chan string, messages)
	subscribe(t, n.mqtt5(t, c, "sub", got), "dev/#")
	pub := n.mqtt5(t, c, "pub", nil)
	n.setTraceRate(t, "ten_t", 0) // only the device's traceparent asks for traces

	sampled := paho.UserProperties{{Key: "traceparent", Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	start := time.Now()
	for i := range messages {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r, err := pub.Publish(ctx, &paho.Publish{Topic: fmt.Sprintf("dev/%d", i), QoS: 1, Payload: []byte("x"),
			Properties: &paho.PublishProperties{User: sampled}})
		cancel()
		if err != nil || r.ReasonCode != 0 {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	elapsed := time.Since(start) // every sampling decision was made within it
	for range messages {
		<-got
	}
	// Shutdown hands every span to Postgres before it returns.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	var roots int
	if err := n.pool.QueryRow(context.Background(), `SELECT count(*) FROM spans WHERE tenant_id = 'ten_t' AND name = 'mqtt.publish'`).Scan(&roots); err != nil {
		t.Fatal(err)
	}
	// A full bucket of traceCap, then traceCap a second.
	limit := int(traceCap * (1 + elapsed.Seconds()))
	t.Logf("%d of %d messages with a sampled traceparent traced in %v (cap %d/s: at most %d)", roots, messages, elapsed, traceCap, limit)
	if roots < traceCap || roots > limit {
		t.Fatalf("%d messages traced in %v, want between %d (the burst) and %d", roots, elapsed, traceCap, limit)
	}

	rows, err := n.pool.Query(context.Background(), `SELECT name, attributes FROM spans WHERE tenant_id = 'ten_t'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	spans := 0
	for rows.Next() {
		var name string
		var attrs map[string]any
		if err := rows.Scan(&name, &attrs); err != nil {
			t.Fatal(err)
		}
		spans++
		for k, v := range attrs {
			if s := fmt.Sprint(v); looksLikeAddress(s) {
				t.Errorf("span %s: attribute %s = %q looks like an address", name, k, s)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if spans < 6*traceCap { // mqtt.publish, acl, quota, wal.append, wal.fsync, route, deliver
		t.Fatalf("%d spans stored for %d traced messages", spans, roots)
	}
}

var (
	ipv4Like     = regexp.MustCompile(`\b\d{1,3}(\.\d{1,3}){3}\b`)
	hostPortLike = regexp.MustCompile(`[A-Za-z0-9_.\-\]]+:\d{1,5}\b`)
)

// looksLikeAddress reports whether s holds an IPv4 or IPv6 address or a
// host:port.
func looksLikeAddress(s string) bool {
	if ipv4Like.MatchString(s) || hostPortLike.MatchString(s) || strings.Contains(s, "localhost") {
		return true
	}
	for _, tok := range strings.FieldsFunc(s, func(r rune) bool { return !strings.ContainsRune("0123456789abcdefABCDEF:.%", r) }) {
		if _, err := netip.ParseAddr(tok); err == nil && strings.Count(tok, ":") >= 2 {
			return true
		}
	}
	return false
}

func TestLooksLikeAddress(t *testing.T) {
	for s, want := range map[string]bool{
		"203.0.113.7": true, "127.0.0.1:7883": true, "node-1.berth.svc:7883": true, "[2001:db8::1]:7883": true,
		"fe80::1": true, "localhost": true, "dial tcp 10.0.0.5:7883: connect: connection refused": true,
		"dev/42": false, "ten_t": false, "crd_t": false, "pub": false, "mqtt.publish": false, "2026-12-01": false,
		"4bf92f3577b34da6a3ce929d0e0e4736": false, "not authorized": false, "1": false,
	} {
		if got := looksLikeAddress(s); got != want {
			t.Errorf("looksLikeAddress(%q) = %v, want %v", s, got, want)
		}
	}
}
