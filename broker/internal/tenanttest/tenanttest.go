// Package tenanttest seeds tenants into a test database (see
// berth.dev/testenv) the way the API would create them: an account, the
// tenant and its quotas row. Only tests import it.
package tenanttest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/billing/plan"
)

// Seed creates tenant id (slug: the id with '_' as '-') on the free plan
// with quotas q.
func Seed(t testing.TB, pool *pgxpool.Pool, id string, q plan.Quotas) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO accounts (id, email, password_hash) VALUES ($1, $1 || '@example.com', 'x') ON CONFLICT DO NOTHING`, "acc_"+id); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO tenants (id, account_id, slug, plan) VALUES ($1, $2, $3, 'free')`, id, "acc_"+id, strings.ReplaceAll(id, "_", "-")); err != nil {
		t.Fatal(err)
	}
	cols, ph, args := []string{"tenant_id"}, []string{"$1"}, []any{id}
	for i, f := range plan.Fields {
		cols = append(cols, f.Name)
		ph = append(ph, fmt.Sprintf("$%d", i+2))
		args = append(args, *f.Get(&q))
	}
	if _, err := pool.Exec(ctx, "INSERT INTO quotas ("+strings.Join(cols, ",")+") VALUES ("+strings.Join(ph, ",")+")", args...); err != nil {
		t.Fatal(err)
	}
}

// SeedFree creates tenant id with the free plan's default quotas.
func SeedFree(t testing.TB, pool *pgxpool.Pool, id string) {
	t.Helper()
	free, err := plan.Lookup("free")
	if err != nil {
		t.Fatal(err)
	}
	Seed(t, pool, id, free.Defaults)
}
