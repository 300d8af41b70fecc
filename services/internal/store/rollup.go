package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// Minute rows of usage, usage_drops and latency are kept for a retention
// (35 days by default) and then dropped a whole day partition at a time by
// the API's lifecycle (services/internal/lifecycle), which first rolls
// them up into hourly and daily tables. The retention table says, per
// minute table, where its rows now begin (kept_from, a UTC midnight).
//
// A series whose step is a whole number of hours reads the rollups for the
// part of its range before kept_from and the minute rows from there on:
// usage_daily and usage_drops_daily when the step is whole days, else
// usage_hourly, usage_drops_hourly and latency_hourly (latency has no daily
// rollup). Steps are epoch-aligned, so each step lies wholly before or
// after kept_from's hours. Answers are the same as from the minute rows,
// except the account-wide stored_bytes, which before kept_from is the sum
// of each tenant's largest per-minute total rather than the largest sum.
// Other steps read minute rows only: before kept_from they are zero.

// rollupSource names the rollup table and its time column a series of
// step over minute table reads before kept_from; ok false when the step
// reads minute rows only.
func rollupSource(table string, step time.Duration) (name, column string, ok bool) {
	switch {
	case step%(24*time.Hour) == 0 && table != "latency":
		return table + "_daily", "day", true
	case step%time.Hour == 0:
		return table + "_hourly", "hour", true
	}
	return "", "", false
}

// keptFrom returns where the minute table's rows begin after retention
// dropped older ones: the zero time when none were dropped.
func (s *Store) keptFrom(ctx context.Context, table string) (time.Time, error) {
	var at time.Time
	err := s.pool.QueryRow(ctx, `SELECT kept_from FROM retention WHERE table_name = $1`, table).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, nil
	}
	return at, err
}

// seriesSource is the FROM item (aliased src) of a series over minute
// table with step, between the placeholders from and to, whose kept_from
// is the placeholder kept: the rows' tenant_id, their time as bucket, then
// columns. Minute rows from kept_from on; rollup rows before it when the
// step reads rollups.
func seriesSource(table string, step time.Duration, columns, from, to, kept string) string {
	from, to, kept = from+"::timestamptz", to+"::timestamptz", kept+"::timestamptz"
	minute := `SELECT tenant_id, bucket, ` + columns + ` FROM ` + table +
		` WHERE bucket >= greatest(` + from + `, ` + kept + `) AND bucket < ` + to
	name, col, ok := rollupSource(table, step)
	if !ok {
		return `(` + minute + `) AS src`
	}
	return `(` + minute + ` UNION ALL SELECT tenant_id, ` + col + ` AS bucket, ` + columns + ` FROM ` + name +
		` WHERE ` + col + ` >= ` + from + ` AND ` + col + ` < least(` + to + `, ` + kept + `)) AS src`
}

// seriesKeptFrom is the $6 of a seriesSource: table's kept_from when the
// step reads rollups, else the zero time (all minute rows that exist).
func (s *Store) seriesKeptFrom(ctx context.Context, table string, step time.Duration) (time.Time, error) {
	if _, _, ok := rollupSource(table, step); !ok {
		return time.Time{}, nil
	}
	return s.keptFrom(ctx, table)
}
