package lifecycle

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/services/internal/store"
	"berth.dev/testenv"
)

// clock is a time the test moves.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time             { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time)            { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }
func date(m time.Month, d, h int) time.Time { return time.Date(2031, m, d, h, 0, 0, 0, time.UTC) }

func newLifecycle(t *testing.T, pool *pgxpool.Pool, c *clock) *Lifecycle {
	t.Helper()
	return New(pool, Config{Now: c.now}, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func once(t *testing.T, l *Lifecycle) Report {
	t.Helper()
	r, err := l.Once(context.Background())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if !r.Ran {
		t.Fatal("run did not take the lock")
	}
	return r
}

// partitionOf is the partition holding the row a query selects.
func partitionOf(t *testing.T, pool *pgxpool.Pool, q string, args ...any) string {
	t.Helper()
	var name string
	if err := pool.QueryRow(context.Background(), q, args...).Scan(&name); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return name
}

func exists(t *testing.T, pool *pgxpool.Pool, relation string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`, relation).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestPartitionsAreCreatedAhead(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	c := &clock{t: date(3, 10, 10)}
	l := newLifecycle(t, pool, c)

	// A row of a day with no partition yet lands in the default one.
	if _, err := pool.Exec(ctx, `INSERT INTO usage (tenant_id, node_id, bucket, messages_in) VALUES ('ten_a', 'n1', $1, 7)`,
		date(3, 14, 5)); err != nil {
		t.Fatal(err)
	}
	q := `SELECT tableoid::regclass::text FROM usage WHERE bucket = $1`
	if got := partitionOf(t, pool, q, date(3, 14, 5)); got != "usage_default" {
		t.Fatalf("row in %s, want usage_default", got)
	}
	r := once(t, l)
	for _, tb := range tables {
		for d := 10; d <= 13; d++ {
			name := partitionName(tb, date(3, d, 0))
			if !exists(t, pool, name) || !slices.Contains(r.Created, name) {
				t.Errorf("%s not created (created %v)", name, r.Created)
			}
		}
	}
	if exists(t, pool, "usage_p20310314") {
		t.Fatal("usage_p20310314 made more than 3 days ahead")
	}
	if r := once(t, l); len(r.Created) != 0 {
		t.Fatalf("second run created %v", r.Created)
	}
	// A day later its partition is made, and the stray row moves into it.
	c.set(date(3, 11, 0))
	once(t, l)
	if got := partitionOf(t, pool, q, date(3, 14, 5)); got != "usage_p20310314" {
		t.Fatalf("row in %s, want usage_p20310314", got)
	}
	var n int64
	if err := pool.QueryRow(ctx, `SELECT messages_in FROM usage WHERE bucket = $1`, date(3, 14, 5)).Scan(&n); err != nil || n != 7 {
		t.Fatalf("moved row: messages_in %d, %v", n, err)
	}
	// Writers into the new partitions work, flush upserts included.
	for range 2 {
		if _, err := pool.Exec(ctx, `INSERT INTO usage (tenant_id, node_id, bucket, messages_in) VALUES ('ten_a', 'n1', $1, 1)
			ON CONFLICT (tenant_id, bucket, node_id) DO UPDATE SET messages_in = usage.messages_in + EXCLUDED.messages_in`,
			date(3, 12, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if got := partitionOf(t, pool, `SELECT tableoid::regclass::text || ':' || messages_in FROM usage WHERE bucket = $1`, date(3, 12, 1)); got != "usage_p20310312:2" {
		t.Fatalf("upserted row: %s", got)
	}
}

// minuteRow is one row the test writes into usage (with drops and a
// latency histogram).
type minuteRow struct {
	tenant, node string
	bucket       time.Time
	in, out      int64
	stored       int64
	drops        int64
	lat          []int64 // samples, ns, for metric ack
}

func writeRows(t *testing.T, pool *pgxpool.Pool, rows []minuteRow) {
	t.Helper()
	ctx := context.Background()
	b := &pgx.Batch{}
	for _, r := range rows {
		// Half the messages read (rounded down) were accepted.
		b.Queue(`INSERT INTO usage (tenant_id, node_id, bucket, messages_in, messages_out, bytes_in, bytes_out, connection_seconds, stored_bytes, messages_accepted)
			VALUES ($1, $2, $3, $4::bigint, $5::bigint, $4::bigint * 10, $5::bigint * 10, 60, $6, $4::bigint / 2)`, r.tenant, r.node, r.bucket, r.in, r.out, r.stored)
		if r.drops > 0 {
			b.Queue(`INSERT INTO usage_drops (tenant_id, node_id, bucket, reason, count) VALUES ($1, $2, $3, 'queue_full', $4), ($1, $2, $3, 'offline', 1)`,
				r.tenant, r.node, r.bucket, r.drops)
		}
		if len(r.lat) > 0 {
			counts := map[int64]int64{}
			var sum int64
			for _, v := range r.lat {
				counts[v/1000*1000+999]++ // buckets 1 µs wide, bound = largest value
				sum += v
			}
			var bounds, cs []int64
			for _, k := range slices.Sorted(mapsKeys(counts)) {
				bounds, cs = append(bounds, k), append(cs, counts[k])
			}
			b.Queue(`INSERT INTO latency (tenant_id, node_id, bucket, metric, count, sum_ns, min_ns, max_ns, bounds, counts)
				VALUES ($1, $2, $3, 'ack', $4, $5, $6, $7, $8, $9)`, r.tenant, r.node, r.bucket, int64(len(r.lat)), sum,
				slices.Min(r.lat), slices.Max(r.lat), bounds, cs)
		}
	}
	if err := pool.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
}

func mapsKeys(m map[int64]int64) func(func(int64) bool) {
	return func(yield func(int64) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// randomRows makes rows for two tenants on three nodes in the minutes of
// days [from, to).
func randomRows(from, to time.Time) []minuteRow {
	rng := rand.New(rand.NewPCG(1, 2))
	var rows []minuteRow
	for at := from; at.Before(to); at = at.Add(time.Duration(1+rng.IntN(37)) * time.Minute) {
		for _, ten := range []string{"ten_a", "ten_b"} {
			for _, node := range []string{"n1", "n2", "n3"} {
				if rng.IntN(3) == 0 {
					continue
				}
				r := minuteRow{tenant: ten, node: node, bucket: at, in: rng.Int64N(1e6), out: rng.Int64N(1e6),
					stored: rng.Int64N(1e9), drops: rng.Int64N(3)}
				for range rng.IntN(5) {
					r.lat = append(r.lat, 1000+rng.Int64N(5e6))
				}
				rows = append(rows, r)
			}
		}
	}
	return rows
}

// wantHourly sums rows per tenant and hour as the rollup must: counters
// summed, stored bytes the largest per-minute total over nodes.
func wantHourly(rows []minuteRow, trunc time.Duration) map[string][7]int64 {
	type key struct {
		tenant string
		minute time.Time
	}
	stored := map[key]int64{}
	out := map[string][7]int64{}
	for _, r := range rows {
		k := r.tenant + "@" + r.bucket.Truncate(trunc).Format(time.RFC3339)
		v := out[k]
		v[0] += r.in
		v[1] += r.out
		v[2] += r.in * 10
		v[3] += r.out * 10
		v[4] += 60
		v[6] += r.in / 2
		out[k] = v
		stored[key{r.tenant, r.bucket}] += r.stored
	}
	for k, s := range stored {
		key := k.tenant + "@" + k.minute.Truncate(trunc).Format(time.RFC3339)
		v := out[key]
		v[5] = max(v[5], s)
		out[key] = v
	}
	return out
}

func readRollup(t *testing.T, pool *pgxpool.Pool, table, column string) map[string][7]int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT tenant_id, `+column+`, messages_in, messages_out, bytes_in, bytes_out, connection_seconds, stored_bytes,
		messages_accepted FROM `+table)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][7]int64{}
	var ten string
	var at time.Time
	var v [7]int64
	if _, err := pgx.ForEachRow(rows, []any{&ten, &at, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6]}, func() error {
		out[ten+"@"+at.UTC().Format(time.RFC3339)] = v
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// dump is every rollup table's rows, as text, to compare runs.
func dump(t *testing.T, pool *pgxpool.Pool) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, tb := range []string{"usage_hourly", "usage_daily", "usage_drops_hourly", "usage_drops_daily", "latency_hourly"} {
		rows, err := pool.Query(context.Background(), `SELECT t::text FROM `+tb+` AS t ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		out[tb], err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// The rollups equal the raw sums exactly, a re-run changes nothing,
// partitions past retention are dropped (spans after 7 days, minute rows
// after 35, once rolled up), and the API's usage and latency answer a
// 60-day-old range from the rollups exactly as they did from minute rows.
func TestRollupsRetentionAndOldRanges(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	c := &clock{t: date(1, 1, 0)}
	l := newLifecycle(t, pool, c)
	once(t, l) // partitions for Jan 1–4

	rows := randomRows(date(1, 1, 0), date(1, 3, 0))
	writeRows(t, pool, rows)
	if _, err := pool.Exec(ctx, `INSERT INTO spans (tenant_id, trace_id, span_id, name, start, duration_ns)
		VALUES ('ten_a', repeat('a', 32), repeat('b', 16), 'mqtt.publish', $1, 5)`, date(1, 1, 3)); err != nil {
		t.Fatal(err)
	}
	st := store.New(pool)
	type answers struct {
		usage   map[time.Duration][]store.UsagePoint
		latency []store.LatencyPoint
	}
	read := func() answers {
		t.Helper()
		a := answers{usage: map[time.Duration][]store.UsagePoint{}}
		for _, step := range []time.Duration{time.Hour, 3 * time.Hour, 24 * time.Hour} {
			ps, err := st.Usage(ctx, "ten_a", date(1, 1, 0), date(1, 3, 0), step)
			if err != nil {
				t.Fatal(err)
			}
			a.usage[step] = ps
		}
		var err error
		if a.latency, err = st.Latency(ctx, "ten_a", "ack", date(1, 1, 0), date(1, 3, 0), time.Hour); err != nil {
			t.Fatal(err)
		}
		return a
	}
	fromMinutes := read()

	c.set(date(1, 3, 0).Add(90 * time.Minute))
	r := once(t, l)
	if !slices.ContainsFunc(r.RolledUp, date(1, 1, 0).Equal) || !slices.ContainsFunc(r.RolledUp, date(1, 2, 0).Equal) {
		t.Fatalf("rolled up %v, want Jan 1 and 2", r.RolledUp)
	}
	if diff := cmp.Diff(wantHourly(rows, time.Hour), readRollup(t, pool, "usage_hourly", "hour")); diff != "" {
		t.Errorf("usage_hourly (-raw sums +rollup):\n%s", diff)
	}
	if diff := cmp.Diff(wantHourly(rows, 24*time.Hour), readRollup(t, pool, "usage_daily", "day")); diff != "" {
		t.Errorf("usage_daily (-raw sums +rollup):\n%s", diff)
	}
	var rawDrops, hourDrops, dayDrops, rawLat, hourLat int64
	if err := pool.QueryRow(ctx, `SELECT (SELECT sum(count) FROM usage_drops), (SELECT sum(count) FROM usage_drops_hourly),
		(SELECT sum(count) FROM usage_drops_daily), (SELECT sum(count) FROM latency), (SELECT sum(count) FROM latency_hourly)`).
		Scan(&rawDrops, &hourDrops, &dayDrops, &rawLat, &hourLat); err != nil {
		t.Fatal(err)
	}
	if rawDrops == 0 || hourDrops != rawDrops || dayDrops != rawDrops || rawLat == 0 || hourLat != rawLat {
		t.Errorf("drops raw %d hourly %d daily %d; latency samples raw %d hourly %d", rawDrops, hourDrops, dayDrops, rawLat, hourLat)
	}

	// Idempotent: running again, at the same time or later, writes the same rollups.
	before := dump(t, pool)
	once(t, l)
	c.set(date(1, 3, 5))
	once(t, l)
	if diff := cmp.Diff(before, dump(t, pool)); diff != "" {
		t.Fatalf("rollups changed on a re-run (-before +after):\n%s", diff)
	}

	// Spans go after 7 days; minute usage stays.
	c.set(date(1, 9, 1))
	r = once(t, l)
	if !slices.Contains(r.Dropped, "spans_p20310101") || exists(t, pool, "spans_p20310101") {
		t.Fatalf("dropped %v, want spans_p20310101", r.Dropped)
	}
	if exists(t, pool, "spans_p20310102") == false || !exists(t, pool, "usage_p20310101") {
		t.Fatal("dropped a partition inside its retention")
	}

	// 60 days on, the minute partitions of January 1 and 2 are gone and the
	// API answers from the rollups what it answered from the minute rows.
	c.set(date(3, 2, 1))
	r = once(t, l)
	for _, name := range []string{"usage_p20310101", "usage_p20310102", "usage_drops_p20310101", "latency_p20310102"} {
		if exists(t, pool, name) || !slices.Contains(r.Dropped, name) {
			t.Errorf("%s not dropped (dropped %v)", name, r.Dropped)
		}
	}
	var minuteRows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM usage WHERE bucket < $1`, date(1, 3, 0)).Scan(&minuteRows); err != nil || minuteRows != 0 {
		t.Fatalf("%d minute rows left (%v)", minuteRows, err)
	}
	if diff := cmp.Diff(fromMinutes, read(), cmp.AllowUnexported(answers{})); diff != "" {
		t.Errorf("answers from the rollups differ from the minute rows' (-minutes +rollups):\n%s", diff)
	}
	// A recent minute row is read with the old ones in one series.
	writeRows(t, pool, []minuteRow{{tenant: "ten_a", node: "n1", bucket: date(3, 2, 0).Add(5 * time.Minute), in: 11, out: 1}})
	ps, err := st.Usage(ctx, "ten_a", date(1, 1, 0), date(3, 3, 0), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ps[0].MessagesIn, fromMinutes.usage[24*time.Hour][0].MessagesIn; got != want || want == 0 {
		t.Errorf("Jan 1 messages in %d, want %d", got, want)
	}
	if last := ps[len(ps)-1]; !last.T.Equal(date(3, 2, 0)) || last.MessagesIn != 11 {
		t.Errorf("last point %+v, want Mar 2 with 11 messages in", last)
	}
}

// A minute partition past its retention whose day is not rolled up is kept.
func TestNoDropWithoutRollup(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	c := &clock{t: date(5, 1, 0)}
	once(t, newLifecycle(t, pool, c))
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	err = dropPartition(ctx, conn.Conn(), tables[1], date(5, 1, 0))
	if !errors.Is(err, ErrNotRolledUp) {
		t.Fatalf("drop of a day not rolled up: %v, want ErrNotRolledUp", err)
	}
	if !exists(t, pool, "usage_p20310501") {
		t.Fatal("partition dropped")
	}
	// Marked as rolled up before its end is not rolled up either.
	if _, err := pool.Exec(ctx, `INSERT INTO rollup_days VALUES ($1, $2)`, date(5, 1, 0), date(5, 1, 23)); err != nil {
		t.Fatal(err)
	}
	if err := dropPartition(ctx, conn.Conn(), tables[1], date(5, 1, 0)); !errors.Is(err, ErrNotRolledUp) {
		t.Fatalf("drop of a day rolled up before its end: %v, want ErrNotRolledUp", err)
	}
}

// Only one process works at a time: a run that finds the advisory lock
// held does nothing, and concurrent runs do not fail.
func TestOneRunnerAtATime(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	c := &clock{t: date(7, 1, 0)}
	l := newLifecycle(t, pool, c)
	holder, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, LockKey); err != nil {
		t.Fatal(err)
	}
	r, err := l.Once(ctx)
	if err != nil || r.Ran || len(r.Created) > 0 {
		t.Fatalf("run while another holds the lock: %+v, %v", r, err)
	}
	if exists(t, pool, "usage_p20310701") {
		t.Fatal("a run without the lock made a partition")
	}
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_unlock($1)`, LockKey); err != nil {
		t.Fatal(err)
	}
	holder.Release()

	var wg sync.WaitGroup
	reports := make([]Report, 4)
	errs := make([]error, 4)
	for i := range reports {
		wg.Go(func() { reports[i], errs[i] = newLifecycle(t, pool, c).Once(ctx) })
	}
	wg.Wait()
	created := map[string]int{}
	for i, r := range reports {
		if errs[i] != nil {
			t.Fatalf("concurrent run: %v", errs[i])
		}
		for _, n := range r.Created {
			created[n]++
		}
	}
	for n, k := range created {
		if k != 1 {
			t.Errorf("%s created by %d runs", n, k)
		}
	}
	if !exists(t, pool, "usage_p20310701") {
		t.Fatal("no run made the partitions")
	}
}

// Run works at once and stops when its context ends.
func TestRunStops(t *testing.T) {
	pool := testenv.Postgres(t)
	c := &clock{t: date(8, 1, 0)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { newLifecycle(t, pool, c).Run(ctx); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for !exists(t, pool, "spans_p20310804") {
		if time.Now().After(deadline) {
			t.Fatal("Run made no partitions")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop")
	}
}
