package metering

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/billing/payment"
	"berth.dev/testenv"
)

// TestRunPushesFinalInvoicesToStripe: with a payment provider (Stripe's
// stripe-mock), a run pushes the invoice it issues once its month is final
// (invoice_payments gets the Stripe invoice id) and never a draft; the next
// run pushes nothing again; a correction for late usage is pushed as a
// Stripe invoice and an operator's credit as a credit note; an account
// whose payment grace has ended is capped by the run.
func TestRunPushesFinalInvoicesToStripe(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	p, err := payment.New(pool, payment.Config{Key: "sk_test_berth", URL: testenv.StripeURL(t)}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	var clock atomic.Pointer[time.Time]
	set := func(v time.Time) { clock.Store(&v) }
	w := New(pool, Config{Grace: time.Hour, Now: func() time.Time { return *clock.Load() }, Payments: p}, quietLog())
	jan := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	seedTenant(t, pool, "acc_a", "ten_a_pro", "pro", jan)
	seedTenant(t, pool, "acc_f", "ten_f_free", "free", jan) // $0: nothing to charge
	if err := flush(ctx, pool, usageRow{"ten_a_pro", "n1", jan.Add(48 * time.Hour), 150_000_000, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	pushed := func() (n int) {
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM invoice_payments`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	set(jan.Add(20 * 24 * time.Hour))
	if r, err := w.RunOnce(ctx); err != nil || r.Drafted != 2 || r.Pushed != 0 || pushed() != 0 {
		t.Fatalf("mid-month run: %+v, %v, %d pushed; want drafts only", r, err, pushed())
	}
	set(jan.AddDate(0, 1, 0).Add(time.Hour))
	r, err := w.RunOnce(ctx)
	if err != nil || r.Finalized != 2 || r.Pushed != 1 {
		t.Fatalf("run after the month: %+v, %v; want 2 issued, acc_a's pushed", r, err)
	}
	var total int64
	var sid string
	if err := pool.QueryRow(ctx, `SELECT i.total_cents, ip.stripe_invoice_id FROM invoices i JOIN invoice_payments ip ON ip.invoice_id = i.id
		WHERE i.account_id = 'acc_a' AND i.month = $1`, jan).Scan(&total, &sid); err != nil {
		t.Fatal(err)
	}
	t.Logf("acc_a January: %d cents pushed to stripe-mock as %s", total, sid)
	if total != 4900+1000 { // base + 50M messages over 100M at $0.20 per million
		t.Fatalf("total %d, want 5900", total)
	}
	if r, err := w.RunOnce(ctx); err != nil || r.Pushed != 0 {
		t.Fatalf("next run: %+v, %v; want nothing pushed twice", r, err)
	}

	// Late usage: a correction, pushed as a Stripe invoice of its own; an
	// operator's credit of the invoice, pushed as a Stripe credit note.
	if err := flush(ctx, pool, usageRow{"ten_a_pro", "n2", jan.Add(72 * time.Hour), 5_000_000, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if r, err := w.RunOnce(ctx); err != nil || r.Corrected != 1 || r.Pushed != 1 {
		t.Fatalf("run after late usage: %+v, %v; want a correction issued and pushed", r, err)
	}
	var invID string
	var corrections int
	if err := pool.QueryRow(ctx, `SELECT i.id, (SELECT count(*) FROM invoices c JOIN invoice_payments ip ON ip.invoice_id = c.id
		WHERE c.amends = i.id AND c.kind = 'correction' AND c.total_cents = 100)
		FROM invoices i WHERE i.account_id = 'acc_a' AND i.month = $1 AND i.kind = 'invoice'`, jan).Scan(&invID, &corrections); err != nil || corrections != 1 {
		t.Fatalf("pushed corrections of 100 cents: %d, %v", corrections, err)
	}
	if _, err := Credit(ctx, pool, invID, 900, "goodwill", *clock.Load()); err != nil {
		t.Fatal(err)
	}
	if r, err := w.RunOnce(ctx); err != nil || r.Pushed != 1 {
		t.Fatalf("run after a credit: %+v, %v; want the credit note pushed", r, err)
	}
	var cn string
	if err := pool.QueryRow(ctx, `SELECT stripe_credit_note_id FROM credit_note_payments`).Scan(&cn); err != nil {
		t.Fatal(err)
	}
	t.Logf("late usage: a correction of 100 cents pushed; a credit of 900 cents pushed as %s", cn)

	if _, err := pool.Exec(ctx, `UPDATE accounts SET payment_state = 'grace', grace_until = $1 WHERE id = 'acc_a'`,
		jan.AddDate(0, 1, 0).Add(90*time.Minute)); err != nil {
		t.Fatal(err)
	}
	set(jan.AddDate(0, 1, 0).Add(2 * time.Hour))
	if r, err := w.RunOnce(ctx); err != nil || r.Capped != 1 {
		t.Fatalf("run after the payment grace: %+v, %v; want acc_a capped", r, err)
	}
}
