package gateway

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"berth.dev/broker/tracing"
)

// TestStoredConnectSpansNameNoAddresses: the spans kept for the tenant
// (and shown to it by the API) name no address: not the node's (route
// names the node by id; a failed dial says node_unreachable, not the dial
// error), not the gateway's, not the device's.
func TestStoredConnectSpansNameNoAddresses(t *testing.T) {
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
	if _, rc, err := connect5(t, e.addr(KindTCP), id, tok); err != nil || rc != 0 {
		t.Fatalf("connect: %#x %v", byte(rc), err)
	}
	e.node.next(t)
	deadID, deadTok := e.credential(t, tenantDead, nil)
	if _, rc, _ := connect5(t, e.addr(KindTCP), deadID, deadTok); rc != 0x88 {
		t.Fatalf("connect to a dead node: %#x, want 0x88", byte(rc))
	}

	type row struct {
		tenant, name string
		attrs        map[string]any
	}
	var rows []row
	waitUntil(t, func() bool {
		rows = rows[:0]
		r, err := e.pool.Query(t.Context(), `SELECT tenant_id, name, attributes FROM spans`)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		for r.Next() {
			var x row
			if err := r.Scan(&x.tenant, &x.name, &x.attrs); err != nil {
				t.Fatal(err)
			}
			rows = append(rows, x)
		}
		return len(rows) >= 10 // five spans for each connect
	})
	routes := 0
	for _, r := range rows {
		for k, v := range r.attrs {
			if s := fmt.Sprint(v); looksLikeAddress(s) {
				t.Errorf("%s span %s: %s = %q looks like an address", r.tenant, r.name, k, s)
			}
		}
		if r.name == "route" {
			routes++
			want := map[string]string{tenantAcme: "node_1", tenantDead: "node_dead"}[r.tenant]
			if r.attrs[string(keyNode)] != want {
				t.Errorf("%s route span: node_id %v, want %s", r.tenant, r.attrs[string(keyNode)], want)
			}
		}
	}
	if routes != 2 {
		t.Fatalf("%d route spans stored, want 2: %v", routes, rows)
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
		"node_1": false, "ten_acme": false, "dev-5": false, "gateway.connect": false, "node_unreachable": false,
		"4bf92f3577b34da6a3ce929d0e0e4736": false, "tcp": false, "1": false,
	} {
		if got := looksLikeAddress(s); got != want {
			t.Errorf("looksLikeAddress(%q) = %v, want %v", s, got, want)
		}
	}
}
