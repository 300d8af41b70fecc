package tenantdns

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/miekg/dns"

	"berth.dev/gateway/internal/route"
	"berth.dev/testenv"
)

const zone = "mqtt.example.com"

// sqlCounter is a pgx tracer counting the statements a pool runs but
// LISTEN's own: in all (n), under way now (inflight) and at most at once
// (maxInflight); and the slug lookups by slug (bySlug).
type sqlCounter struct {
	n, inflight, maxInflight atomic.Int32

	mu     sync.Mutex
	bySlug map[string]int
}

type countedKey struct{}

func (c *sqlCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(d.SQL, "LISTEN") {
		return ctx
	}
	c.n.Add(1)
	if strings.HasPrefix(d.SQL, "SELECT id FROM tenants WHERE slug") && len(d.Args) == 1 {
		c.mu.Lock()
		if c.bySlug == nil {
			c.bySlug = map[string]int{}
		}
		c.bySlug[fmt.Sprint(d.Args[0])]++
		c.mu.Unlock()
	}
	n := c.inflight.Add(1)
	for m := c.maxInflight.Load(); n > m && !c.maxInflight.CompareAndSwap(m, n); m = c.maxInflight.Load() {
	}
	return context.WithValue(ctx, countedKey{}, true)
}

func (c *sqlCounter) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if ctx.Value(countedKey{}) != nil {
		c.inflight.Add(-1)
	}
}

// slugQueries is how many lookups of slug ran.
func (c *sqlCounter) slugQueries(slug string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bySlug[slug]
}

type fixture struct {
	pool   *pgxpool.Pool
	routes *route.Table
	sql    *sqlCounter
}

func exec(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// newFixture (configure, when given, adjusts the pool's config): a fresh database with four nodes (public hosts an IPv4
// address, a name, an IPv6 address and none), tenant "fleet" replicated
// over them and led by node_a, tenant "lonely" with no node; and the
// gateway's route table on it.
func newFixture(t testing.TB, configure ...func(*pgxpool.Config)) *fixture {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range configure {
		c(cfg)
	}
	f := &fixture{sql: &sqlCounter{}}
	cfg.ConnConfig.Tracer = f.sql
	if f.pool, err = pgxpool.NewWithConfig(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.pool.Close)
	exec(t, f.pool, `INSERT INTO accounts (id, email, password_hash) VALUES ('acc_1', 'a@example.com', 'x')`)
	exec(t, f.pool, `INSERT INTO nodes (id, mqtt_addr, admin_addr, capacity, public_host) VALUES
		('node_a', '10.0.0.1:7883', '10.0.0.1:7880', 100, '192.0.2.1'),
		('node_b', '10.0.0.2:7883', '10.0.0.2:7880', 100, 'node-b.hosts.example.net'),
		('node_c', '10.0.0.3:7883', '10.0.0.3:7880', 100, '2001:db8::c'),
		('node_d', '10.0.0.4:7883', '10.0.0.4:7880', 100, '')`)
	exec(t, f.pool, `INSERT INTO tenants (id, account_id, slug, plan, node_id) VALUES
		('ten_fleet', 'acc_1', 'fleet', 'free', 'node_a'), ('ten_lonely', 'acc_1', 'lonely', 'free', NULL)`)
	exec(t, f.pool, `INSERT INTO tenant_placement (tenant_id, leader, replicas, epoch) VALUES
		('ten_fleet', 'node_a', '{node_a,node_b,node_c,node_d}', 1)`)
	f.routes = route.New(f.pool, route.Options{RetryMin: 10 * time.Millisecond})
	if err := f.routes.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.routes.Shutdown(context.Background()) })
	return f
}

func testConfig() Config {
	return Config{Listen: "127.0.0.1:0", Zone: zone, TTL: 5 * time.Second,
		NS: "ns1.example.com,ns2.example.com", Fallback: "lb.example.com"}
}

func (f *fixture) responder(t testing.TB, cfg Config) *Responder {
	t.Helper()
	if err := cfg.Validate(""); err != nil {
		t.Fatal(err)
	}
	r, err := NewResponder(cfg, f.routes, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// serve starts a Server for cfg on 127.0.0.1 and returns its address.
func (f *fixture) serve(t *testing.T, cfg Config) string {
	t.Helper()
	return f.start(t, cfg).Addr()
}

// start starts a Server for cfg, shut down when the test ends.
func (f *fixture) start(t *testing.T, cfg Config) *Server {
	t.Helper()
	s, err := Listen(cfg.Listen, f.responder(t, cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return s
}

// ask sends m over network ("udp" or "tcp") with miekg/dns's client.
func ask(t *testing.T, network, addr string, m *dns.Msg) *dns.Msg {
	t.Helper()
	c := dns.Client{Net: network, Timeout: 3 * time.Second}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s query %s: %v", network, m.Question[0].String(), err)
	}
	if r.Id != m.Id || !r.Response {
		t.Fatalf("response id %d (want %d), QR %v", r.Id, m.Id, r.Response)
	}
	return r
}

func question(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.RecursionDesired = false
	return m
}

// answer renders r's answer section as "TYPE value" strings.
func answer(r *dns.Msg) []string {
	var s []string
	for _, rr := range r.Answer {
		switch v := rr.(type) {
		case *dns.A:
			s = append(s, "A "+v.A.String())
		case *dns.AAAA:
			s = append(s, "AAAA "+v.AAAA.String())
		case *dns.CNAME:
			s = append(s, "CNAME "+v.Target)
		case *dns.NS:
			s = append(s, "NS "+v.Ns)
		case *dns.SOA:
			s = append(s, "SOA "+v.Ns+" "+v.Mbox)
		default:
			s = append(s, rr.String())
		}
	}
	return s
}

// soaAuthority tells whether r's authority section is the zone's SOA alone.
func soaAuthority(r *dns.Msg) bool {
	if len(r.Ns) != 1 {
		return false
	}
	soa, ok := r.Ns[0].(*dns.SOA)
	return ok && soa.Hdr.Name == zone+"." && soa.Minttl == 5 && soa.Hdr.Ttl == 5
}
