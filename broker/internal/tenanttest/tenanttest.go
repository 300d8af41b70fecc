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

	"berth.dev/quotas"
)

// Seed creates tenant id (slug: the id with '_' as '-') on the free plan
// with quotas q.
func Seed(t testing.TB, pool *pgxpool.Pool, id string, q quotas.Quotas) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO accounts (id, email, password_hash) VALUES ($1, $1 || '@example.com', 'x') ON CONFLICT DO NOTHING`, "acc_"+id); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO tenants (id, account_id, slug, plan) VALUES ($1, $2, $3, 'free')`, id, "acc_"+id, strings.ReplaceAll(id, "_", "-")); err != nil {
		t.Fatal(err)
	}
	cols, ph, args := []string{"tenant_id"}, []string{"$1"}, []any{id}
	for i, f := range quotas.Fields {
		cols = append(cols, f.Name)
		ph = append(ph, fmt.Sprintf("$%d", i+2))
		args = append(args, *f.Get(&q))
	}
	if _, err := pool.Exec(ctx, "INSERT INTO quotas ("+strings.Join(cols, ",")+") VALUES ("+strings.Join(ph, ",")+")", args...); err != nil {
		t.Fatal(err)
	}
}

// SeedFree creates tenant id with the Free quotas.
func SeedFree(t testing.TB, pool *pgxpool.Pool, id string) {
	t.Helper()
	Seed(t, pool, id, Free())
}

const (
	kib = 1024
	mib = 1024 * kib
	gib = 1024 * mib
	day = 24 * 60 * 60
)

// Free returns small quotas for a tenant in a test: the free plan's
// defaults when they were written down here. The broker knows no plans
// (they are billing's, which it never imports), so these are fixtures, not
// the catalogue.
func Free() quotas.Quotas {
	return quotas.Quotas{
		MaxConnections: 10, MaxMsgsPerSec: 100, MaxBytesPerSec: 256 * kib,
		ClientMsgsPerSec: 20, ClientBytesPerSec: 64 * kib, MaxMessageSize: 64 * kib,
		MaxSubscriptions: 50, MaxRetainedMessages: 100, MaxRetainedBytes: 1 * mib,
		RetentionSeconds: day, RetentionBytes: 64 * mib, MaxInflight: 20,
		MaxQueuedBytes: 1 * mib, MonthlyMessages: 1_000_000,
		MaxSessions: 100, MaxSessionExpiry: day,
	}
}

// Pro returns mid-sized quotas (the pro plan's defaults when written down).
func Pro() quotas.Quotas {
	return quotas.Quotas{
		MaxConnections: 1000, MaxMsgsPerSec: 5000, MaxBytesPerSec: 10 * mib,
		ClientMsgsPerSec: 200, ClientBytesPerSec: 1 * mib, MaxMessageSize: 1 * mib,
		MaxSubscriptions: 500, MaxRetainedMessages: 10_000, MaxRetainedBytes: 64 * mib,
		RetentionSeconds: 7 * day, RetentionBytes: 4 * gib, MaxInflight: 100,
		MaxQueuedBytes: 16 * mib, MonthlyMessages: 100_000_000,
		MaxSessions: 10_000, MaxSessionExpiry: 7 * day,
	}
}

// Business returns large quotas (the business plan's defaults when written
// down).
func Business() quotas.Quotas {
	return quotas.Quotas{
		MaxConnections: 10_000, MaxMsgsPerSec: 50_000, MaxBytesPerSec: 100 * mib,
		ClientMsgsPerSec: 1000, ClientBytesPerSec: 10 * mib, MaxMessageSize: 1 * mib,
		MaxSubscriptions: 1000, MaxRetainedMessages: 100_000, MaxRetainedBytes: 512 * mib,
		RetentionSeconds: 14 * day, RetentionBytes: 64 * gib, MaxInflight: 1000,
		MaxQueuedBytes: 64 * mib, MonthlyMessages: 10_000_000_000,
		MaxSessions: 100_000, MaxSessionExpiry: 14 * day,
	}
}
