package migrations_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"berth.dev/migrations"
	"berth.dev/testenv"
)

// Every process migrates at start, often at the same moment: running Up
// concurrently and repeatedly must leave exactly one applied copy of each.
func TestUpIsIdempotentAndConcurrencySafe(t *testing.T) {
	ctx := context.Background()
	url := testenv.DatabaseURL(t) // already migrated once, as a clone of the template

	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- migrations.Up(ctx, url) }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Up: %v", err)
		}
	}

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	want, err := migrations.Version()
	if err != nil {
		t.Fatal(err)
	}
	var got, applied int64
	if err := conn.QueryRow(ctx, "SELECT max(version_id), count(*) FILTER (WHERE version_id > 0) FROM goose_db_version WHERE is_applied").Scan(&got, &applied); err != nil {
		t.Fatal(err)
	}
	if got != want || applied != want {
		t.Fatalf("schema version %d with %d applied rows, want %d and %d", got, applied, want, want)
	}
}

func TestSlugConstraintRejectsNonDNSLabels(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	if _, err := pool.Exec(ctx, "INSERT INTO accounts (id, email, password_hash) VALUES ('acc_1','a@example.com','x')"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		slug string
		ok   bool
	}{
		{"acme", true}, {"a-1", true}, {"Acme", false}, {"-acme", false}, {"acme-", false},
		{"ac_me", false}, {"", false}, {"a.b", false}, {"x'; DROP TABLE tenants;--", false},
	} {
		_, err := pool.Exec(ctx, "INSERT INTO tenants (id, account_id, slug, plan) VALUES ($1, 'acc_1', $2, 'free')", "ten_"+tc.slug, tc.slug)
		if (err == nil) != tc.ok {
			t.Errorf("slug %q: insert err = %v, want ok=%v", tc.slug, err, tc.ok)
		}
	}
}
