package usage

import (
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/broker/internal/histogram"
)

// Latency metric names, as stored in latency.metric (see the migration
// 00005_latency.sql) and asked for by the API's ?metric=.
const (
	MetricDelivery = "delivery" // a PUBLISH read → its copy written to a subscriber's socket
	MetricAck      = "ack"      // a QoS 1/2 PUBLISH read → its PUBACK/PUBREC sent
	MetricConnect  = "connect"  // CONNECT read → CONNACK sent
)

// Latency is one tenant's latency histograms on this node, in nanoseconds,
// recorded by its shard without locks (shard.Latency points at these).
type Latency struct {
	Delivery histogram.Atomic
	Ack      histogram.Atomic
	Connect  histogram.Atomic
}

// LatencyDelta is one metric's samples between two flushes.
type LatencyDelta struct {
	Metric string
	histogram.Snapshot
}

// take moves the histograms into deltas, leaving out empty ones.
func (l *Latency) take() []LatencyDelta {
	var out []LatencyDelta
	for _, m := range []struct {
		name string
		h    *histogram.Atomic
	}{{MetricDelivery, &l.Delivery}, {MetricAck, &l.Ack}, {MetricConnect, &l.Connect}} {
		if s := m.h.Take(); s.Count > 0 {
			out = append(out, LatencyDelta{Metric: m.name, Snapshot: s})
		}
	}
	return out
}

// queueLatency adds the statements writing d's histograms, booked to
// bucket, to q: a row per metric, merged with what the node already wrote
// for that minute by adding counts bucket by bucket.
func queueLatency(q *pgx.Batch, nodeID string, bucket time.Time, d *Delta) {
	for _, l := range d.Latency {
		bounds := make([]int64, len(l.Buckets))
		counts := make([]int64, len(l.Buckets))
		for i, b := range l.Buckets {
			bounds[i], counts[i] = b.Upper, int64(b.Count)
		}
		q.Queue(`INSERT INTO latency (tenant_id, node_id, bucket, metric, count, sum_ns, min_ns, max_ns, bounds, counts)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
			ON CONFLICT (tenant_id, metric, bucket, node_id) DO UPDATE SET
				count = latency.count + EXCLUDED.count,
				sum_ns = latency.sum_ns + EXCLUDED.sum_ns,
				min_ns = least(latency.min_ns, EXCLUDED.min_ns),
				max_ns = greatest(latency.max_ns, EXCLUDED.max_ns),
				(bounds, counts) = (
					SELECT array_agg(b ORDER BY b), array_agg(c ORDER BY b)
					FROM (SELECT b, sum(c)::bigint AS c
						FROM (SELECT * FROM unnest(latency.bounds, latency.counts)
							UNION ALL SELECT * FROM unnest(EXCLUDED.bounds, EXCLUDED.counts)) AS u(b, c)
						GROUP BY b) AS g)`,
			d.TenantID, nodeID, bucket, l.Metric, int64(l.Count), int64(l.Sum), l.Min, l.Max, bounds, counts)
	}
}
