// Package lifecycle keeps the day-partitioned tables of spans, minute usage
// and minute latency (migration 00008): it creates each table's partitions
// ahead of time, rolls minute usage and latency up into hourly and daily
// tables, and enforces retention by dropping whole day partitions, never by
// a mass DELETE.
//
// One process at a time does it, under a Postgres advisory lock: the API
// runs a Lifecycle, and several API replicas take turns harmlessly (a run
// that finds the lock held does nothing).
//
//	table        partition column  retention (default)  rolled up into
//	spans        start             7 days               -
//	usage        bucket            35 days              usage_hourly, usage_daily
//	usage_drops  bucket            35 days              usage_drops_hourly, usage_drops_daily
//	latency      bucket            35 days              latency_hourly
//
// Partitions are T_pYYYYMMDD for the UTC day [YYYY-MM-DD, +1 day); T_default
// catches rows of any other day. A run, at start and then every Interval:
//
//  1. creates the partitions of today and the next DaysAhead days, moving
//     rows of those days out of the default partition first;
//  2. recomputes the rollups from the minute rows of each closed day not yet
//     in rollup_days and of the last two days (late flushes land there),
//     and the closed hours of today; each rollup row is replaced, never
//     added to, so running it again is harmless;
//  3. drops each partition whose whole day is older than its table's
//     retention, but a minute partition only when rollup_days holds its
//     day as rolled up after the day ended (else the run fails), recording
//     in retention.kept_from where the table's rows now begin; readers
//     answer from the rollups before that time. Rows in the default
//     partition older than kept_from (a flush more than the retention late)
//     are deleted: they can no longer be rolled up.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// LockKey is the Postgres advisory lock (pg_try_advisory_lock) a run holds.
const LockKey int64 = 0x62657274686c6331 // "berthlc1"

const day = 24 * time.Hour

// Config says how long rows are kept and how often a run happens.
type Config struct {
	SpansRetention time.Duration // spans; default 7 days
	UsageRetention time.Duration // minute usage, usage_drops, latency; default 35 days
	DaysAhead      int           // partitions made beyond today; default 3
	Interval       time.Duration // between runs; default 1h
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.SpansRetention <= 0 {
		c.SpansRetention = 7 * day
	}
	if c.UsageRetention <= 0 {
		c.UsageRetention = 35 * day
	}
	if c.DaysAhead <= 0 {
		c.DaysAhead = 3
	}
	if c.Interval <= 0 {
		c.Interval = time.Hour
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// table is one day-partitioned table.
type table struct {
	name, column string
	rolledUp     bool // minute rows rolled up before a partition may go
}

var tables = []table{
	{"spans", "start", false},
	{"usage", "bucket", true},
	{"usage_drops", "bucket", true},
	{"latency", "bucket", true},
}

func (c Config) retention(t table) time.Duration {
	if t.name == "spans" {
		return c.SpansRetention
	}
	return c.UsageRetention
}

// ErrNotRolledUp reports a minute partition that is past its retention but
// whose day has not been rolled up; it is kept.
var ErrNotRolledUp = errors.New("lifecycle: partition's day not rolled up")

// Lifecycle runs partition maintenance, rollups and retention.
type Lifecycle struct {
	pool *pgxpool.Pool
	cfg  Config
	log  *slog.Logger
}

// New returns a Lifecycle over pool; zero fields of cfg take their defaults.
func New(pool *pgxpool.Pool, cfg Config, log *slog.Logger) *Lifecycle {
	return &Lifecycle{pool: pool, cfg: cfg.withDefaults(), log: log}
}

// Report says what one run did.
type Report struct {
	Ran      bool        // false: another process held the lock, nothing was done
	Created  []string    // partitions created
	RolledUp []time.Time // closed days whose rollups were (re)computed
	Dropped  []string    // partitions dropped
}

// Run does a run now and then every Interval until ctx is done; a failed
// run is logged and the next one tries again.
func (l *Lifecycle) Run(ctx context.Context) {
	t := time.NewTicker(l.cfg.Interval)
	defer t.Stop()
	for {
		r, err := l.Once(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			l.log.Error("data lifecycle run failed", "err", err)
		case r.Ran:
			l.log.Info("data lifecycle run", "created", r.Created, "rolled_up_days", len(r.RolledUp), "dropped", r.Dropped)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Once does one run, unless another process holds the lock.
func (l *Lifecycle) Once(ctx context.Context) (Report, error) {
	var r Report
	c, err := l.pool.Acquire(ctx)
	if err != nil {
		return r, fmt.Errorf("lifecycle: acquire: %w", err)
	}
	defer c.Release()
	if err := c.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, LockKey).Scan(&r.Ran); err != nil {
		return r, fmt.Errorf("lifecycle: lock: %w", err)
	}
	if !r.Ran {
		return r, nil
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := c.Exec(uctx, `SELECT pg_advisory_unlock($1)`, LockKey); err != nil {
			// Closing the session is what frees a lock it still holds.
			_ = c.Conn().Close(uctx)
		}
	}()
	conn := c.Conn()
	now := l.cfg.Now().UTC()
	today := now.Truncate(day)

	parts := map[string][]time.Time{}
	for _, t := range tables {
		if parts[t.name], err = partitions(ctx, conn, t); err != nil {
			return r, err
		}
	}
	// 1. Partitions ahead.
	for _, t := range tables {
		for i := 0; i <= l.cfg.DaysAhead; i++ {
			d := today.AddDate(0, 0, i)
			if slices.ContainsFunc(parts[t.name], d.Equal) {
				continue
			}
			if err := createPartition(ctx, conn, t, d); err != nil {
				return r, err
			}
			parts[t.name] = append(parts[t.name], d)
			r.Created = append(r.Created, partitionName(t, d))
		}
	}
	// 2. Rollups.
	kept, err := keptFrom(ctx, conn)
	if err != nil {
		return r, err
	}
	days, err := daysToRollUp(ctx, conn, parts, kept, today)
	if err != nil {
		return r, err
	}
	for _, d := range days {
		if err := rollUpDay(ctx, conn, d, now, kept); err != nil {
			return r, err
		}
		if !d.Equal(today) {
			r.RolledUp = append(r.RolledUp, d)
		}
	}
	// 3. Retention.
	var errs []error
	for _, t := range tables {
		cutoff := now.Add(-l.cfg.retention(t))
		for _, d := range parts[t.name] {
			if d.Add(day).After(cutoff) {
				continue
			}
			if err := dropPartition(ctx, conn, t, d); err != nil {
				errs = append(errs, err)
				continue
			}
			r.Dropped = append(r.Dropped, partitionName(t, d))
		}
		if err := deleteStale(ctx, conn, t); err != nil {
			errs = append(errs, err)
		}
	}
	return r, errors.Join(errs...)
}

func partitionName(t table, d time.Time) string { return t.name + "_p" + d.Format("20060102") }

// partitions lists the days of t's day partitions.
func partitions(ctx context.Context, conn *pgx.Conn, t table) ([]time.Time, error) {
	rows, err := conn.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass`, t.name)
	if err != nil {
		return nil, fmt.Errorf("lifecycle: partitions of %s: %w", t.name, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("lifecycle: partitions of %s: %w", t.name, err)
	}
	var days []time.Time
	for _, n := range names {
		s, ok := strings.CutPrefix(n, t.name+"_p")
		if !ok {
			continue // the default partition
		}
		if d, err := time.Parse("20060102", s); err == nil {
			days = append(days, d)
		}
	}
	slices.SortFunc(days, time.Time.Compare)
	return days, nil
}

// createPartition makes t's partition for day d, first moving d's rows
// out of the default partition (a partition cannot be made while the
// default one holds rows of its range). Writers wait for the few
// milliseconds it takes.
func createPartition(ctx context.Context, conn *pgx.Conn, t table, d time.Time) error {
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		id := pgx.Identifier{t.name}.Sanitize()
		def := pgx.Identifier{t.name + "_default"}.Sanitize()
		col := pgx.Identifier{t.column}.Sanitize()
		stmts := []string{
			`SET LOCAL lock_timeout = '10s'`,
			`LOCK TABLE ` + id + ` IN SHARE ROW EXCLUSIVE MODE`,
			`CREATE TEMP TABLE lifecycle_stray ON COMMIT DROP AS
				WITH moved AS (DELETE FROM ` + def + ` WHERE ` + col + ` >= $1 AND ` + col + ` < $2 RETURNING *)
				SELECT * FROM moved`,
			`CREATE TABLE ` + pgx.Identifier{partitionName(t, d)}.Sanitize() + ` PARTITION OF ` + id +
				` FOR VALUES FROM ('` + d.Format(time.RFC3339) + `') TO ('` + d.Add(day).Format(time.RFC3339) + `')`,
			`INSERT INTO ` + id + ` SELECT * FROM lifecycle_stray`,
		}
		for _, s := range stmts {
			var args []any
			if strings.Contains(s, "$1") {
				args = []any{d, d.Add(day)}
			}
			if _, err := tx.Exec(ctx, s, args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("lifecycle: create %s: %w", partitionName(t, d), err)
	}
	return nil
}

// keptFrom reads, per table, where its rows begin after earlier drops
// (the zero time when nothing was dropped).
func keptFrom(ctx context.Context, conn *pgx.Conn) (map[string]time.Time, error) {
	rows, err := conn.Query(ctx, `SELECT table_name, kept_from FROM retention`)
	if err != nil {
		return nil, fmt.Errorf("lifecycle: retention: %w", err)
	}
	kept := map[string]time.Time{}
	var name string
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&name, &at}, func() error { kept[name] = at.UTC(); return nil })
	if err != nil {
		return nil, fmt.Errorf("lifecycle: retention: %w", err)
	}
	return kept, nil
}

// daysToRollUp lists, oldest first: every closed day with minute rows (in
// a day partition or the default one) not yet in rollup_days, the last two
// closed days, and today.
func daysToRollUp(ctx context.Context, conn *pgx.Conn, parts map[string][]time.Time, kept map[string]time.Time, today time.Time) ([]time.Time, error) {
	set := map[time.Time]bool{today: true, today.Add(-day): true, today.Add(-2 * day): true}
	for _, t := range tables {
		if !t.rolledUp {
			continue
		}
		for _, d := range parts[t.name] {
			if d.Before(today) {
				set[d] = true
			}
		}
		rows, err := conn.Query(ctx, `SELECT DISTINCT date_trunc('day', `+t.column+`, 'UTC') FROM `+
			pgx.Identifier{t.name + "_default"}.Sanitize()+` WHERE `+t.column+` < $1`, today)
		if err != nil {
			return nil, fmt.Errorf("lifecycle: days in %s_default: %w", t.name, err)
		}
		ds, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
		if err != nil {
			return nil, fmt.Errorf("lifecycle: days in %s_default: %w", t.name, err)
		}
		for _, d := range ds {
			set[d.UTC()] = true
		}
	}
	rows, err := conn.Query(ctx, `SELECT day FROM rollup_days WHERE rolled_at >= (day + 1)::timestamp AT TIME ZONE 'UTC'`)
	if err != nil {
		return nil, fmt.Errorf("lifecycle: rollup days: %w", err)
	}
	done, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		return nil, fmt.Errorf("lifecycle: rollup days: %w", err)
	}
	for _, d := range done {
		if d := d.UTC(); d.Before(today.Add(-2 * day)) {
			delete(set, d)
		}
	}
	var days []time.Time
	for d := range set {
		// A day before every table's kept_from has nothing left to roll up.
		live := false
		for _, t := range tables {
			if t.rolledUp && !d.Before(kept[t.name]) {
				live = true
			}
		}
		if live {
			days = append(days, d)
		}
	}
	slices.SortFunc(days, time.Time.Compare)
	return days, nil
}
