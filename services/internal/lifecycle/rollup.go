package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Rollup statements. Each recomputes its rows from the minute rows of
// [$1, $2) and replaces what was there (ON CONFLICT … = EXCLUDED), so a
// second run writes the same values. Counters are sums over nodes and
// minutes; stored_bytes is a level: the largest per-minute total over the
// tenant's nodes. The daily rows are computed from the hourly ones of the
// same day, just recomputed, which is exact for sums and for a maximum.
const (
	usageHourly = `
		INSERT INTO usage_hourly (tenant_id, hour, messages_in, messages_out, bytes_in, bytes_out, connection_seconds, stored_bytes, messages_accepted)
		SELECT tenant_id, date_trunc('hour', bucket, 'UTC'), sum(mi), sum(mo), sum(bi), sum(bo), sum(cs), max(sb), sum(ma)
		FROM (SELECT tenant_id, bucket, sum(messages_in) AS mi, sum(messages_out) AS mo, sum(bytes_in) AS bi,
		             sum(bytes_out) AS bo, sum(connection_seconds) AS cs, sum(stored_bytes) AS sb, sum(messages_accepted) AS ma
		      FROM usage WHERE bucket >= $1 AND bucket < $2 GROUP BY 1, 2) AS per_minute
		GROUP BY 1, 2
		ON CONFLICT (tenant_id, hour) DO UPDATE SET
			messages_in = EXCLUDED.messages_in, messages_accepted = EXCLUDED.messages_accepted, messages_out = EXCLUDED.messages_out,
			bytes_in = EXCLUDED.bytes_in, bytes_out = EXCLUDED.bytes_out,
			connection_seconds = EXCLUDED.connection_seconds, stored_bytes = EXCLUDED.stored_bytes`
	usageDaily = `
		INSERT INTO usage_daily (tenant_id, day, messages_in, messages_out, bytes_in, bytes_out, connection_seconds, stored_bytes, messages_accepted)
		SELECT tenant_id, $1, sum(messages_in), sum(messages_out), sum(bytes_in), sum(bytes_out), sum(connection_seconds), max(stored_bytes),
		       sum(messages_accepted)
		FROM usage_hourly WHERE hour >= $1 AND hour < $2 GROUP BY 1
		ON CONFLICT (tenant_id, day) DO UPDATE SET
			messages_in = EXCLUDED.messages_in, messages_accepted = EXCLUDED.messages_accepted, messages_out = EXCLUDED.messages_out,
			bytes_in = EXCLUDED.bytes_in, bytes_out = EXCLUDED.bytes_out,
			connection_seconds = EXCLUDED.connection_seconds, stored_bytes = EXCLUDED.stored_bytes`
	dropsHourly = `
		INSERT INTO usage_drops_hourly (tenant_id, hour, reason, count)
		SELECT tenant_id, date_trunc('hour', bucket, 'UTC'), reason, sum(count)
		FROM usage_drops WHERE bucket >= $1 AND bucket < $2 GROUP BY 1, 2, 3
		ON CONFLICT (tenant_id, hour, reason) DO UPDATE SET count = EXCLUDED.count`
	dropsDaily = `
		INSERT INTO usage_drops_daily (tenant_id, day, reason, count)
		SELECT tenant_id, $1, reason, sum(count)
		FROM usage_drops_hourly WHERE hour >= $1 AND hour < $2 GROUP BY 1, 3
		ON CONFLICT (tenant_id, day, reason) DO UPDATE SET count = EXCLUDED.count`
	// Histograms merge by adding counts bound by bound, as the API does.
	latencyHourly = `
		INSERT INTO latency_hourly (tenant_id, metric, hour, count, sum_ns, min_ns, max_ns, bounds, counts)
		SELECT a.tenant_id, a.metric, a.hour, a.n, a.sum_ns, a.min_ns, a.max_ns,
		       coalesce(h.bounds, '{}'), coalesce(h.counts, '{}')
		FROM (SELECT tenant_id, metric, date_trunc('hour', bucket, 'UTC') AS hour, sum(count) AS n,
		             sum(sum_ns) AS sum_ns, min(min_ns) AS min_ns, max(max_ns) AS max_ns
		      FROM latency WHERE bucket >= $1 AND bucket < $2 GROUP BY 1, 2, 3) AS a
		LEFT JOIN (
			SELECT tenant_id, metric, hour, array_agg(b ORDER BY b) AS bounds, array_agg(c ORDER BY b) AS counts
			FROM (SELECT l.tenant_id, l.metric, date_trunc('hour', l.bucket, 'UTC') AS hour, u.b, sum(u.c)::bigint AS c
			      FROM latency AS l, unnest(l.bounds, l.counts) AS u(b, c)
			      WHERE l.bucket >= $1 AND l.bucket < $2 GROUP BY 1, 2, 3, 4) AS g
			GROUP BY 1, 2, 3) AS h USING (tenant_id, metric, hour)
		ON CONFLICT (tenant_id, metric, hour) DO UPDATE SET
			count = EXCLUDED.count, sum_ns = EXCLUDED.sum_ns, min_ns = EXCLUDED.min_ns, max_ns = EXCLUDED.max_ns,
			bounds = EXCLUDED.bounds, counts = EXCLUDED.counts`
)

// rollUpDay recomputes day d's rollups in one transaction: the hourly rows
// of its closed hours (before now's hour) and, once the day has ended, its
// daily rows and its rollup_days mark. A table whose rows before kept_from
// were dropped is not rolled up there: its rollups are final.
func rollUpDay(ctx context.Context, conn *pgx.Conn, d, now time.Time, kept map[string]time.Time) error {
	end := d.Add(day)
	if h := now.Truncate(time.Hour); h.Before(end) {
		end = h
	}
	if !end.After(d) {
		return nil
	}
	closed := !d.Add(day).After(now)
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		steps := []struct {
			table string
			sql   string
			daily bool
		}{
			{"usage", usageHourly, false}, {"usage", usageDaily, true},
			{"usage_drops", dropsHourly, false}, {"usage_drops", dropsDaily, true},
			{"latency", latencyHourly, false},
		}
		for _, s := range steps {
			if d.Before(kept[s.table]) || (s.daily && !closed) {
				continue
			}
			if _, err := tx.Exec(ctx, s.sql, d, end); err != nil {
				return fmt.Errorf("%s: %w", s.table, err)
			}
		}
		if !closed {
			return nil
		}
		_, err := tx.Exec(ctx, `INSERT INTO rollup_days (day, rolled_at) VALUES ($1, $2)
			ON CONFLICT (day) DO UPDATE SET rolled_at = EXCLUDED.rolled_at`, d, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("lifecycle: roll up %s: %w", d.Format(time.DateOnly), err)
	}
	return nil
}

// dropPartition drops t's partition of day d and moves t's kept_from past
// it, in one transaction. A minute partition whose day is not rolled up
// (after the day ended) is kept: ErrNotRolledUp.
func dropPartition(ctx context.Context, conn *pgx.Conn, t table, d time.Time) error {
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if t.rolledUp {
			var ok bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM rollup_days WHERE day = $1 AND rolled_at >= $2)`,
				d, d.Add(day)).Scan(&ok); err != nil {
				return err
			}
			if !ok {
				return ErrNotRolledUp
			}
		}
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '10s'`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DROP TABLE `+pgx.Identifier{partitionName(t, d)}.Sanitize()); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO retention (table_name, kept_from) VALUES ($1, $2)
			ON CONFLICT (table_name) DO UPDATE SET kept_from = greatest(retention.kept_from, EXCLUDED.kept_from)`,
			t.name, d.Add(day))
		return err
	})
	if err != nil {
		if errors.Is(err, ErrNotRolledUp) {
			return fmt.Errorf("lifecycle: keep %s: %w", partitionName(t, d), err)
		}
		return fmt.Errorf("lifecycle: drop %s: %w", partitionName(t, d), err)
	}
	return nil
}

// deleteStale deletes the rows of t's default partition older than t's
// kept_from: rows that came more than the retention late, which the
// rollups (final before kept_from) can no longer take in. The default
// partition holds only rows outside the days made, normally none.
func deleteStale(ctx context.Context, conn *pgx.Conn, t table) error {
	_, err := conn.Exec(ctx, `DELETE FROM `+pgx.Identifier{t.name + "_default"}.Sanitize()+` WHERE `+
		pgx.Identifier{t.column}.Sanitize()+` < (SELECT kept_from FROM retention WHERE table_name = $1)`, t.name)
	if err != nil {
		return fmt.Errorf("lifecycle: stale rows of %s_default: %w", t.name, err)
	}
	return nil
}
