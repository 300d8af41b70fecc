package metering

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"berth.dev/testenv"
)

// TestCreditsNeverExceedTheInvoice: an operator's credits amend an issued
// invoice as new documents (kind credit, one line with the reason, a
// negative total, numbered next in the one sequence) and together never
// exceed its total: a credit larger than what remains is refused, naming
// the amounts, also when two are asked at once; drafts, credits and unknown
// ids cannot be credited; the invoice itself never changes.
func TestCreditsNeverExceedTheInvoice(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	jan := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	feb := jan.AddDate(0, 1, 0)
	now := feb.Add(2 * time.Hour)
	seedTenant(t, pool, "acc_a", "ten_a_pro", "pro", jan)
	seedTenant(t, pool, "acc_b", "ten_b_pro", "pro", jan)
	if err := flush(ctx, pool, usageRow{"ten_a_pro", "n1", jan.Add(48 * time.Hour), 150_000_000, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	w := New(pool, Config{Grace: time.Hour, Now: func() time.Time { return now }}, quietLog())
	if r, err := w.RunOnce(ctx); err != nil || r.Finalized != 2 {
		t.Fatalf("run: %+v, %v", r, err)
	}
	invID, _, number, total, lines := loadInvoice(t, pool, "acc_a", jan)
	bID, _, _, _, _ := loadInvoice(t, pool, "acc_b", jan)
	draftID, _, _, _, _ := loadInvoice(t, pool, "acc_a", feb)
	if total != 5900 {
		t.Fatalf("total %d", total)
	}

	c, err := Credit(ctx, pool, invID, 1500, "  outage on 12 January  ", now)
	if err != nil {
		t.Fatal(err)
	}
	if c.Number != *number+2 || c.TotalCents != -1500 || c.RemainingCents != 4400 || c.AmendsTitle != "Invoice 1" {
		t.Fatalf("credit %+v", c)
	}
	var (
		kind, amends, account, meter, desc string
		month                              time.Time
		docTotal, amount                   int64
		nLines                             int
	)
	if err := pool.QueryRow(ctx, `SELECT i.kind, i.amends, i.account_id, i.month, i.total_cents, l.meter, l.description, l.amount_cents,
		(SELECT count(*) FROM invoice_lines WHERE invoice_id = i.id) FROM invoices i JOIN invoice_lines l ON l.invoice_id = i.id
		WHERE i.id = $1 AND i.status = 'final'`, c.ID).Scan(&kind, &amends, &account, &month, &docTotal, &meter, &desc, &amount, &nLines); err != nil {
		t.Fatal(err)
	}
	if kind != "credit" || amends != invID || account != "acc_a" || !month.Equal(jan) || docTotal != -1500 ||
		meter != "credit" || desc != "outage on 12 January" || amount != -1500 || nLines != 1 {
		t.Fatalf("credit document: %s amends %s, %s %s, total %d, line %s %q %d (%d lines)", kind, amends, account, month, docTotal, meter, desc, amount, nLines)
	}

	// More than remains: refused, with the amounts.
	_, err = Credit(ctx, pool, invID, 4401, "again", now)
	if !errors.Is(err, ErrCreditTooLarge) {
		t.Fatalf("credit of 4401 of 4400 remaining: %v", err)
	}
	for _, want := range []string{"USD 44.01 asked", "USD 44.00 remains of Invoice 1", "total USD 59.00", "credited before USD 15.00"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	t.Logf("refused: %v", err)

	// Two credits of 3000 at once on the 4900 of acc_b's invoice: one.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = Credit(ctx, pool, bID, 3000, "goodwill", now)
		}()
	}
	wg.Wait()
	if ok := (errs[0] == nil) != (errs[1] == nil); !ok || !(errors.Is(errs[0], ErrCreditTooLarge) || errors.Is(errs[1], ErrCreditTooLarge)) {
		t.Fatalf("two concurrent credits of 3000 of 4900: %v, %v; want one issued, one refused", errs[0], errs[1])
	}

	// The rest, exactly: then nothing remains.
	if c, err := Credit(ctx, pool, invID, 4400, "the rest", now); err != nil || c.RemainingCents != 0 {
		t.Fatalf("credit of what remains: %+v, %v", c, err)
	}
	if _, err := Credit(ctx, pool, invID, 1, "one cent more", now); !errors.Is(err, ErrCreditTooLarge) {
		t.Fatalf("a cent beyond: %v", err)
	}
	for _, tc := range []struct {
		id     string
		cents  int64
		reason string
		want   error
	}{
		{draftID, 100, "x", ErrNotCreditable},
		{c.ID, 100, "x", ErrNotCreditable},
		{"inv_nope", 100, "x", ErrNoDocument},
		{invID, 0, "x", ErrCreditMalformed},
		{invID, 100, "   ", ErrCreditMalformed},
		{invID, 100, strings.Repeat("x", MaxReason+1), ErrCreditMalformed},
		{invID, 100, strings.Repeat("é", MaxReason+1), ErrCreditMalformed},
		{invID, 100, "outage\nTotal due: 0", ErrCreditMalformed},
		{invID, 100, "outage\r\nx", ErrCreditMalformed},
		{invID, 100, "out\tage", ErrCreditMalformed},
		{invID, 100, "outage\x00", ErrCreditMalformed},
		{invID, 100, "outage \x1b[31mred", ErrCreditMalformed},
		{invID, 100, "outage \u202egnp.exe", ErrCreditMalformed}, // a bidirectional override
		{invID, 100, "outage \u2028second line", ErrCreditMalformed},
		{invID, 100, "outage \xff", ErrCreditMalformed},
		{invID, 100, `=HYPERLINK("http://x")`, ErrCreditMalformed},
		{invID, 100, "+1 day", ErrCreditMalformed},
		{invID, 100, "@sum", ErrCreditMalformed},
		// Printable text of any script is a reason: here refused only because nothing remains to credit.
		{invID, 100, "Ausfall am 12. März — 2 h (障害)", ErrCreditTooLarge},
		{invID, 100, strings.Repeat("é", MaxReason), ErrCreditTooLarge},
	} {
		if _, err := Credit(ctx, pool, tc.id, tc.cents, tc.reason, now); !errors.Is(err, tc.want) {
			t.Errorf("credit %s %d %q: %v, want %v", tc.id, tc.cents, tc.reason, err, tc.want)
		}
	}

	// One sequence without gaps; the invoice unchanged; a credit immutable.
	var numbers []int64
	if err := pool.QueryRow(ctx, `SELECT array_agg(number ORDER BY number) FROM invoices WHERE number IS NOT NULL`).Scan(&numbers); err != nil {
		t.Fatal(err)
	}
	for i, n := range numbers {
		if n != int64(i+1) {
			t.Fatalf("numbers %v: not 1…n", numbers)
		}
	}
	if len(numbers) != 5 {
		t.Fatalf("numbers %v: want 2 invoices and 3 credits", numbers)
	}
	if _, _, _, total2, lines2 := loadInvoice(t, pool, "acc_a", jan); total2 != total || len(lines2) != len(lines) {
		t.Fatal("the credited invoice changed")
	}
	_, err = pool.Exec(ctx, `UPDATE invoices SET total_cents = -1 WHERE id = $1`, c.ID)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23514" {
		t.Fatalf("changing an issued credit: %v, want check_violation", err)
	}
}
