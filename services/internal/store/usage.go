package store

import (
	"context"
	"time"
)

// UsagePoint is one step of a tenant's usage series. Counters are summed
// over the step (and over nodes); StoredBytes is a level, so it is the
// largest per-minute total within the step.
type UsagePoint struct {
	T                 time.Time
	MessagesIn        int64
	MessagesOut       int64
	BytesIn           int64
	BytesOut          int64
	ConnectionSeconds int64
	StoredBytes       int64
	Drops             map[string]int64
}

// Usage returns the tenant's usage by step, in buckets aligned to the Unix
// epoch (UTC): one point for each bucket [k·step, (k+1)·step) that
// intersects [from, to), zero where nothing was recorded, each point
// covering its whole bucket (so a series may start before from and end
// after to). step must be a whole number of seconds.
func (s *Store) Usage(ctx context.Context, tid string, from, to time.Time, step time.Duration) ([]UsagePoint, error) {
	stepSec := int64(step / time.Second)
	from, to = AlignRange(from, to, step)
	var points []UsagePoint
	index := map[int64]int{}
	for t := from; t.Before(to); t = t.Add(step) {
		index[t.Unix()] = len(points)
		points = append(points, UsagePoint{T: t, Drops: map[string]int64{}})
	}
	rows, err := s.pool.Query(ctx, `
		SELECT b, sum(mi)::bigint, sum(mo)::bigint, sum(bi)::bigint, sum(bo)::bigint, sum(cs)::bigint, max(sb)::bigint
		FROM (
			SELECT date_bin($4::bigint * interval '1 second', bucket, 'epoch'::timestamptz) AS b, bucket,
			       sum(messages_in) AS mi, sum(messages_out) AS mo, sum(bytes_in) AS bi, sum(bytes_out) AS bo,
			       sum(connection_seconds) AS cs, sum(stored_bytes) AS sb
			FROM usage WHERE tenant_id = $1 AND bucket >= $2 AND bucket < $3
			GROUP BY 1, 2
		) per_minute
		GROUP BY b ORDER BY b`, tid, from, to, stepSec)
	if err != nil {
		return nil, classify("usage", err)
	}
	for rows.Next() {
		var b time.Time
		var p UsagePoint
		if err := rows.Scan(&b, &p.MessagesIn, &p.MessagesOut, &p.BytesIn, &p.BytesOut, &p.ConnectionSeconds, &p.StoredBytes); err != nil {
			rows.Close()
			return nil, classify("usage", err)
		}
		if i, ok := index[b.Unix()]; ok {
			p.T, p.Drops = points[i].T, points[i].Drops
			points[i] = p
		}
	}
	if err := rows.Err(); err != nil {
		return nil, classify("usage", err)
	}
	rows, err = s.pool.Query(ctx, `
		SELECT date_bin($4::bigint * interval '1 second', bucket, 'epoch'::timestamptz) AS b, reason, sum(count)::bigint
		FROM usage_drops WHERE tenant_id = $1 AND bucket >= $2 AND bucket < $3
		GROUP BY 1, 2 ORDER BY 1, 2`, tid, from, to, stepSec)
	if err != nil {
		return nil, classify("usage drops", err)
	}
	defer rows.Close()
	for rows.Next() {
		var b time.Time
		var reason string
		var n int64
		if err := rows.Scan(&b, &reason, &n); err != nil {
			return nil, classify("usage drops", err)
		}
		if i, ok := index[b.Unix()]; ok {
			points[i].Drops[reason] = n
		}
	}
	return points, classify("usage drops", rows.Err())
}

// AlignRange widens [from, to) to whole steps aligned to the Unix epoch
// (UTC): from down to the step boundary at or before it, to up to the one
// at or after it. step must be a whole number of seconds.
func AlignRange(from, to time.Time, step time.Duration) (time.Time, time.Time) {
	sec := int64(step / time.Second)
	lo := floorDiv(from.Unix(), sec) * sec
	hi := floorDiv(to.Unix(), sec) * sec
	if hi < to.Unix() || to.Nanosecond() > 0 {
		hi += sec
	}
	return time.Unix(lo, 0).UTC(), time.Unix(hi, 0).UTC()
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
