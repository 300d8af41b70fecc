// Package metering is the billing worker's work: it rolls the nodes' usage
// into monthly meters per tenant (and per account, their sum) and keeps
// each account's invoice for each UTC month: a draft recomputed while the
// month runs, finalized once the month has ended (after a grace for late
// flushes) into a numbered, immutable invoice.
//
// Exactness. The minute rows of usage are the source (the nodes' flushes
// are idempotent transactions; see broker/internal/usage). An account's
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

// meterMonth recomputes the meters of account's tenants for [$2, $3) and
// returns them. Tenants billed: live ones created before the month's end
// and deleted ones that existed within it; a tenant's active seconds are
// its existence within the month, whole seconds. $4 is usage's kept_from.
const meterMonth = `
WITH ts AS (
	SELECT id, slug, plan, created_at, NULL::timestamptz AS deleted_at
	FROM tenants WHERE account_id = $1 AND created_at < $3
	UNION ALL
	SELECT id, slug, coalesce(plan, 'free'), created_at, deleted_at
	FROM deleted_tenants WHERE account_id = $1 AND created_at < $3 AND deleted_at >= $2
), u AS (
	SELECT tenant_id, sum(messages_in) AS mi, sum(connection_seconds) AS cs,
	       sum(stored_bytes::numeric * 60) AS sbs, sum(bytes_in::numeric + bytes_out) AS tb
	FROM usage WHERE tenant_id IN (SELECT id FROM ts) AND bucket >= greatest($2, $4) AND bucket < $3
	GROUP BY 1
	UNION ALL
	SELECT tenant_id, sum(messages_in), sum(connection_seconds),
	       sum(stored_bytes::numeric * 3600), sum(bytes_in::numeric + bytes_out)
	FROM usage_hourly WHERE tenant_id IN (SELECT id FROM ts) AND hour >= $2 AND hour < least($3, $4)
	GROUP BY 1
)
INSERT INTO billing_meters (tenant_id, month, account_id, tenant_slug, plan, active_seconds,
	messages, connection_seconds, stored_byte_seconds, transfer_bytes, computed_at)
SELECT ts.id, $2, $1, ts.slug, ts.plan,
	floor(extract(epoch FROM least(coalesce(ts.deleted_at, $3), $3) - greatest(ts.created_at, $2)))::bigint,
	coalesce(sum(u.mi), 0)::bigint, coalesce(sum(u.cs), 0)::bigint,
	coalesce(sum(u.sbs), 0)::bigint, coalesce(sum(u.tb), 0)::bigint, $5
FROM ts LEFT JOIN u ON u.tenant_id = ts.id
GROUP BY ts.id, ts.slug, ts.plan, ts.created_at, ts.deleted_at
ON CONFLICT (tenant_id, month) DO UPDATE SET
	account_id = EXCLUDED.account_id, tenant_slug = EXCLUDED.tenant_slug, plan = EXCLUDED.plan,
	active_seconds = EXCLUDED.active_seconds, messages = EXCLUDED.messages,
	connection_seconds = EXCLUDED.connection_seconds, stored_byte_seconds = EXCLUDED.stored_byte_seconds,
	transfer_bytes = EXCLUDED.transfer_bytes, computed_at = EXCLUDED.computed_at
RETURNING tenant_id, tenant_slug, plan, active_seconds, messages, connection_seconds, stored_byte_seconds, transfer_bytes`

// keptFrom is where usage's minute rows begin (-infinity: none dropped).
func keptFrom(ctx context.Context, tx pgx.Tx) (time.Time, error) {
	var at time.Time
	err := tx.QueryRow(ctx, `SELECT kept_from FROM retention WHERE table_name = 'usage'`).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), nil
	}
	return at, err
}

// Meter recomputes and returns the month's meters of account's tenants
// within tx, stamped computed at now.
func Meter(ctx context.Context, tx pgx.Tx, account string, month, now time.Time) ([]invoice.TenantUsage, error) {
	kept, err := keptFrom(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("metering: kept_from: %w", err)
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
		err := row.Scan(&t.TenantID, &t.Slug, &t.Plan, &t.ActiveSeconds, &mi, &cs, &sb, &tb)
		t.Usage = map[plan.Meter]int64{plan.Messages: mi, plan.ConnectionTime: cs, plan.Storage: sb, plan.Transfer: tb}
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("metering: meter %s %s: %w", account, month.Format("2006-01"), err)
	}
	return out, nil
}
