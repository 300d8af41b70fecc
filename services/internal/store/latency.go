package store

import (
	"context"
	"math"
	"time"
)

// LatencyMetrics are the metrics nodes record for every message and
// connection (the latency table's metric).
var LatencyMetrics = []string{"delivery", "ack", "connect"}

// LatencyPoint is one step of a tenant's latency series for one metric:
// the histograms of every node and minute in the step merged (counts added
// bucket by bucket), then read. Durations are nanoseconds; all zero when
// Count is 0.
type LatencyPoint struct {
	T                  time.Time
	Count              int64
	P50, P90, P99, Max int64
}

// Latency returns the tenant's latency series for metric, in buckets
// aligned to the Unix epoch (UTC) as Usage does: one point for each bucket
// [k·step, (k+1)·step) that intersects [from, to), Count 0 where nothing
// was recorded. A percentile is the upper bound of the histogram bucket
// holding it (at most 1/64 above the true value), clamped to the exact
// minimum and maximum. step must be a whole number of seconds. Past the
// minute rows' retention it answers from the hourly rollups when step is a
// whole number of hours (see seriesSource), else Count 0 there.
func (s *Store) Latency(ctx context.Context, tid, metric string, from, to time.Time, step time.Duration) ([]LatencyPoint, error) {
	stepSec := int64(step / time.Second)
	from, to = AlignRange(from, to, step)
	var points []LatencyPoint
	index := map[int64]int{}
	for t := from; t.Before(to); t = t.Add(step) {
		index[t.Unix()] = len(points)
		points = append(points, LatencyPoint{T: t})
	}
	type extent struct{ lo, hi int64 }
	extents := make([]extent, len(points))
	// Minute rows from kept_from ($6) on, hourly rollups before when the
	// step is whole hours (see seriesSource).
	keptFrom, err := s.seriesKeptFrom(ctx, "latency", step)
	if err != nil {
		return nil, classify("latency", err)
	}
	src := seriesSource("latency", step, "metric, min_ns, max_ns, bounds, counts", "$3", "$4", "$6")
	rows, err := s.pool.Query(ctx, `
		SELECT date_bin($5::bigint * interval '1 second', bucket, 'epoch'::timestamptz) AS t,
		       min(min_ns), max(max_ns)
		FROM `+src+` WHERE tenant_id = $1 AND metric = $2
		GROUP BY 1`, tid, metric, from, to, stepSec, keptFrom)
	if err != nil {
		return nil, classify("latency", err)
	}
	for rows.Next() {
		var t time.Time
		var e extent
		if err := rows.Scan(&t, &e.lo, &e.hi); err != nil {
			rows.Close()
			return nil, classify("latency", err)
		}
		if i, ok := index[t.Unix()]; ok {
			extents[i] = e
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, classify("latency", err)
	}
	// The merged histogram of each step, bucket by bucket, in order.
	rows, err = s.pool.Query(ctx, `
		SELECT date_bin($5::bigint * interval '1 second', bucket, 'epoch'::timestamptz) AS t, u.b, sum(u.c)::bigint
		FROM `+src+`, unnest(src.bounds, src.counts) AS u(b, c)
		WHERE tenant_id = $1 AND metric = $2
		GROUP BY 1, 2 ORDER BY 1, 2`, tid, metric, from, to, stepSec, keptFrom)
	if err != nil {
		return nil, classify("latency", err)
	}
	defer rows.Close()
	var hist []latencyBucket
	cur := -1
	flush := func() {
		if cur >= 0 {
			points[cur].read(hist, extents[cur].lo, extents[cur].hi)
		}
		hist = hist[:0]
	}
	for rows.Next() {
		var t time.Time
		var b latencyBucket
		if err := rows.Scan(&t, &b.upper, &b.count); err != nil {
			return nil, classify("latency", err)
		}
		i, ok := index[t.Unix()]
		if !ok {
			continue
		}
		if i != cur {
			flush()
			cur = i
		}
		hist = append(hist, b)
	}
	if err := rows.Err(); err != nil {
		return nil, classify("latency", err)
	}
	flush()
	return points, nil
}

// latencyBucket is one bucket of a merged histogram: the largest value it
// holds and its count.
type latencyBucket struct{ upper, count int64 }

// read fills p from a merged histogram (buckets by increasing upper bound)
// of values between lo and hi.
func (p *LatencyPoint) read(hist []latencyBucket, lo, hi int64) {
	for _, b := range hist {
		p.Count += b.count
	}
	if p.Count == 0 {
		return
	}
	p.P50 = quantile(hist, p.Count, lo, hi, 0.50)
	p.P90 = quantile(hist, p.Count, lo, hi, 0.90)
	p.P99 = quantile(hist, p.Count, lo, hi, 0.99)
	p.Max = hi
}

// quantile is the broker's histogram quantile (broker/internal/histogram):
// the upper bound of the bucket holding the ceil(q·count)-th smallest
// value, clamped to [lo, hi].
func quantile(hist []latencyBucket, count, lo, hi int64, q float64) int64 {
	rank := max(int64(math.Ceil(q*float64(count))), 1)
	var seen int64
	for _, b := range hist {
		seen += b.count
		if seen >= rank {
			return min(max(b.upper, lo), hi)
		}
	}
	return hi
}
