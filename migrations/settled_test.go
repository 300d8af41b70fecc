package migrations_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/pressly/goose/v3"

	"berth.dev/migrations"
	"berth.dev/testenv"
)

// 00018 records which pushed Stripe invoices are settled: one pushed before
// it (whose payment nobody recorded) counts as settled ('untracked'), one
// pushed after starts owed, and paid_at and settled_reason go together.
// Down and up again keeps the rows.
func TestSettledMigrationCountsEarlierPushesSettled(t *testing.T) {
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
	if _, err := p.DownTo(ctx, 17); err != nil {
		t.Fatalf("down to 17: %v", err)
	}
	exec := func(q string, args ...any) error {
		_, err := db.ExecContext(ctx, q, args...)
		return err
	}
	push := func(id string, number int) {
		t.Helper()
		if err := exec(`INSERT INTO invoices (id, account_id, month, status, number, currency, total_cents, created_at, updated_at, finalized_at)
			VALUES ($1, 'acc_1', date_trunc('month', now(), 'UTC') - make_interval(months => $2), 'final', $2, 'usd', 100, now(), now(), now())`,
			id, number); err != nil {
			t.Fatal(err)
		}
		if err := exec(`INSERT INTO invoice_payments (invoice_id, stripe_invoice_id, pushed_at) VALUES ($1, 'in_' || $1, now())`, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := exec(`INSERT INTO accounts (id, email, password_hash) VALUES ('acc_1', 'a@example.com', 'x')`); err != nil {
		t.Fatal(err)
	}
	push("inv_before", 1)
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	push("inv_after", 2)
	settled := func(id string) (reason sql.NullString, paid bool) {
		t.Helper()
		if err := db.QueryRowContext(ctx, `SELECT settled_reason, paid_at IS NOT NULL FROM invoice_payments WHERE invoice_id = $1`, id).
			Scan(&reason, &paid); err != nil {
			t.Fatal(err)
		}
		return reason, paid
	}
	if r, paid := settled("inv_before"); r.String != "untracked" || !paid {
		t.Errorf("pushed before 00018: %v, paid_at set %v; want untracked, set", r, paid)
	}
	if r, paid := settled("inv_after"); r.Valid || paid {
		t.Errorf("pushed after 00018: %v, paid_at set %v; want unsettled", r, paid)
	}
	if err := exec(`UPDATE invoice_payments SET paid_at = now() WHERE invoice_id = 'inv_after'`); err == nil {
		t.Error("paid_at without settled_reason accepted")
	}
	if err := exec(`UPDATE invoice_payments SET paid_at = now(), settled_reason = 'uncollectible' WHERE invoice_id = 'inv_after'`); err == nil {
		t.Error("settled_reason uncollectible accepted")
	}
	if _, err := p.DownTo(ctx, 17); err != nil {
		t.Fatalf("down to 17 again: %v", err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM invoice_payments WHERE settled_reason = 'untracked'`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("after down and up: %d untracked, %v; want both rows kept", n, err)
	}
}
