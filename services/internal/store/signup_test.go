package store_test

import (
	"context"
	"errors"
	"testing"

	"berth.dev/billing/plan"
	"berth.dev/services/internal/store"
	"berth.dev/testenv"
)

// TestCreateSignupEmailTaken: a signup with a registered email (any case)
// is ErrEmailTaken and leaves no row, though it ran the same inserts; a
// taken slug is a slug conflict whether the email is registered or not.
func TestCreateSignupEmailTaken(t *testing.T) {
	pool := testenv.Postgres(t)
	st := store.New(pool)
	ctx := context.Background()
	free, _ := plan.Lookup("free")
	signup := func(email, slug string) error {
		return st.CreateSignup(ctx, &store.Signup{
			Account: store.Account{ID: store.NewID(store.PrefixAccount), Email: email, PasswordHash: "x"},
			Tenant:  store.Tenant{ID: store.NewID(store.PrefixTenant), Slug: slug, Plan: "free"},
			Quotas:  free.Defaults,
		})
	}
	rows := func() (n int) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM accounts) + (SELECT count(*) FROM tenants)
			+ (SELECT count(*) FROM quotas) + (SELECT count(*) FROM api_keys)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := signup("ada@example.com", "ada-home"); err != nil {
		t.Fatal(err)
	}
	before := rows()
	for _, email := range []string{"ada@example.com", "Ada@Example.com"} {
		if err := signup(email, "another-slug"); !errors.Is(err, store.ErrEmailTaken) {
			t.Fatalf("%s again: %v, want ErrEmailTaken", email, err)
		}
		if n := rows(); n != before {
			t.Fatalf("%s again left rows: %d, want %d", email, n, before)
		}
	}
	for _, email := range []string{"ada@example.com", "new@example.com"} {
		var conflict *store.ConflictError
		if err := signup(email, "ada-home"); !errors.As(err, &conflict) || conflict.Field != "slug" {
			t.Fatalf("%s with a taken slug: %v, want a slug conflict", email, err)
		}
	}
	if n := rows(); n != before {
		t.Fatalf("refused signups left rows: %d, want %d", n, before)
	}
}
