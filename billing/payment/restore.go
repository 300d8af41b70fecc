package payment

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"berth.dev/billing/plan"
	"berth.dev/quotas"
)

// snapshotQuotas keeps the quotas of accountID's tenants as they are, in
// tx, before the end of a payment grace caps them (quota_snapshots): what
// RestoreTenants gives back once the account pays. A tenant already
// snapshotted keeps its first snapshot.
func snapshotQuotas(ctx context.Context, tx pgx.Tx, accountID string) error {
	_, err := tx.Exec(ctx, `INSERT INTO quota_snapshots (tenant_id, account_id, quotas)
		SELECT q.tenant_id, t.account_id, to_jsonb(q) - 'tenant_id' - 'updated_at'
		FROM quotas q JOIN tenants t ON t.id = q.tenant_id WHERE t.account_id = $1
		ON CONFLICT (tenant_id) DO NOTHING`, accountID)
	return err
}

// RestoreTenants gives accountID's tenants capped at the end of a payment
// grace their quotas back, in tx: each quota the larger of its current
// value and its value before the cap (the plan's default for one the
// snapshot lacks), within the tenant's current plan's bounds, and never
// lower than it is. While a budget cap is in force this month (the
// account's own choice, docs/billing.md "Budgets") the free plan's bounds
// stay. Each tenant restored is announced on berth_quotas, so nodes apply
// it live. It returns the tenants restored.
func RestoreTenants(ctx context.Context, tx pgx.Tx, accountID string) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT s.tenant_id, t.plan, s.quotas FROM quota_snapshots s JOIN tenants t ON t.id = s.tenant_id
		WHERE s.account_id = $1 ORDER BY s.tenant_id FOR UPDATE OF s`, accountID)
	if err != nil {
		return nil, err
	}
	type snap struct {
		tenant, plan string
		raw          []byte
	}
	snaps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (snap, error) {
		var s snap
		return s, r.Scan(&s.tenant, &s.plan, &s.raw)
	})
	if err != nil || len(snaps) == 0 {
		return nil, err
	}
	var budgetCapped bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM budget_notifications WHERE account_id = $1 AND capped
		AND month = date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')`, accountID).Scan(&budgetCapped); err != nil {
		return nil, err
	}
	free, err := plan.Lookup("free")
	if err != nil {
		return nil, err
	}
	names := make([]string, len(quotas.Fields))
	for i, f := range quotas.Fields {
		names[i] = f.Name
	}
	var restored []string
	for _, s := range snaps {
		p, err := plan.Lookup(s.plan)
		if err != nil {
			return nil, fmt.Errorf("payment: restore %s: %w", s.tenant, err)
		}
		var before quotas.Quotas
		if err := json.Unmarshal(s.raw, &before); err != nil {
			return nil, fmt.Errorf("payment: snapshot of %s: %w", s.tenant, err)
		}
		var cur quotas.Quotas
		dest := make([]any, len(quotas.Fields))
		for i, f := range quotas.Fields {
			dest[i] = f.Get(&cur)
		}
		if err := tx.QueryRow(ctx, `SELECT `+strings.Join(names, ", ")+` FROM quotas WHERE tenant_id = $1 FOR UPDATE`, s.tenant).
			Scan(dest...); err != nil {
			return nil, fmt.Errorf("payment: quotas of %s: %w", s.tenant, err)
		}
		set := make([]string, 0, len(quotas.Fields)+1)
		args := []any{s.tenant}
		for _, f := range quotas.Fields {
			target := *f.Get(&before)
			if target <= 0 {
				target = *f.Get(&p.Defaults)
			}
			limit := *f.Get(&p.Max)
			if budgetCapped {
				limit = min(limit, *f.Get(&free.Max))
			}
			args = append(args, max(*f.Get(&cur), min(target, limit)))
			set = append(set, fmt.Sprintf("%s = $%d", f.Name, len(args)))
		}
		set = append(set, "updated_at = now()")
		if _, err := tx.Exec(ctx, `UPDATE quotas SET `+strings.Join(set, ", ")+` WHERE tenant_id = $1`, args...); err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_notify('berth_quotas', $1)`, s.tenant); err != nil {
			return nil, err
		}
		restored = append(restored, s.tenant)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM quota_snapshots WHERE account_id = $1`, accountID); err != nil {
		return nil, err
	}
	return restored, nil
}
