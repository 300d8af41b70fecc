package usage

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/broker/internal/histogram"
	"berth.dev/testenv"
)

// latencyRow is a metric's merged histogram over every row of a tenant.
func latencyRow(t *testing.T, pool *pgxpool.Pool, tenant, metric string) (count, sum, lo, hi int64, buckets []histogram.Bucket) {
	t.Helper()
	ctx := context.Background()
	err := pool.QueryRow(ctx, `SELECT coalesce(sum(count),0)::bigint, coalesce(sum(sum_ns),0)::bigint, coalesce(min(min_ns),0), coalesce(max(max_ns),0)
		FROM latency WHERE tenant_id = $1 AND metric = $2`, tenant, metric).Scan(&count, &sum, &lo, &hi)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT b, sum(c)::bigint FROM latency, unnest(bounds, counts) AS u(b, c)
		WHERE tenant_id = $1 AND metric = $2 GROUP BY b ORDER BY b`, tenant, metric)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var b histogram.Bucket
		var c int64
		if err := rows.Scan(&b.Upper, &c); err != nil {
			t.Fatal(err)
		}
		b.Count = uint64(c)
		buckets = append(buckets, b)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return count, sum, lo, hi, buckets
}

// TestLatencyFlushedExactlyOnce records known latencies over two flushes
// into the same minute (rows merged by SQL) and a retried batch (a no-op):
// the stored histogram holds every sample once, and its percentiles are
// within a bucket (1/64) of the exact ones.
func TestLatencyFlushedExactlyOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	m := NewMeter()
	f := NewFlusher(pool, m, "node-a", time.Hour, discard())
	minute := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f.now = func() time.Time { return minute.Add(10 * time.Second) }

	c := m.Tenant("ten_lat")
	r := rand.New(rand.NewPCG(5, 6))
	var all []int64
	var sum int64
	for round := range 2 {
		for range 5000 {
			v := int64(r.ExpFloat64()*300e3) + 20e3
			c.Latency.Delivery.Record(v)
			all = append(all, v)
			sum += v
		}
		c.Latency.Ack.Record(1_000_000)
		if round == 0 {
			c.Latency.Connect.Record(2_500_000)
		}
		if err := f.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A batch whose commit landed but whose answer was lost is sent again.
	b := &Batch{NodeID: "node-a", Seq: f.lastSeq, Bucket: minute, Deltas: []Delta{{TenantID: "ten_lat",
		Latency: []LatencyDelta{{Metric: MetricAck, Snapshot: histogram.Snapshot{Count: 1, Sum: 5, Min: 5, Max: 5, Buckets: []histogram.Bucket{{Upper: 5, Count: 1}}}}}}}}
	if err := Write(ctx, pool, b); err != nil {
		t.Fatal(err)
	}

	var rowsN int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM latency WHERE tenant_id = 'ten_lat' AND metric = 'delivery'`).Scan(&rowsN); err != nil {
		t.Fatal(err)
	}
	if rowsN != 1 {
		t.Fatalf("%d delivery rows for one node and minute, want 1 (merged)", rowsN)
	}
	count, gotSum, lo, hi, buckets := latencyRow(t, pool, "ten_lat", MetricDelivery)
	slices.Sort(all)
	if count != int64(len(all)) || gotSum != sum || lo != all[0] || hi != all[len(all)-1] {
		t.Fatalf("count %d sum %d min %d max %d, want %d %d %d %d", count, gotSum, lo, hi, len(all), sum, all[0], all[len(all)-1])
	}
	var inBuckets uint64
	for _, b := range buckets {
		inBuckets += b.Count
	}
	if inBuckets != uint64(count) {
		t.Fatalf("buckets hold %d samples, count says %d", inBuckets, count)
	}
	for _, q := range []float64{0.5, 0.9, 0.99, 1} {
		got := histogram.Quantile(buckets, uint64(count), lo, hi, q)
		want := all[int(math.Ceil(q*float64(len(all))))-1]
		if got < want || float64(got-want) > float64(want)/64 {
			t.Errorf("q%v = %d, exact %d: beyond 1/64", q, got, want)
		}
	}
	if n, _, lo, hi, _ := latencyRow(t, pool, "ten_lat", MetricAck); n != 2 || lo != 1_000_000 || hi != 1_000_000 {
		t.Errorf("ack: %d samples in [%d, %d], want 2 of 1ms (the retry counted nothing)", n, lo, hi)
	}
	if n, _, _, _, _ := latencyRow(t, pool, "ten_lat", MetricConnect); n != 1 {
		t.Errorf("connect: %d samples, want 1", n)
	}
}
