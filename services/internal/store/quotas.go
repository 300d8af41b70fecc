package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/quotas"
)

func quotaArgs(tid string, q *quotas.Quotas) []any {
	args := []any{tid}
	for _, f := range quotas.Fields {
		args = append(args, *f.Get(q))
	}
	return args
}

func insertQuotas(ctx context.Context, q querier, tid string, qs quotas.Quotas) error {
	ph := make([]string, len(quotas.Fields)+1)
	for i := range ph {
		ph[i] = fmt.Sprintf("$%d", i+1)
	}
	_, err := q.Exec(ctx,
		`INSERT INTO quotas (tenant_id, `+quotaColumns+`) VALUES (`+strings.Join(ph, ", ")+`)`,
		quotaArgs(tid, &qs)...)
	return err
}

func updateQuotas(ctx context.Context, q querier, tid string, qs quotas.Quotas) (time.Time, error) {
	sets := make([]string, len(quotas.Fields))
	for i, f := range quotas.Fields {
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

func readQuotas(ctx context.Context, q querier, tid string) (quotas.Quotas, time.Time, error) {
	var qs quotas.Quotas
	var updated time.Time
	dest := make([]any, 0, len(quotas.Fields)+1)
	for _, f := range quotas.Fields {
		dest = append(dest, f.Get(&qs))
	}
	dest = append(dest, &updated)
	err := q.QueryRow(ctx, `SELECT `+quotaColumns+`, updated_at FROM quotas WHERE tenant_id = $1`, tid).Scan(dest...)
	return qs, updated, err
}

// Quotas returns a tenant's live quotas and when they last changed.
func (s *Store) Quotas(ctx context.Context, tid string) (quotas.Quotas, time.Time, error) {
	q, updated, err := readQuotas(ctx, s.pool, tid)
	return q, updated, classify("quotas", err)
}

// SetQuotas replaces a tenant's quotas and announces the change on
// berth_quotas in the same transaction. The caller checks plan bounds.
func (s *Store) SetQuotas(ctx context.Context, tid string, q quotas.Quotas) (time.Time, error) {
	var updated time.Time
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		updated, err = updateQuotas(ctx, tx, tid, q)
		return err
	})
	return updated, classify("set quotas", err)
}
