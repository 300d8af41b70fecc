package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/miekg/dns"

	"berth.dev/testenv"
)

// TestDNSListen runs the binary's run function with -dns-listen (zone and
// fallback from BERTH_DNS_ZONE and BERTH_DNS_FALLBACK), asks it for a
// tenant endpoint over UDP and TCP, and stops it with SIGTERM; a responder
// without -dns-ns is refused before anything starts.
func TestDNSListen(t *testing.T) {
	t.Setenv("BERTH_DNS_ZONE", "mqtt.example.com")
	t.Setenv("BERTH_DNS_FALLBACK", "lb.example.com")
	base := []string{"-database-url", "postgres://127.0.0.1:1/x", "-jwks-url", "http://127.0.0.1:1/jwks",
		"-proxy-secret", "0123456789abcdef0123456789abcdef", "-redis-url", "redis://127.0.0.1:1/0", "-dns-listen", "127.0.0.1:0"}
	if err := run(base); err == nil || !strings.Contains(err.Error(), "-dns-ns") {
		t.Fatalf("run without -dns-ns = %v", err)
	}

	rs := testenv.Redis(t)
	db := testenv.DatabaseURL(t)
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		`INSERT INTO accounts (id, email, password_hash) VALUES ('acc_1', 'a@example.com', 'x')`,
		`INSERT INTO nodes (id, mqtt_addr, admin_addr, capacity, public_host) VALUES ('node_1', '127.0.0.1:7883', '127.0.0.1:7880', 10, '192.0.2.10')`,
		`INSERT INTO tenants (id, account_id, slug, plan, node_id) VALUES ('ten_1', 'acc_1', 'fleet', 'free', 'node_1')`,
	} {
		if _, err := conn.Exec(context.Background(), sql); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close(context.Background())
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"keys":[]}`))
	}))
	defer jwks.Close()
	dnsAddr := freeAddr(t) // its port, free on TCP, is most likely free on UDP too
	args := []string{
		"-listen", freeAddr(t), "-listen-ws", "", "-metrics-listen", freeAddr(t),
		"-database-url", db, "-redis-url", rs.URL, "-redis-prefix", rs.Prefix,
		"-proxy-secret", "0123456789abcdef0123456789abcdef", "-jwks-url", jwks.URL,
		"-gateway-id", "gw-dns", "-drain-grace", "100ms", "-log-format", "text",
		"-dns-listen", dnsAddr, "-dns-ns", "ns1.example.com", "-dns-ttl", "3s",
	}
	done := make(chan error, 1)
	go func() { done <- run(args) }()

	m := new(dns.Msg)
	m.SetQuestion("fleet.mqtt.example.com.", dns.TypeA)
	deadline := time.Now().Add(10 * time.Second)
	for _, network := range []string{"udp", "tcp"} {
		c := dns.Client{Net: network, Timeout: time.Second}
		for {
			r, _, err := c.Exchange(m, dnsAddr)
			if err == nil {
				if len(r.Answer) != 1 || r.Answer[0].Header().Ttl != 3 || !strings.HasSuffix(r.Answer[0].String(), "192.0.2.10") {
					t.Fatalf("%s: answer %v", network, r.Answer)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no answer from %s: %v", network, dnsAddr, err)
			}
			time.Sleep(20 * time.Millisecond) // polling with a deadline: the gateway is starting
		}
	}
	sigterm(t, done)
	c := dns.Client{Net: "tcp", Timeout: time.Second}
	if r, _, err := c.Exchange(m, dnsAddr); err == nil {
		t.Fatalf("DNS still answering after exit: %v", r)
	}
}
