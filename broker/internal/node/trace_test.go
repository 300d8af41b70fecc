package node

import (
	"context"
	"testing"
	"time"

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
