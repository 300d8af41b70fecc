// Package metering is the billing worker's work: it rolls the nodes' usage
// into monthly meters per tenant (and per account, their sum) and keeps
// each account's invoice for each UTC month: a draft recomputed while the
// month runs, finalized once the month has ended (after a grace for late
// flushes) into a numbered, immutable invoice. What amends an issued
// invoice is a new document: a correction for usage that landed after it
// (corrections.go), a credit note an operator issues (credit.go).
//
// Exactness. The minute rows of usage are the source (the nodes' flushes
// are idempotent transactions; see broker/internal/usage); the messages
// meter is their messages_accepted, never messages_in, which also counts
// the PUBLISHes a node refused. An account's
// month is billed in one transaction that recomputes its tenants' meters
// from the source rows in a single statement (one snapshot: a concurrent
// flush is either wholly in it or wholly out), replaces the meter rows and
// the draft's lines, and commits. Nothing is ever added to a meter, so a
// run repeated, run concurrently or killed mid-transaction (rolled back)
// leaves the same rows as one clean run. Minute rows older than the
// retention's kept_from are gone; there the hourly rollups (usage_hourly,
// the API lifecycle's) stand in: exact for counters, and for storage each
// hour counts its largest per-minute level for the whole hour.
package metering

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/billing/invoice"
	"berth.dev/billing/plan"
)

// meterMonth recomputes the meters of account's tenants for [$2, $3), one
// row per plan period (tenant_plan_periods) within the month, and returns
// them. A period's boundaries are truncated to the whole second and clamped
// to the month; its active seconds are its length (an open period runs to
// the month's end). Usage goes to the period in effect at its bucket's
// start, the first period of a tenant's month also taking the buckets
// before it and the last those after it (late flushes of a deleted tenant),
// so every usage row of the month lands in exactly one period. $4 is
// usage's kept_from. It runs after the month's rows of the account are
// deleted (the periods may have changed since the last run).
const meterMonth = `
WITH ts AS (
	SELECT id, slug FROM tenants WHERE account_id = $1
	UNION ALL
	SELECT id, slug FROM deleted_tenants WHERE account_id = $1
), p0 AS (
	SELECT pp.tenant_id, ts.slug, pp.plan,
	       greatest(date_trunc('second', pp.starts_at), $2) AS s,
	       least(date_trunc('second', coalesce(pp.ends_at, $3)), $3) AS e
	FROM tenant_plan_periods pp JOIN ts ON ts.id = pp.tenant_id
	WHERE pp.account_id = $1 AND pp.starts_at < $3 AND coalesce(pp.ends_at, 'infinity') > $2
), p AS (
	SELECT p0.*,
	       CASE WHEN lag(s) OVER w IS NULL THEN $2 ELSE s END AS lo,
	       coalesce(lead(s) OVER w, $3) AS hi
	FROM p0 WINDOW w AS (PARTITION BY tenant_id ORDER BY s)
), u AS (
	SELECT p.tenant_id, p.s, sum(x.messages_accepted) AS mi, sum(x.connection_seconds) AS cs,
	       sum(x.stored_bytes::numeric * 60) AS sbs, sum(x.bytes_in::numeric + x.bytes_out) AS tb
	FROM p JOIN usage x ON x.tenant_id = p.tenant_id AND x.bucket >= greatest(p.lo, $4) AND x.bucket < p.hi
	GROUP BY 1, 2
	UNION ALL
	SELECT p.tenant_id, p.s, sum(h.messages_accepted), sum(h.connection_seconds),
	       sum(h.stored_bytes::numeric * 3600), sum(h.bytes_in::numeric + h.bytes_out)
	FROM p JOIN usage_hourly h ON h.tenant_id = p.tenant_id AND h.hour >= p.lo AND h.hour < least(p.hi, $4)
	GROUP BY 1, 2
)
INSERT INTO billing_meters (tenant_id, month, period_start, account_id, tenant_slug, plan, active_seconds,
	messages, connection_seconds, stored_byte_seconds, transfer_bytes, computed_at)
SELECT p.tenant_id, $2, p.s, $1, p.slug, p.plan, extract(epoch FROM p.e - p.s)::bigint,
	coalesce(sum(u.mi), 0)::bigint, coalesce(sum(u.cs), 0)::bigint,
	coalesce(sum(u.sbs), 0)::bigint, coalesce(sum(u.tb), 0)::bigint, $5
FROM p LEFT JOIN u ON u.tenant_id = p.tenant_id AND u.s = p.s
GROUP BY p.tenant_id, p.s, p.e, p.slug, p.plan
RETURNING tenant_id, tenant_slug, plan, period_start, active_seconds, messages, connection_seconds, stored_byte_seconds, transfer_bytes`

// keptFrom is where usage's minute rows begin (-infinity: none dropped).
func keptFrom(ctx context.Context, tx pgx.Tx) (time.Time, error) {
	var at time.Time
	err := tx.QueryRow(ctx, `SELECT kept_from FROM retention WHERE table_name = 'usage'`).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), nil
	}
	return at, err
}

// Meter recomputes and returns the month's meters of account's tenants,
// one per plan period, within tx, stamped computed at now.
func Meter(ctx context.Context, tx pgx.Tx, account string, month, now time.Time) ([]invoice.TenantUsage, error) {
	kept, err := keptFrom(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("metering: kept_from: %w", err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM billing_meters WHERE account_id = $1 AND month = $2`, account, month); err != nil {
		return nil, fmt.Errorf("metering: meter %s %s: %w", account, month.Format("2006-01"), err)
	}
	rows, err := tx.Query(ctx, meterMonth, account, month, month.AddDate(0, 1, 0), kept, now)
	if err != nil {
		return nil, fmt.Errorf("metering: meter %s %s: %w", account, month.Format("2006-01"), err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (invoice.TenantUsage, error) {
		var (
			t              invoice.TenantUsage
			mi, cs, sb, tb int64
		)
		err := row.Scan(&t.TenantID, &t.Slug, &t.Plan, &t.PeriodStart, &t.ActiveSeconds, &mi, &cs, &sb, &tb)
		t.Usage = map[plan.Meter]int64{plan.Messages: mi, plan.ConnectionTime: cs, plan.Storage: sb, plan.Transfer: tb}
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("metering: meter %s %s: %w", account, month.Format("2006-01"), err)
	}
	return out, nil
}
