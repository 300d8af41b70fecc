package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/testenv"
)

// TestGrant: the operator's command entitles an account to a paid plan
// (plan_grants, read by the API's entitlement) and withdraws it; an
// unknown account or plan is an error and grants nothing.
func TestGrant(t *testing.T) {
	dbURL := testenv.DatabaseURL(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `INSERT INTO accounts (id, email, password_hash) VALUES ('acc_g', 'g@example.com', 'x')`); err != nil {
		t.Fatal(err)
	}
	env := func(k string) string {
		if k == "DATABASE_URL" {
			return dbURL
		}
		return ""
	}
	grants := func() (n int) {
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM plan_grants WHERE account_id = 'acc_g' AND plan = 'pro'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var out bytes.Buffer
	for _, bad := range [][]string{{"-account", "acc_nope", "-plan", "pro"}, {"-account", "acc_g", "-plan", "platinum"}, {"-plan", "pro"}} {
		if err := grant(bad, env, &out); err == nil {
			t.Errorf("grant %q: no error", bad)
		}
	}
	if grants() != 0 {
		t.Fatal("a refused grant granted")
	}
	for range 2 { // idempotent
		if err := grant([]string{"-account", "acc_g", "-plan", "pro"}, env, &out); err != nil {
			t.Fatal(err)
		}
	}
	if grants() != 1 {
		t.Fatalf("grants after grant: %d", grants())
	}
	if err := grant([]string{"-account", "acc_g", "-plan", "pro", "-revoke"}, env, &out); err != nil {
		t.Fatal(err)
	}
	if grants() != 0 {
		t.Fatal("revoke left the grant")
	}
	t.Logf("output:\n%s", out.String())
}
