package usage

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/testenv"
)

type row struct {
	in, out, bin, bout, connSec, stored int64
}

func readUsage(t *testing.T, pool *pgxpool.Pool, tenant string) row {
	t.Helper()
	var r row
	err := pool.QueryRow(context.Background(), `SELECT coalesce(sum(messages_in),0), coalesce(sum(messages_out),0),
		coalesce(sum(bytes_in),0), coalesce(sum(bytes_out),0), coalesce(sum(connection_seconds),0), coalesce(max(stored_bytes),0)
		FROM usage WHERE tenant_id = $1`, tenant).Scan(&r.in, &r.out, &r.bin, &r.bout, &r.connSec, &r.stored)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func readDrops(t *testing.T, pool *pgxpool.Pool, tenant, reason string) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), `SELECT coalesce(sum(count),0) FROM usage_drops WHERE tenant_id=$1 AND reason=$2`, tenant, reason).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestFlushCountsExactlyPerTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	m := NewMeter()
	f := NewFlusher(pool, m, "node-a", time.Hour, discard())

	a, b := m.Tenant("ten_a"), m.Tenant("ten_b")
	for range 1000 {
		a.MessagesIn.Add(1)
		a.BytesIn.Add(64)
	}
	a.MessagesOut.Add(3000)
	a.BytesOut.Add(3000 * 64)
	a.AddDrops("queue_full", 1)
	a.AddDrops("queue_full", 1)
	b.MessagesIn.Add(7)
	b.StoredBytes.Store(4096)

	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// A second flush with nothing new changes nothing.
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := readUsage(t, pool, "ten_a"), (row{in: 1000, out: 3000, bin: 64000, bout: 192000}); got != want {
		t.Errorf("tenant a = %+v, want %+v", got, want)
	}
	if got, want := readUsage(t, pool, "ten_b"), (row{in: 7, stored: 4096}); got != want {
		t.Errorf("tenant b = %+v, want %+v", got, want)
	}
	if n := readDrops(t, pool, "ten_a", "queue_full"); n != 2 {
		t.Errorf("queue_full drops = %d, want 2", n)
	}
}

// A flush whose commit landed but whose answer was lost is retried with the
// same batch: the retry must count nothing.
func TestRetriedBatchCountsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	b := &Batch{NodeID: "node-a", Seq: 42, Bucket: time.Now().UTC().Truncate(time.Minute), Deltas: []Delta{{
		TenantID: "ten_a", MessagesIn: 5, BytesIn: 500, Drops: map[string]int64{"expired": 1},
	}}}
	for range 3 {
		if err := Write(ctx, pool, b); err != nil {
			t.Fatal(err)
		}
	}
	if got := readUsage(t, pool, "ten_a"); got.in != 5 || got.bin != 500 {
		t.Fatalf("after three writes of one batch: %+v, want 5 messages / 500 bytes", got)
	}
	if n := readDrops(t, pool, "ten_a", "expired"); n != 1 {
		t.Fatalf("expired drops = %d, want 1", n)
	}
}

// A flush that fails keeps its batch; the next flush writes it and then the
// newer counts, so nothing is lost and nothing doubled.
func TestFailedFlushIsRetriedWithoutLossOrDoubling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	good := testenv.Postgres(t)
	dead, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dead.Close)

	m := NewMeter()
	f := NewFlusher(dead, m, "node-a", time.Hour, discard())
	c := m.Tenant("ten_a")
	c.MessagesIn.Add(10)
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := f.Flush(cctx); err == nil {
		t.Fatal("flush to an unreachable database succeeded")
	}
	c.MessagesIn.Add(5) // counted while the database was away

	f.pool = good
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readUsage(t, good, "ten_a"); got.in != 15 {
		t.Fatalf("messages_in = %d, want 15", got.in)
	}
}

func TestConnectionSecondsIntegrateLiveConnections(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var c Counters
	c.Connected(t0)
	c.Connected(t0.Add(10 * time.Second))        // 2 live from t+10 s
	c.Disconnected(t0.Add(20 * time.Second))     // 1 live from t+20 s
	d := c.take("ten_a", t0.Add(30*time.Second)) // 10 + 2*10 + 10 = 40 s
	if d.ConnectionNanos != int64(40*time.Second) {
		t.Fatalf("connection time = %v, want 40s", time.Duration(d.ConnectionNanos))
	}
	d = c.take("ten_a", t0.Add(31500*time.Millisecond)) // 1.5 s more: 1 s now, 0.5 s carried
	if d.ConnectionNanos != int64(time.Second) {
		t.Fatalf("connection time = %v, want 1s with the rest carried over", time.Duration(d.ConnectionNanos))
	}
	d = c.take("ten_a", t0.Add(32*time.Second))
	if d.ConnectionNanos != int64(time.Second) {
		t.Fatalf("connection time = %v, want the carried 0.5 s plus 0.5 s", time.Duration(d.ConnectionNanos))
	}
}

func TestCountingAllocatesNothing(t *testing.T) {
	c := NewMeter().Tenant("ten_a")
	if n := testing.AllocsPerRun(1000, func() {
		c.MessagesIn.Add(1)
		c.BytesIn.Add(64)
	}); n != 0 {
		t.Fatalf("allocs per count = %v, want 0", n)
	}
}
