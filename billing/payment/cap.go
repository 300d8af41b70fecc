package payment

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"berth.dev/quotas"
)

// CapTenants lowers every quota of accountID's tenants to at most its bound
// in max (a quota already below stays), in tx, and announces each tenant on
// berth_quotas so nodes apply the change live. It returns the tenants
// capped.
func CapTenants(ctx context.Context, tx pgx.Tx, accountID string, max quotas.Quotas) ([]string, error) {
	set := make([]string, 0, len(quotas.Fields)+1)
	args := []any{accountID}
	for _, f := range quotas.Fields {
		args = append(args, *f.Get(&max))
		set = append(set, fmt.Sprintf("%s = LEAST(%s, $%d)", f.Name, f.Name, len(args)))
	}
	set = append(set, "updated_at = now()")
	rows, err := tx.Query(ctx, `UPDATE quotas SET `+strings.Join(set, ", ")+`
		WHERE tenant_id IN (SELECT id FROM tenants WHERE account_id = $1) RETURNING tenant_id`, args...)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if _, err := tx.Exec(ctx, `SELECT pg_notify('berth_quotas', $1)`, id); err != nil {
			return nil, err
		}
	}
	return ids, nil
}
