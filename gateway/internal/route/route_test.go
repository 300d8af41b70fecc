package route

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/testenv"
)

func exec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func seed(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	exec(t, pool, `INSERT INTO accounts (id, email, password_hash) VALUES ('acc_1', 'a@example.com', 'x')`)
	exec(t, pool, `INSERT INTO nodes (id, mqtt_addr, admin_addr, capacity) VALUES
		('node_1', '10.0.0.1:7883', '10.0.0.1:7880', 100), ('node_2', '10.0.0.2:7883', '10.0.0.2:7880', 100)`)
	exec(t, pool, `INSERT INTO tenants (id, account_id, slug, plan, node_id) VALUES
		('ten_placed', 'acc_1', 'placed', 'free', 'node_1'),
		('ten_unplaced', 'acc_1', 'unplaced', 'free', NULL)`)
	exec(t, pool, `INSERT INTO quotas (tenant_id, max_connections, max_msgs_per_sec, max_bytes_per_sec, client_msgs_per_sec,
		client_bytes_per_sec, max_message_size, max_subscriptions, max_retained_messages, max_retained_bytes,
		retention_seconds, retention_bytes, max_inflight, max_queued_bytes, monthly_messages)
		VALUES ('ten_placed', 25, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)`)
}

func start(t *testing.T, pool *pgxpool.Pool, opt Options) *Table {
	t.Helper()
	opt.RetryMin = 10 * time.Millisecond
	tb := New(pool, opt)
	if err := tb.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tb.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return tb
}

func TestLookup(t *testing.T) {
	pool := testenv.Postgres(t)
	seed(t, pool)
	tb := start(t, pool, Options{})
	tests := []struct {
		tenant  string
		want    Route
		wantErr error
	}{
		{"ten_placed", Route{TenantID: "ten_placed", Slug: "placed", NodeID: "node_1", NodeAddr: "10.0.0.1:7883", MaxConnections: 25}, nil},
		{"ten_unplaced", Route{}, ErrNotPlaced},
		{"ten_missing", Route{}, ErrNoTenant},
	}
	for _, tc := range tests {
		t.Run(tc.tenant, func(t *testing.T) {
			for range 2 { // the second answer comes from the cache
				got, err := tb.Lookup(context.Background(), tc.tenant)
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Lookup error = %v, want %v", err, tc.wantErr)
				}
				if err == nil && got != tc.want {
					t.Fatalf("Lookup = %+v, want %+v", got, tc.want)
				}
			}
		})
	}
}

// waitFor polls Lookup until check holds.
func waitFor(t *testing.T, tb *Table, tenant string, check func(Route, error) bool) {
	t.Helper()
	pollRoute(t, "Lookup("+tenant+")", func() (Route, error) { return tb.Lookup(context.Background(), tenant) }, check)
}

// pollRoute calls lookup until check holds, for at most 5 s.
func pollRoute(t *testing.T, what string, lookup func() (Route, error), check func(Route, error) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r, err := lookup()
		if check(r, err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still %+v, %v after 5 s", what, r, err)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}

func TestInvalidation(t *testing.T) {
	pool := testenv.Postgres(t)
	seed(t, pool)
	tb := start(t, pool, Options{TTL: time.Hour, NegativeTTL: time.Hour})
	ctx := context.Background()
	if r, _ := tb.Lookup(ctx, "ten_placed"); r.NodeAddr != "10.0.0.1:7883" {
		t.Fatalf("initial route %+v", r)
	}
	if _, err := tb.Lookup(ctx, "ten_unplaced"); !errors.Is(err, ErrNotPlaced) {
		t.Fatal(err)
	}

	t.Run("a change without NOTIFY is not seen (cached)", func(t *testing.T) {
		exec(t, pool, `UPDATE tenants SET node_id = 'node_2' WHERE id = 'ten_placed'`)
		if r, _ := tb.Lookup(ctx, "ten_placed"); r.NodeAddr != "10.0.0.1:7883" {
			t.Fatalf("route changed without a notification: %+v", r)
		}
	})
	t.Run("placement NOTIFY moves the tenant", func(t *testing.T) {
		exec(t, pool, `SELECT pg_notify('berth_placement', 'ten_placed')`)
		waitFor(t, tb, "ten_placed", func(r Route, err error) bool { return err == nil && r.NodeAddr == "10.0.0.2:7883" })
	})
	t.Run("quotas NOTIFY updates the limit", func(t *testing.T) {
		exec(t, pool, `UPDATE quotas SET max_connections = 3 WHERE tenant_id = 'ten_placed'`)
		exec(t, pool, `SELECT pg_notify('berth_quotas', 'ten_placed')`)
		waitFor(t, tb, "ten_placed", func(r Route, err error) bool { return err == nil && r.MaxConnections == 3 })
	})
	t.Run("a placed tenant becomes routable", func(t *testing.T) {
		exec(t, pool, `UPDATE tenants SET node_id = 'node_1' WHERE id = 'ten_unplaced'`)
		exec(t, pool, `SELECT pg_notify('berth_placement', 'ten_unplaced')`)
		waitFor(t, tb, "ten_unplaced", func(r Route, err error) bool {
			return err == nil && r.NodeAddr == "10.0.0.1:7883" && r.MaxConnections == -1
		})
	})
	t.Run("deleted tenant", func(t *testing.T) {
		exec(t, pool, `DELETE FROM tenants WHERE id = 'ten_placed'`)
		exec(t, pool, `SELECT pg_notify('berth_placement', 'ten_placed')`)
		waitFor(t, tb, "ten_placed", func(_ Route, err error) bool { return errors.Is(err, ErrNoTenant) })
	})
	t.Run("listener reconnect drops the whole cache", func(t *testing.T) {
		exec(t, pool, `UPDATE tenants SET node_id = 'node_2' WHERE id = 'ten_unplaced'`) // no NOTIFY
		exec(t, pool, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'LISTEN%'`)
		waitFor(t, tb, "ten_unplaced", func(r Route, err error) bool { return err == nil && r.NodeAddr == "10.0.0.2:7883" })
	})
}

// statementCounter is a pgx tracer counting the statements whose SQL
// match accepts.
type statementCounter struct {
	match func(sql string) bool
	n     atomic.Int32
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if c.match(d.SQL) {
		c.n.Add(1)
	}
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// countedPool is a pool on the test's database, seeded, whose statements
// that match accepts are counted.
func countedPool(t *testing.T, match func(sql string) bool) (*pgxpool.Pool, *statementCounter) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	sc := &statementCounter{match: match}
	cfg.ConnConfig.Tracer = sc
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	seed(t, pool)
	return pool, sc
}

func TestConcurrentMissesShareOneQuery(t *testing.T) {
	pool, qc := countedPool(t, func(sql string) bool { return strings.Contains(sql, "LEFT JOIN tenant_placement") }) // route queries
	tb := start(t, pool, Options{})
	ctx := context.Background()
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, 50)
	for range 50 {
		wg.Go(func() {
			<-start
			r, err := tb.Lookup(ctx, "ten_placed")
			if err == nil && r.NodeAddr != "10.0.0.1:7883" {
				err = fmt.Errorf("route %+v", r)
			}
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := qc.n.Load(); n != 1 {
		t.Fatalf("50 concurrent lookups ran %d queries, want 1", n)
	}
}

// gatedCounter is a pgx tracer counting route queries per tenant and
// holding those of one tenant until its gate opens.
type gatedCounter struct {
	mu      sync.Mutex
	n       map[string]int
	tenant  string
	started chan struct{} // one send per held query, when it starts
	gate    chan struct{} // closed: held queries go on
}

func (g *gatedCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !strings.Contains(d.SQL, "LEFT JOIN tenant_placement") || len(d.Args) == 0 {
		return ctx
	}
	tenant, _ := d.Args[0].(string)
	g.mu.Lock()
	g.n[tenant]++
	g.mu.Unlock()
	if tenant == g.tenant {
		g.started <- struct{}{}
		<-g.gate
	}
	return ctx
}

func (g *gatedCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (g *gatedCounter) count(tenant string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n[tenant]
}

// TestRefreshIsPerTenant: refreshing one tenant (a node's "not the
// leader") while another tenant's query is in flight leaves that query
// shared and cached: the other tenant costs one query, not one per lookup.
func TestRefreshIsPerTenant(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedCounter{n: map[string]int{}, tenant: "ten_unplaced", started: make(chan struct{}, 4), gate: make(chan struct{})}
	cfg.ConnConfig.Tracer = g
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	seed(t, pool)
	exec(t, pool, `UPDATE tenants SET node_id = 'node_2' WHERE id = 'ten_unplaced'`)
	tb := start(t, pool, Options{TTL: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// B's first lookup starts its query and is held in it.
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	lookupB := func() {
		r, err := tb.Lookup(ctx, "ten_unplaced")
		if err == nil && r.NodeAddr != "10.0.0.2:7883" {
			err = fmt.Errorf("route %+v", r)
		}
		errs <- err
	}
	wg.Go(lookupB)
	select {
	case <-g.started:
	case <-ctx.Done():
		t.Fatal("B's query never started")
	}
	// A is refreshed meanwhile, twice.
	for range 2 {
		if r, err := tb.Refresh(ctx, "ten_placed"); err != nil || r.NodeAddr != "10.0.0.1:7883" {
			t.Fatalf("Refresh(A) = %+v, %v", r, err)
		}
	}
	// A second lookup of B joins the query in flight (or, if it comes after,
	// finds its answer cached) rather than starting one.
	wg.Go(lookupB)
	close(g.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// B's answer was cached: no query for it now.
	for range 3 {
		if _, err := tb.Lookup(ctx, "ten_unplaced"); err != nil {
			t.Fatal(err)
		}
	}
	if n := g.count("ten_unplaced"); n != 1 {
		t.Fatalf("B: %d queries, want 1 (A's refreshes must not invalidate B)", n)
	}
	if n := g.count("ten_placed"); n != 2 {
		t.Fatalf("A: %d queries for 2 refreshes, want 2", n)
	}

	// Refreshing B itself does read it again.
	if _, err := tb.Refresh(ctx, "ten_unplaced"); err != nil {
		t.Fatal(err)
	}
	if n := g.count("ten_unplaced"); n != 2 {
		t.Fatalf("B after its own refresh: %d queries, want 2", n)
	}
}
