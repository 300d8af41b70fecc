package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/testenv"
)

// TestCreditCommand: `billing credit` issues a credit note amending an
// issued invoice and says what remains of it; a credit larger than that is
// refused naming the amounts, and issues nothing; missing flags are an
// error.
func TestCreditCommand(t *testing.T) {
	dbURL := testenv.DatabaseURL(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	month := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	issued := month.AddDate(0, 1, 0).Add(time.Hour)
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO invoices (id, account_id, month, status, currency, total_cents, created_at, updated_at)
		  VALUES ('inv_c', 'acc_c', $1, 'draft', 'usd', 5900, $2, $2)`, []any{month, issued}},
		{`INSERT INTO invoice_lines (invoice_id, line, tenant_id, tenant_slug, plan, meter, description, unit, quantity, included, billable, amount_cents)
		  VALUES ('inv_c', 1, 'ten_c', 'c', 'pro', 'base', 'pro plan', 'second', 1, 0, 1, 5900)`, nil},
		{`UPDATE invoices SET status = 'final', number = 41, finalized_at = $1 WHERE id = 'inv_c'`, []any{issued}},
	} {
		if _, err := pool.Exec(ctx, q.sql, q.args...); err != nil {
			t.Fatal(err)
		}
	}
	env := func(k string) string {
		if k == "DATABASE_URL" {
			return dbURL
		}
		return ""
	}
	now := func() time.Time { return issued.Add(24 * time.Hour) }
	credits := func() (n int) {
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM invoices WHERE kind = 'credit' AND amends = 'inv_c'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	var out bytes.Buffer
	if err := credit([]string{"--invoice", "inv_c", "--amount-cents", "1500", "--reason", "outage on 12 January"}, env, now, &out); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.HasPrefix(got, "issued: Credit note 42 (inv_") ||
		!strings.Contains(got, "-USD 15.00, amends Invoice 41 (inv_c); USD 44.00 remains of it") {
		t.Fatalf("output %q", got)
	}
	err = credit([]string{"-invoice", "inv_c", "-amount-cents", "4401", "-reason", "more"}, env, now, &out)
	if err == nil || !strings.Contains(err.Error(), "USD 44.01 asked, USD 44.00 remains of Invoice 41 (total USD 59.00, credited before USD 15.00)") {
		t.Fatalf("too large a credit: %v", err)
	}
	for _, bad := range [][]string{{"-invoice", "inv_c", "-amount-cents", "100"}, {"-amount-cents", "100", "-reason", "x"},
		{"-invoice", "inv_c", "-amount-cents", "-5", "-reason", "x"}, {"-invoice", "inv_nope", "-amount-cents", "1", "-reason", "x"}} {
		if err := credit(bad, env, now, &out); err == nil {
			t.Errorf("credit %q: no error", bad)
		}
	}
	if n := credits(); n != 1 {
		t.Fatalf("%d credits, want the one", n)
	}
	t.Logf("output:\n%s", out.String())
}
