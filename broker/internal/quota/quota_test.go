package quota

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/broker/internal/tenanttest"
	"berth.dev/quotas"
	"berth.dev/testenv"
)

func TestBucketRefillsAtRateUpToBurst(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := NewBucket(10, 20) // 10/s, burst 20
	for i := range 20 {
		if !b.Take(t0, 1) {
			t.Fatalf("take %d of a full burst of 20 refused", i)
		}
	}
	if b.Take(t0, 1) {
		t.Fatal("21st take at the same instant allowed")
	}
	if !b.Take(t0.Add(100*time.Millisecond), 1) { // 0.1 s earns 1 token
		t.Fatal("token earned after 100 ms refused")
	}
	if b.Take(t0.Add(100*time.Millisecond), 1) {
		t.Fatal("second take after 100 ms allowed")
	}
	if !b.Take(t0.Add(time.Hour), 20) || b.Take(t0.Add(time.Hour), 1) {
		t.Fatal("refill is not capped at the burst")
	}
	if b.Take(t0.Add(2*time.Hour), 21) {
		t.Fatal("a request larger than the burst passed")
	}
}

func TestBucketRateChangesLive(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := NewBucket(100, 100)
	b.SetRate(1, 1) // tightened: the 100 saved tokens shrink to 1
	if !b.Take(t0, 1) || b.Take(t0, 1) {
		t.Fatal("tightened bucket did not cap saved tokens at the new burst")
	}
	b.SetRate(0, 0) // 0 = unlimited
	for range 1000 {
		if !b.Take(t0, 1e6) {
			t.Fatal("unlimited bucket refused")
		}
	}
}

func TestBucketTakeAllocatesNothing(t *testing.T) {
	b := NewBucket(1e9, 1e9)
	now := time.Now()
	if n := testing.AllocsPerRun(1000, func() { b.Take(now, 1) }); n != 0 {
		t.Fatalf("allocs per Take = %v, want 0", n)
	}
}

func seedTenant(t *testing.T, pool *pgxpool.Pool, id string, q quotas.Quotas) {
	t.Helper()
	tenanttest.Seed(t, pool, id, q)
}

type change struct {
	tenant string
	q      quotas.Quotas
}

func startStore(t *testing.T) (*Store, *pgxpool.Pool, chan change) {
	t.Helper()
	url := testenv.DatabaseURL(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	changes := make(chan change, 16)
	s := NewStore(pool, slog.New(slog.NewTextHandler(io.Discard, nil)), func(id string, q quotas.Quotas) { changes <- change{id, q} })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, url) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s, pool, changes
}

func awaitChange(t *testing.T, changes chan change, tenant string, want int64) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case c := <-changes:
			if c.tenant == tenant && c.q.MaxMsgsPerSec == want {
				return
			}
		case <-deadline:
			t.Fatalf("no change of %s to max_msgs_per_sec=%d within 10 s", tenant, want)
		}
	}
}

func TestQuotaChangesArriveLiveThroughNotify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, changes := startStore(t)
	free := tenanttest.Free()
	seedTenant(t, pool, "ten_a", free)
	seedTenant(t, pool, "ten_b", free)

	q, err := s.Get(ctx, "ten_a")
	if err != nil || q != free {
		t.Fatalf("Get = %+v, %v; want the seeded defaults", q, err)
	}
	// The listener must be attached before the NOTIFY; retry the update
	// until the change is seen (an early NOTIFY is simply missed).
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := pool.Exec(ctx, `UPDATE quotas SET max_msgs_per_sec = 7 WHERE tenant_id = 'ten_a'; NOTIFY berth_quotas, 'ten_a'`); err != nil {
			t.Fatal(err)
		}
		select {
		case c := <-changes:
			if c.tenant != "ten_a" || c.q.MaxMsgsPerSec != 7 {
				t.Fatalf("change = %+v, want ten_a with max_msgs_per_sec 7", c)
			}
			if q, _ := s.Get(ctx, "ten_a"); q.MaxMsgsPerSec != 7 {
				t.Fatalf("Get after change = %d, want 7", q.MaxMsgsPerSec)
			}
			goto changed
		case <-time.After(200 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("quota change never arrived")
			}
		}
	}
changed:
	// A tenant this node does not hold is not loaded by a notification.
	if _, err := pool.Exec(ctx, `UPDATE quotas SET max_msgs_per_sec = 9 WHERE tenant_id = 'ten_b'; NOTIFY berth_quotas, 'ten_b'`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "ten_missing"); !errors.Is(err, ErrNoTenant) {
		t.Fatalf("Get(missing) err = %v, want ErrNoTenant", err)
	}
	select {
	case c := <-changes:
		t.Fatalf("change reported for a tenant not held: %+v", c)
	case <-time.After(300 * time.Millisecond):
	}
}

// Notifications sent while the listener is disconnected are lost; after it
// reconnects it must re-read what it holds.
func TestListenerReconnectRereadsHeldTenants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, changes := startStore(t)
	free := tenanttest.Free()
	seedTenant(t, pool, "ten_a", free)
	if _, err := s.Get(ctx, "ten_a"); err != nil {
		t.Fatal(err)
	}
	// Wait for the listener's session, then change the row silently and kill it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, ListenerApplicationName).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("listener never connected")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := pool.Exec(ctx, `UPDATE quotas SET max_msgs_per_sec = 3 WHERE tenant_id = 'ten_a'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, ListenerApplicationName); err != nil {
		t.Fatal(err)
	}
	awaitChange(t, changes, "ten_a", 3)
}

func TestBucketReserveThrottlesInsteadOfRefusing(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := NewBucket(10, 10)
	if d, ok := b.Reserve(t0, 10); !ok || d != 0 {
		t.Fatalf("reserve within burst: wait %v ok %v, want 0 true", d, ok)
	}
	d, ok := b.Reserve(t0, 5) // 5 in debt at 10/s: wait 0.5 s
	if !ok || d != 500*time.Millisecond {
		t.Fatalf("reserve into debt: wait %v ok %v, want 500ms true", d, ok)
	}
	if _, ok := b.Reserve(t0, 6); ok { // would be 11 in debt, deeper than one burst
		t.Fatal("reserve beyond one burst of debt allowed")
	}
	if d, ok := b.Reserve(t0.Add(2*time.Second), 1); !ok || d != 0 {
		t.Fatalf("after the debt is repaid: wait %v ok %v", d, ok)
	}
}
