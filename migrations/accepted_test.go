package migrations_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	"berth.dev/migrations"
	"berth.dev/testenv"
)

// 00016 adds messages_accepted to usage (every partition) and its rollups.
// Rows from before it did not tell refused messages apart: they keep what
// they were billed as (messages_accepted = messages_in); rows written
// after it default to 0 accepted. Down drops the column and keeps the rows.
func TestMessagesAcceptedUpBackfillsAndDown(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("pgx", testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 15); err != nil {
		t.Fatalf("down to 15: %v", err)
	}
	now := time.Now().UTC().Truncate(time.Minute)
	old := time.Date(2020, 2, 3, 4, 5, 0, 0, time.UTC) // the default partition
	for _, q := range []string{
		`INSERT INTO usage (tenant_id, node_id, bucket, messages_in) VALUES ('ten_a', 'n1', $1, 7), ('ten_a', 'n1', $2, 5)`,
		`INSERT INTO usage_hourly (tenant_id, hour, messages_in, messages_out, bytes_in, bytes_out, connection_seconds, stored_bytes)
			VALUES ('ten_a', date_trunc('hour', $1::timestamptz), 11, 0, 0, 0, 0, 0), ('ten_a', date_trunc('hour', $2::timestamptz), 0, 0, 0, 0, 0, 0)`,
		`INSERT INTO usage_daily (tenant_id, day, messages_in, messages_out, bytes_in, bytes_out, connection_seconds, stored_bytes)
			VALUES ('ten_a', date_trunc('day', $1::timestamptz, 'UTC'), 13, 0, 0, 0, 0, 0), ('ten_a', date_trunc('day', $2::timestamptz, 'UTC'), 0, 0, 0, 0, 0, 0)`,
	} {
		if _, err := db.ExecContext(ctx, q, now, old); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := p.UpTo(ctx, 16); err != nil {
		t.Fatalf("up to 16: %v", err)
	}
	for _, table := range []string{"usage", "usage_hourly", "usage_daily"} {
		var rows, differ int
		if err := db.QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (WHERE messages_accepted <> messages_in) FROM `+table).Scan(&rows, &differ); err != nil {
			t.Fatal(err)
		}
		if rows != 2 || differ != 0 {
			t.Errorf("%s after 00016: %d rows, %d with messages_accepted <> messages_in; want 2 and 0", table, rows, differ)
		}
	}
	var in, accepted int64
	if err := db.QueryRowContext(ctx, `INSERT INTO usage (tenant_id, node_id, bucket, messages_in) VALUES ('ten_b', 'n1', $1, 3)
		RETURNING messages_in, messages_accepted`, now).Scan(&in, &accepted); err != nil || in != 3 || accepted != 0 {
		t.Fatalf("a row written after 00016 without messages_accepted: in %d, accepted %d, %v; want 3, 0", in, accepted, err)
	}
	if _, err := p.DownTo(ctx, 15); err != nil {
		t.Fatalf("down to 15: %v", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.columns WHERE column_name = 'messages_accepted'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("after down: %d messages_accepted columns, %v", n, err)
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM usage`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("after down: %d usage rows, %v; want 3", n, err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
}
