package migrations_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pressly/goose/v3"

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

// 00008 turned usage, usage_drops, latency and spans into tables partitioned
// by day. Going down and up again keeps every row, and rows of any day (one
// far from the partitions made) still land.
func TestPartitionedTablesDownAndUp(t *testing.T) {
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Minute)
	old := time.Date(2020, 2, 3, 4, 5, 0, 0, time.UTC) // before any partition: the default one
	insert := func() {
		t.Helper()
		for _, at := range []time.Time{now, old} {
			for _, q := range []string{
				`INSERT INTO usage (tenant_id, node_id, bucket, messages_in) VALUES ('ten_a', 'n1', $1, 1)`,
				`INSERT INTO usage_drops (tenant_id, node_id, bucket, reason, count) VALUES ('ten_a', 'n1', $1, 'offline', 1)`,
				`INSERT INTO latency (tenant_id, node_id, bucket, metric, count, sum_ns, min_ns, max_ns, bounds, counts)
					VALUES ('ten_a', 'n1', $1, 'ack', 1, 5, 5, 5, '{5}', '{1}')`,
				`INSERT INTO spans (tenant_id, trace_id, span_id, name, start, duration_ns)
					VALUES ('ten_a', repeat('a', 32), substr(md5($1::timestamptz::text), 1, 16), 'x', $1::timestamptz, 1)`,
			} {
				if _, err := db.ExecContext(ctx, q, at); err != nil {
					t.Fatalf("%s at %v: %v", q, at, err)
				}
			}
		}
	}
	count := func(version int64) {
		t.Helper()
		for _, table := range []string{"usage", "usage_drops", "latency", "spans"} {
			var n int
			if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 2 {
				t.Errorf("at version %d %s has %d rows, want 2", version, table, n)
			}
		}
	}
	insert()
	if _, err := p.DownTo(ctx, 7); err != nil {
		t.Fatalf("down to 7: %v", err)
	}
	count(7)
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	count(8)
	var kind string
	if err := db.QueryRowContext(ctx, "SELECT relkind::text FROM pg_class WHERE relname = 'usage'").Scan(&kind); err != nil {
		t.Fatal(err)
	}
	if kind != "p" {
		t.Fatalf("usage relkind %q, want p (partitioned)", kind)
	}
	// The old day's rows were moved into a partition of their own.
	var parts int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM pg_class WHERE relname = 'usage_p20200203'").Scan(&parts); err != nil {
		t.Fatal(err)
	}
	if parts != 1 {
		t.Fatal("no partition usage_p20200203 for the migrated rows of that day")
	}
}
