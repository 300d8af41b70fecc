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
	in, accepted, out, bin, bout, connSec, stored int64
}

func readUsage(t *testing.T, pool *pgxpool.Pool, tenant string) row {
	t.Helper()
	var r row
	err := pool.QueryRow(context.Background(), `SELECT coalesce(sum(messages_in),0), coalesce(sum(messages_accepted),0), coalesce(sum(messages_out),0),
		coalesce(sum(bytes_in),0), coalesce(sum(bytes_out),0), coalesce(sum(connection_seconds),0), coalesce(max(stored_bytes),0)
		FROM usage WHERE tenant_id = $1`, tenant).Scan(&r.in, &r.accepted, &r.out, &r.bin, &r.bout, &r.connSec, &r.stored)
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
	for i := range 1000 {
		a.MessagesIn.Add(1)
		if i%100 != 0 { // every hundredth refused
			a.MessagesAccepted.Add(1)
		}
		a.BytesIn.Add(64)
	}
	a.MessagesOut.Add(3000)
	a.BytesOut.Add(3000 * 64)
	a.AddDrops("queue_full", 1)
	a.AddDrops("queue_full", 1)
	b.MessagesIn.Add(7)
	b.MessagesAccepted.Add(7)
	b.StoredBytes.Store(4096)

	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// A second flush with nothing new changes nothing.
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := readUsage(t, pool, "ten_a"), (row{in: 1000, accepted: 990, out: 3000, bin: 64000, bout: 192000}); got != want {
		t.Errorf("tenant a = %+v, want %+v", got, want)
	}
	if got, want := readUsage(t, pool, "ten_b"), (row{in: 7, accepted: 7, stored: 4096}); got != want {
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
	c.Connected(t0.Add(10 * time.Second))               // 2 live from t+10 s
	c.Disconnected(t0.Add(20 * time.Second))            // 1 live from t+20 s
	d := c.take("ten_a", t0.Add(30*time.Second), false) // 10 + 2*10 + 10 = 40 s
	if d.ConnectionNanos != int64(40*time.Second) {
		t.Fatalf("connection time = %v, want 40s", time.Duration(d.ConnectionNanos))
	}
	d = c.take("ten_a", t0.Add(31500*time.Millisecond), false) // 1.5 s more: 1 s now, 0.5 s carried
	if d.ConnectionNanos != int64(time.Second) {
		t.Fatalf("connection time = %v, want 1s with the rest carried over", time.Duration(d.ConnectionNanos))
	}
	d = c.take("ten_a", t0.Add(32*time.Second), false)
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

// A retired (deleted) tenant's last deltas are taken once, with a stored
// level of zero and its connection time rounded to the nearest second;
// then the meter has forgotten it, so no later flush writes a row for it
// (its stored-bytes gauge alone would otherwise write one every flush).
func TestRetiredTenantIsTakenOnceThenForgotten(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := NewMeter()
	c := m.Tenant("ten_gone")
	m.Tenant("ten_live").StoredBytes.Store(10)
	c.MessagesIn.Add(3)
	c.StoredBytes.Store(4096)
	c.Connected(t0)
	c.Disconnected(t0.Add(1600 * time.Millisecond))
	m.Retire("ten_gone")
	m.Retire("ten_never_seen") // no counters: nothing to do

	byTenant := func(ds []Delta) map[string]Delta {
		out := map[string]Delta{}
		for _, d := range ds {
			out[d.TenantID] = d
		}
		return out
	}
	got := byTenant(m.take(t0.Add(2 * time.Second)))
	d, ok := got["ten_gone"]
	if !ok || d.MessagesIn != 3 || d.StoredBytes != 0 || d.ConnectionNanos != int64(2*time.Second) {
		t.Fatalf("last take of the retired tenant %+v (present %v), want 3 in, stored 0, 2 s", d, ok)
	}
	if _, ok := got["ten_live"]; !ok {
		t.Fatal("the live tenant's stored level is missing")
	}
	got = byTenant(m.take(t0.Add(3 * time.Second)))
	if d, ok := got["ten_gone"]; ok {
		t.Fatalf("retired tenant taken again: %+v", d)
	}
	if _, ok := got["ten_live"]; !ok {
		t.Fatal("the live tenant was forgotten too")
	}
}
