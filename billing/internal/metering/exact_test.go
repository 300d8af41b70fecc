package metering

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/testenv"
)

type meters struct{ messages, connSecs, storedByteSecs, transfer int64 }

func readMeters(t *testing.T, q querier, tenant string, month time.Time) meters {
	t.Helper()
	var m meters
	// One row per plan period of the tenant's month: the meters are their sum.
	err := q.QueryRow(context.Background(), `SELECT coalesce(sum(messages), 0)::bigint, coalesce(sum(connection_seconds), 0)::bigint,
		coalesce(sum(stored_byte_seconds), 0)::bigint, coalesce(sum(transfer_bytes), 0)::bigint
		FROM billing_meters WHERE tenant_id = $1 AND month = $2`, tenant, month).Scan(&m.messages, &m.connSecs, &m.storedByteSecs, &m.transfer)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// rawSums are the month's sums straight from the minute rows (messages:
// the accepted ones).
func rawSums(t *testing.T, q querier, tenant string, month time.Time) meters {
	t.Helper()
	var m meters
	if err := q.QueryRow(context.Background(), `SELECT coalesce(sum(messages_accepted), 0)::bigint, coalesce(sum(connection_seconds), 0)::bigint,
		coalesce(sum(stored_bytes * 60), 0)::bigint, coalesce(sum(bytes_in + bytes_out), 0)::bigint
		FROM usage WHERE tenant_id = $1 AND bucket >= $2 AND bucket < $3`, tenant, month, month.AddDate(0, 1, 0)).
		Scan(&m.messages, &m.connSecs, &m.storedByteSecs, &m.transfer); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRollupExactUnderConcurrentFlushes: flushes land while two billing
// runs recompute the same account's month over and over. Every flush adds
// the same deltas to both of the account's tenants in one transaction, so
// any meters read from one snapshot are equal for the two; after the last
// flush one more run gives exactly the raw sums, which equal what the
// writers added.
func TestRollupExactUnderConcurrentFlushes(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	month := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	now := month.Add(20 * 24 * time.Hour)
	seedTenant(t, pool, "acc_x", "ten_x1", "pro", month)
	seedTenant(t, pool, "acc_x", "ten_x2", "pro", month)

	const writers, flushes = 4, 100
	var stop atomic.Bool
	var wg sync.WaitGroup
	var added atomic.Int64 // messages added to each tenant
	for w := range writers {
		wg.Go(func() {
			node := []string{"n1", "n2", "n3", "n4"}[w]
			for i := range flushes {
				at := month.Add(time.Duration(i%30) * time.Minute) // many flushes share a minute row
				n := int64(w*1000 + i + 1)
				if err := flush(ctx, pool,
					usageRow{"ten_x1", node, at, n, n, n, n, n},
					usageRow{"ten_x2", node, at, n, n, n, n, n}); err != nil {
					t.Error(err)
					return
				}
				added.Add(n)
			}
		})
	}
	runs := 0
	var billers sync.WaitGroup
	var mu sync.Mutex
	for range 2 {
		billers.Go(func() {
			for !stop.Load() {
				if _, err := Bill(ctx, pool, "acc_x", month, now, false); err != nil {
					t.Error(err)
					return
				}
				tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
				if err != nil {
					t.Error(err)
					return
				}
				a, b := readMeters(t, tx, "ten_x1", month), readMeters(t, tx, "ten_x2", month)
				_ = tx.Rollback(ctx)
				if a.messages != b.messages || a.transfer != b.transfer {
					t.Errorf("meters from one run differ between tenants flushed together: %+v vs %+v", a, b)
				}
				mu.Lock()
				runs++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	stop.Store(true)
	billers.Wait()
	if _, err := Bill(ctx, pool, "acc_x", month, now, false); err != nil {
		t.Fatal(err)
	}
	for _, tid := range []string{"ten_x1", "ten_x2"} {
		got, raw := readMeters(t, pool, tid, month), rawSums(t, pool, tid, month)
		if got != raw || got.messages != added.Load() || got.transfer != 2*added.Load() {
			t.Fatalf("%s: meters %+v, raw sums %+v, writers added %d messages", tid, got, raw, added.Load())
		}
	}
	t.Logf("%d flushes × 2 tenants by %d writers, %d concurrent billing runs; meters = raw sums = %d messages per tenant",
		writers*flushes, writers, runs, added.Load())
}

// TestKilledRunLosesAndDoublesNothing: a run whose connection dies in the
// middle of its transaction (as when the worker is killed) leaves the
// meters and the draft as they were; the next run makes them equal the raw
// sums, once, however often it runs.
func TestKilledRunLosesAndDoublesNothing(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	month := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	now := month.Add(24 * time.Hour)
	seedTenant(t, pool, "acc_k", "ten_k", "pro", month)
	if err := flush(ctx, pool, usageRow{"ten_k", "n1", month.Add(time.Hour), 100, 10, 20, 30, 40}); err != nil {
		t.Fatal(err)
	}
	if _, err := Bill(ctx, pool, "acc_k", month, now, false); err != nil {
		t.Fatal(err)
	}
	before := readMeters(t, pool, "ten_k", month)
	var total0 int64
	if err := pool.QueryRow(ctx, `SELECT total_cents FROM invoices WHERE account_id = 'acc_k'`).Scan(&total0); err != nil {
		t.Fatal(err)
	}
	if err := flush(ctx, pool, usageRow{"ten_k", "n1", month.Add(2 * time.Hour), 5, 1, 1, 1, 1}); err != nil {
		t.Fatal(err)
	}

	kills := map[string]hook{
		"connection terminated": func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT pg_terminate_backend(pg_backend_pid())`)
			return err
		},
		"context cancelled": func(ctx context.Context, tx pgx.Tx) error { return context.Canceled },
	}
	for name, h := range kills {
		if _, err := bill(ctx, pool, "acc_k", month, now, true, h); err == nil {
			t.Fatalf("%s: the run succeeded", name)
		}
		var status string
		var total int64
		if err := pool.QueryRow(ctx, `SELECT status, total_cents FROM invoices WHERE account_id = 'acc_k'`).Scan(&status, &total); err != nil {
			t.Fatal(err)
		}
		if got := readMeters(t, pool, "ten_k", month); got != before || status != "draft" || total != total0 {
			t.Fatalf("%s: after the killed run meters %+v (were %+v), invoice %s %d (was draft %d)", name, got, before, status, total, total0)
		}
	}
	for range 3 {
		if _, err := Bill(ctx, pool, "acc_k", month, now, false); err != nil {
			t.Fatal(err)
		}
	}
	if got, raw := readMeters(t, pool, "ten_k", month), rawSums(t, pool, "ten_k", month); got != raw || got.messages != 105 {
		t.Fatalf("after three runs meters %+v, raw sums %+v, want 105 messages", got, raw)
	}
}
