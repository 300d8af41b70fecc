package metering

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/testenv"
)

// line is the part of an invoice line the month walk checks.
type line struct {
	Tenant, Meter                        string
	Quantity, Included, Billable, Amount int64
}

// loadInvoice returns account's invoice for month: id, status, number,
// total and lines in line order (numbered 1…n, checked).
func loadInvoice(t *testing.T, pool *pgxpool.Pool, account string, month time.Time) (id, status string, number *int64, total int64, lines []line) {
	t.Helper()
	ctx := context.Background()
	if err := pool.QueryRow(ctx, `SELECT id, status, number, total_cents FROM invoices WHERE account_id = $1 AND month = $2 AND kind = 'invoice'`,
		account, month).Scan(&id, &status, &number, &total); err != nil {
		t.Fatalf("invoice of %s for %s: %v", account, month.Format("2006-01"), err)
	}
	rows, err := pool.Query(ctx, `SELECT line, tenant_id, meter, quantity, included, billable, amount_cents FROM invoice_lines WHERE invoice_id = $1 ORDER BY line`, id)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := 1; rows.Next(); i++ {
		var l line
		if err := rows.Scan(&n, &l.Tenant, &l.Meter, &l.Quantity, &l.Included, &l.Billable, &l.Amount); err != nil {
			t.Fatal(err)
		}
		if n != i {
			t.Fatalf("line %d numbered %d", i, n)
		}
		lines = append(lines, l)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return id, status, number, total, lines
}

// price is the docs/billing.md price table, written out again here so the
// test rates independently of the code.
type price struct {
	monthly  int64
	included [4]int64    // messages, connection-seconds, byte-seconds, bytes
	rate     [4][2]int64 // cents per units; {0, 0}: no overage
}

const gbMonth = 1_000_000_000 * 30 * 86400

var prices = map[string]price{
	"free": {0, [4]int64{1_000_000, 60_000_000, gbMonth / 10, 1_000_000_000}, [4][2]int64{}},
	"pro": {4900, [4]int64{100_000_000, 3_000_000_000, 10 * gbMonth, 100_000_000_000},
		[4][2]int64{{20, 1_000_000}, {1, 600_000}, {10, gbMonth}, {5, 1_000_000_000}}},
	"business": {49900, [4]int64{1_000_000_000, 30_000_000_000, 200 * gbMonth, 2_000_000_000_000},
		[4][2]int64{{10, 1_000_000}, {1, 1_200_000}, {8, gbMonth}, {4, 1_000_000_000}}},
}

// expect rates a tenant's plan period of active seconds within a month of
// monthSecs: its base line and meter lines, fee and included amounts pro
// rata.
func expect(tenant, p string, active, monthSecs int64, usage [4]int64) []line {
	pr := prices[p]
	out := []line{{tenant, "base", active, 0, active, roundHalfUp(mul(pr.monthly, active), mul(monthSecs))}}
	for i, m := range []string{"messages", "connection_time", "storage", "transfer"} {
		incl := roundHalfUp(mul(pr.included[i], active), mul(monthSecs)) // included prorated to the second
		l := line{Tenant: tenant, Meter: m, Quantity: usage[i], Included: incl, Billable: max(0, usage[i]-incl)}
		if r := pr.rate[i]; r[1] != 0 {
			l.Amount = roundHalfUp(mul(l.Billable, r[0]), mul(r[1]))
		}
		out = append(out, l)
	}
	return out
}

func sum(ls []line) (n int64) {
	for _, l := range ls {
		n += l.Amount
	}
	return n
}

// TestMonthWalk walks January 2026 with a controlled clock: usage rows →
// a draft that follows them → still a draft within the grace after the
// month's end → an issued invoice whose numbered lines equal the metered
// usage × the price table (rated here independently) → unchanged by late
// usage, and immutable in the database.
func TestMonthWalk(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	var clock atomic.Pointer[time.Time]
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	set := func(s string) { v := at(s); clock.Store(&v) }
	w := New(pool, Config{Grace: time.Hour, Now: func() time.Time { return *clock.Load() }}, quietLog())
	run := func() Report {
		t.Helper()
		r, err := w.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	jan, feb, dec := at("2026-01-01T00:00:00Z"), at("2026-02-01T00:00:00Z"), at("2025-12-01T00:00:00Z")
	const janSecs, decSecs = 31 * 86400, 31 * 86400
	seedTenant(t, pool, "acc_a", "ten_a_free", "free", jan)
	seedTenant(t, pool, "acc_a", "ten_a_pro", "pro", at("2026-01-10T12:00:00Z"))
	seedTenant(t, pool, "acc_b", "ten_b_pro", "pro", at("2025-12-31T23:00:00Z"))
	// A business tenant that lived 5–20 January: deleted, its tombstone
	// keeps its plan.
	if _, err := pool.Exec(ctx, `INSERT INTO deleted_tenants (id, account_id, slug, plan, created_at, deleted_at)
		VALUES ('ten_a_biz', 'acc_a', 'biz', 'business', '2026-01-05T00:00:00Z', '2026-01-20T00:00:00Z')`); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(flush(ctx, pool,
		usageRow{"ten_a_pro", "n1", at("2026-01-12T10:00:00Z"), 60_000_000, 60e9, 0, 1_500_000_000, 500e12},
		usageRow{"ten_a_pro", "n2", at("2026-01-12T10:00:00Z"), 1, 0, 500e6, 0, 0},
		usageRow{"ten_a_free", "n1", at("2026-01-03T00:00:00Z"), 1_200_000, 2e9, 0, 100, 1e6},
		usageRow{"ten_a_biz", "n1", at("2026-01-06T00:00:00Z"), 5e9, 1, 0, 1, 7},
		usageRow{"ten_b_pro", "n1", at("2025-12-31T23:30:00Z"), 10, 0, 0, 0, 0},
		usageRow{"other", "n1", at("2026-01-12T10:00:00Z"), 1e9, 0, 0, 0, 0}, // no such tenant: nobody's bill
	))

	// 20 January: December is issued (acc_b's hour of it), January drafted.
	set("2026-01-20T06:00:00Z")
	if r := run(); r.Finalized != 1 || r.Drafted != 2 || r.MonthsClosed != 1 {
		t.Fatalf("first run: %+v, want December issued for acc_b and two January drafts", r)
	}
	_, status, number, total, got := loadInvoice(t, pool, "acc_b", dec)
	want := expect("ten_b_pro", "pro", 3600, decSecs, [4]int64{10, 0, 0, 0})
	if status != "final" || number == nil || *number != 1 || total != sum(want) || !cmp.Equal(got, want) {
		t.Fatalf("December: %s #%v total %d, lines diff (-got +want):\n%s", status, number, total, cmp.Diff(got, want))
	}
	proJan := func(u [4]int64) []line { return expect("ten_a_pro", "pro", janSecs-(9*86400+43200), janSecs, u) }
	aJan := func(pro [4]int64) []line {
		ls := expect("ten_a_biz", "business", 15*86400, janSecs, [4]int64{5e9, 1, 7 * 60, 1})
		ls = append(ls, expect("ten_a_free", "free", janSecs, janSecs, [4]int64{1_200_000, 100, 60e6, 2e9})...)
		return append(ls, proJan(pro)...)
	}
	_, status, number, total, got = loadInvoice(t, pool, "acc_a", jan)
	want = aJan([4]int64{60_000_001, 1_500_000_000, 500e12 * 60, 60_500_000_000})
	if status != "draft" || number != nil || total != sum(want) || !cmp.Equal(got, want) {
		t.Fatalf("January draft: %s #%v total %d, lines diff (-got +want):\n%s", status, number, total, cmp.Diff(got, want))
	}

	// More usage in January, some in February; half an hour into February
	// January is still a draft (the grace), with the new usage.
	must(flush(ctx, pool,
		usageRow{"ten_a_pro", "n1", at("2026-01-25T00:00:00Z"), 50_000_122, 60e9, 0, 1_512_345_678, 0},
		usageRow{"ten_a_pro", "n1", at("2026-02-01T00:00:00Z"), 999, 0, 0, 0, 0},
	))
	set("2026-02-01T00:30:00Z")
	run()
	janPro := [4]int64{110_000_123, 3_012_345_678, 500e12 * 60, 120_500_000_000}
	want = aJan(janPro)
	if _, status, _, total, got = loadInvoice(t, pool, "acc_a", jan); status != "draft" || total != sum(want) || !cmp.Equal(got, want) {
		t.Fatalf("January in the grace: %s total %d, diff:\n%s", status, total, cmp.Diff(got, want))
	}

	// An hour after the month's end: issued, numbered after December's.
	set("2026-02-01T01:00:00Z")
	if r := run(); r.Finalized != 2 || r.MonthsClosed != 1 {
		t.Fatalf("run after the grace: %+v, want two January invoices issued", r)
	}
	id, status, number, total, got := loadInvoice(t, pool, "acc_a", jan)
	if status != "final" || number == nil || *number != 2 || total != sum(want) || !cmp.Equal(got, want) {
		t.Fatalf("January issued: %s #%v total %d, diff:\n%s", status, number, total, cmp.Diff(got, want))
	}
	t.Logf("acc_a January: %d lines, total %d cents (pro messages overage %d, transfer overage %d; included amounts prorated)",
		len(got), total, got[11].Amount, got[14].Amount)
	if _, _, n, _, _ := loadInvoice(t, pool, "acc_b", jan); n == nil || *n != 3 {
		t.Fatalf("acc_b January number %v, want 3", n)
	}
	if _, status, _, _, got := loadInvoice(t, pool, "acc_a", feb); status != "draft" || got[len(got)-4].Quantity != 999 {
		t.Fatalf("February draft: %s, pro messages %d, want 999", status, got[len(got)-4].Quantity)
	}

	// Late usage for January changes nothing issued (a correction, a
	// document of its own, bills it: corrections_test.go).
	must(flush(ctx, pool, usageRow{"ten_a_pro", "n1", at("2026-01-31T23:59:00Z"), 7, 0, 0, 0, 0}))
	set("2026-02-02T00:00:00Z")
	run()
	if _, status, _, total2, got2 := loadInvoice(t, pool, "acc_a", jan); status != "final" || total2 != total || !cmp.Equal(got2, got) {
		t.Fatalf("issued invoice changed after late usage: total %d → %d", total, total2)
	}

	// The database refuses any change to an issued invoice or its lines.
	for _, stmt := range []string{
		`UPDATE invoices SET total_cents = 0 WHERE id = $1`,
		`UPDATE invoices SET status = 'draft' WHERE id = $1`,
		`DELETE FROM invoices WHERE id = $1`,
		`UPDATE invoice_lines SET amount_cents = 0 WHERE invoice_id = $1`,
		`DELETE FROM invoice_lines WHERE invoice_id = $1`,
		`INSERT INTO invoice_lines (invoice_id, line, tenant_id, tenant_slug, plan, meter, description, unit, quantity, included, billable, amount_cents)
		 VALUES ($1, 99, 'ten_a_pro', 'x', 'pro', 'messages', 'sneaky', 'message', 1, 0, 1, -100)`,
	} {
		_, err := pool.Exec(ctx, stmt, id)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "23514" {
			t.Errorf("%s on an issued invoice: err %v, want check_violation", stmt, err)
		}
	}
	if _, _, _, total2, got2 := loadInvoice(t, pool, "acc_a", jan); total2 != total || !cmp.Equal(got2, got) {
		t.Fatal("issued invoice changed")
	}
}
