package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/billing/plan"
)

func quotaArgs(tid string, q *plan.Quotas) []any {
	args := []any{tid}
	for _, f := range plan.Fields {
		args = append(args, *f.Get(q))
	}
	return args
}

func insertQuotas(ctx context.Context, q querier, tid string, qs plan.Quotas) error {
	ph := make([]string, len(plan.Fields)+1)
	for i := range ph {
		ph[i] = fmt.Sprintf("$%d", i+1)
	}
	_, err := q.Exec(ctx,
		`INSERT INTO quotas (tenant_id, `+quotaColumns+`) VALUES (`+strings.Join(ph, ", ")+`)`,
		quotaArgs(tid, &qs)...)
	return err
}

func updateQuotas(ctx context.Context, q querier, tid string, qs plan.Quotas) (time.Time, error) {
	sets := make([]string, len(plan.Fields))
	for i, f := range plan.Fields {
		sets[i] = fmt.Sprintf("%s = $%d", f.Name, i+2)
	}
	var updated time.Time
	err := q.QueryRow(ctx,
		`UPDATE quotas SET `+strings.Join(sets, ", ")+`, updated_at = now() WHERE tenant_id = $1 RETURNING updated_at`,
		quotaArgs(tid, &qs)...).Scan(&updated)
	if err != nil {
		return updated, err
	}
	return updated, notify(ctx, q, ChannelQuotas, tid)
}

func quotas(ctx context.Context, q querier, tid string) (plan.Quotas, time.Time, error) {
	var qs plan.Quotas
	var updated time.Time
	dest := make([]any, 0, len(plan.Fields)+1)
	for _, f := range plan.Fields {
		dest = append(dest, f.Get(&qs))
	}
	dest = append(dest, &updated)
	err := q.QueryRow(ctx, `SELECT `+quotaColumns+`, updated_at FROM quotas WHERE tenant_id = $1`, tid).Scan(dest...)
	return qs, updated, err
}

// Quotas returns a tenant's live quotas and when they last changed.
func (s *Store) Quotas(ctx context.Context, tid string) (plan.Quotas, time.Time, error) {
	q, updated, err := quotas(ctx, s.pool, tid)
	return q, updated, classify("quotas", err)
}

// SetQuotas replaces a tenant's quotas and announces the change on
// berth_quotas in the same transaction. The caller checks plan bounds.
func (s *Store) SetQuotas(ctx context.Context, tid string, q plan.Quotas) (time.Time, error) {
	var updated time.Time
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		updated, err = updateQuotas(ctx, tx, tid, q)
		return err
	})
	return updated, classify("set quotas", err)
}
