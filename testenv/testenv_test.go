package testenv

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestPostgresDatabasesAreFreshAndMigrated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := Postgres(t), Postgres(t)

	// Both databases carry the whole schema...
	for _, pool := range []interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}{a, b} {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM information_schema.tables WHERE table_name IN ('accounts','tenants','credentials','quotas','nodes','usage')").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 6 {
			t.Fatalf("core tables present = %d, want 6", n)
		}
	}
	// ...and share nothing.
	if _, err := a.Exec(ctx, "INSERT INTO accounts (id, email, password_hash) VALUES ('acc_1', 'a@example.com', 'x')"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.QueryRow(ctx, "SELECT count(*) FROM accounts").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("second database sees %d accounts from the first", n)
	}
}

func TestRedisSpacesAreSeparateAndCleaned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var leftover string
	t.Run("write", func(t *testing.T) {
		s := Redis(t)
		leftover = s.Prefix + "k"
		if err := s.Client.Set(ctx, leftover, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		other := Redis(t)
		if other.Prefix == s.Prefix {
			t.Fatalf("two spaces share prefix %q", s.Prefix)
		}
	})
	s := Redis(t)
	if n, err := s.Client.Exists(ctx, leftover).Result(); err != nil || n != 0 {
		t.Fatalf("key %q left behind after its test ended (exists=%d, err=%v)", leftover, n, err)
	}
}
