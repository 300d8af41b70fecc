package migrations_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/pressly/goose/v3"

	"berth.dev/migrations"
	"berth.dev/testenv"
)

// 00010 added max_sessions and max_session_expiry to quotas: tenants that
// existed got their plan's defaults (billing/plan as of that migration),
// and a row written without the columns gets the free plan's.
func TestSessionCapsMigrationGivesPlanDefaults(t *testing.T) {
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
	if _, err := p.DownTo(ctx, 9); err != nil {
		t.Fatalf("down to 9: %v", err)
	}
	want := map[string][2]int64{ // plan → max_sessions, max_session_expiry
		"free": {100, 86400}, "pro": {10_000, 7 * 86400}, "business": {100_000, 14 * 86400},
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO accounts (id, email, password_hash) VALUES ('acc_1', 'a@example.com', 'x')"); err != nil {
		t.Fatal(err)
	}
	insertTenant := func(plan string) {
		t.Helper()
		if _, err := db.ExecContext(ctx, "INSERT INTO tenants (id, account_id, slug, plan) VALUES ($1, 'acc_1', $2, $3)",
			"ten_"+plan, "t-"+plan, plan); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO quotas (tenant_id, max_connections, max_msgs_per_sec,
			max_bytes_per_sec, client_msgs_per_sec, client_bytes_per_sec, max_message_size, max_subscriptions,
			max_retained_messages, max_retained_bytes, retention_seconds, retention_bytes, max_inflight,
			max_queued_bytes, monthly_messages) VALUES ($1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)`, "ten_"+plan); err != nil {
			t.Fatal(err)
		}
	}
	for plan := range want {
		insertTenant(plan)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	insertTenant("later") // written after 00010, without the columns
	want["later"] = want["free"]
	for plan, w := range want {
		var got [2]int64
		if err := db.QueryRowContext(ctx, "SELECT max_sessions, max_session_expiry FROM quotas WHERE tenant_id = $1",
			"ten_"+plan).Scan(&got[0], &got[1]); err != nil {
			t.Fatal(err)
		}
		if got != w {
			t.Errorf("%s: max_sessions, max_session_expiry = %v, want %v", plan, got, w)
		}
	}
}
