package payment

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"berth.dev/billing/plan"
)

// signedInvoiceEvent returns a Stripe event of typ about the Stripe invoice
// stripeID of customer (metadata berth_invoice_id = berthID unless empty),
// signed with testSecret, and its Stripe-Signature header.
func signedInvoiceEvent(t *testing.T, id, typ, customer, stripeID, berthID string) ([]byte, string) {
	t.Helper()
	obj := map[string]any{"id": stripeID, "object": "invoice", "customer": customer}
	if berthID != "" {
		obj["metadata"] = map[string]string{"berth_invoice_id": berthID}
	}
	b, err := json.Marshal(map[string]any{"id": id, "object": "event", "api_version": stripe.APIVersion, "type": typ,
		"created": time.Now().Unix(), "data": map[string]any{"object": obj}})
	if err != nil {
		t.Fatal(err)
	}
	sp := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: b, Secret: testSecret, Timestamp: time.Now()})
	return sp.Payload, sp.Header
}

// TestPaidAgainOnlyOnceEveryPushedInvoiceSettled: an account capped after a
// failed payment gets its quotas back only when no invoice pushed to Stripe
// for it is still owed. Paying another invoice leaves it capped; paying the
// one that failed restores it (NOTIFY berth_quotas); replays change
// nothing; another customer's event naming the invoice settles nothing; an
// invoice marked uncollectible is still owed, a voided one is not.
func TestPaidAgainOnlyOnceEveryPushedInvoiceSettled(t *testing.T) {
	p, pool, _ := newProvider(t)
	ctx := context.Background()
	free, _ := plan.Lookup("free")
	pro, _ := plan.Lookup("pro")
	seedAccount(t, pool, "acc_a")
	seedAccount(t, pool, "acc_b")
	seedTenant(t, pool, "acc_a", "ten_a1", "pro")
	cust, err := p.Customer(ctx, "acc_a")
	if err != nil {
		t.Fatal(err)
	}
	custB, err := p.Customer(ctx, "acc_b")
	if err != nil {
		t.Fatal(err)
	}
	month := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)
	finalInvoice := func(id string, number int64) string {
		t.Helper()
		at := month.AddDate(0, int(number), 0)
		if _, err := pool.Exec(ctx, `INSERT INTO invoices (id, account_id, month, status, currency, total_cents, created_at, updated_at)
			VALUES ($1, 'acc_a', $2, 'draft', 'usd', 4900, $3, $3)`, id, at.AddDate(0, -1, 0), at); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO invoice_lines (invoice_id, line, tenant_id, tenant_slug, plan, meter, description, unit, quantity, included, billable, amount_cents)
			VALUES ($1, 1, 'ten_a1', 'ten-a1', 'pro', 'base', 'Pro plan', 'month', 1, 0, 1, 4900)`, id); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `UPDATE invoices SET status = 'final', number = $2, finalized_at = created_at WHERE id = $1`, id, number); err != nil {
			t.Fatal(err)
		}
		if err := p.Push(ctx, id); err != nil {
			t.Fatal(err)
		}
		var sid string
		if err := pool.QueryRow(ctx, `SELECT stripe_invoice_id FROM invoice_payments WHERE invoice_id = $1`, id).Scan(&sid); err != nil {
			t.Fatal(err)
		}
		return sid
	}
	deliver := func(id, typ, customer, stripeID, berthID string) {
		t.Helper()
		body, hdr := signedInvoiceEvent(t, id, typ, customer, stripeID, berthID)
		if got, err := p.HandleWebhook(ctx, body, hdr); err != nil || got != typ {
			t.Fatalf("%s %s: %q, %v", typ, id, got, err)
		}
	}
	state := func() (s string) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT payment_state FROM accounts WHERE id = 'acc_a'`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	settledAs := func(id string) (reason string, at *time.Time) {
		t.Helper()
		var r *string
		if err := pool.QueryRow(ctx, `SELECT settled_reason, paid_at FROM invoice_payments WHERE invoice_id = $1`, id).Scan(&r, &at); err != nil {
			t.Fatal(err)
		}
		if r != nil {
			reason = *r
		}
		return reason, at
	}
	capped := func(when string) {
		t.Helper()
		if s := state(); s != "capped" {
			t.Fatalf("%s: account %s, want capped", when, s)
		}
		if err := free.Check(readQuotas(t, pool, "ten_a1")); err != nil {
			t.Fatalf("%s: quotas not capped: %v", when, err)
		}
	}

	sid1, sid2 := finalInvoice("inv_1", 7), finalInvoice("inv_2", 8)
	if sid1 == sid2 {
		t.Fatalf("both invoices pushed as %s", sid1)
	}
	deliver("evt_fail_1", "invoice.payment_failed", cust, sid1, "inv_1")
	if n, err := p.EnforceGrace(ctx, time.Now().Add(2*time.Hour), free.Max); err != nil || n != 1 {
		t.Fatalf("EnforceGrace: %d, %v", n, err)
	}
	capped("grace over")
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN berth_quotas"); err != nil {
		t.Fatal(err)
	}

	// The other invoice paid (matched by its Stripe id): inv_1 is still owed.
	for range 2 {
		deliver("evt_paid_2", "invoice.paid", cust, sid2, "")
	}
	capped("inv_2 paid, inv_1 unpaid")
	reason, paidAt := settledAs("inv_2")
	if reason != "paid" || paidAt == nil {
		t.Fatalf("inv_2 settled as %q at %v, want paid", reason, paidAt)
	}
	if reason, _ := settledAs("inv_1"); reason != "" {
		t.Fatalf("inv_1 settled as %q, want unsettled", reason)
	}

	// Another customer's event naming inv_1 settles nothing of acc_a's.
	deliver("evt_paid_b", "invoice.paid", custB, "in_of_b", "inv_1")
	capped("another customer's invoice.paid")
	if reason, _ := settledAs("inv_1"); reason != "" {
		t.Fatalf("inv_1 settled as %q by another customer's event", reason)
	}

	// The failed one paid (matched by its berth_invoice_id): restored, live.
	for range 2 {
		deliver("evt_paid_1", "invoice.paid", cust, "in_unknown_to_berth", "inv_1")
	}
	if s := state(); s != "ok" {
		t.Fatalf("every invoice paid: account %s, want ok", s)
	}
	if got := readQuotas(t, pool, "ten_a1"); got != pro.Defaults {
		t.Fatalf("quotas %+v after every invoice was paid, want pro's %+v", got, pro.Defaults)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if n, err := conn.Conn().WaitForNotification(wctx); err != nil || n.Payload != "ten_a1" {
		t.Fatalf("berth_quotas: %+v, %v; want ten_a1", n, err)
	}
	if reason, _ := settledAs("inv_1"); reason != "paid" {
		t.Fatalf("inv_1 settled as %q, want paid", reason)
	}
	if _, again := settledAs("inv_2"); !again.Equal(*paidAt) {
		t.Fatalf("inv_2 paid_at moved from %v to %v", *paidAt, again)
	}

	// A third invoice fails: marked uncollectible it is still owed; voided
	// it is not, and the account is in good standing again.
	sid3 := finalInvoice("inv_3", 9)
	deliver("evt_fail_3", "invoice.payment_failed", cust, sid3, "inv_3")
	deliver("evt_paid_1", "invoice.paid", cust, "in_unknown_to_berth", "inv_1") // a late replay
	if s := state(); s != "grace" {
		t.Fatalf("inv_3 failed, inv_1's paid replayed: account %s, want grace", s)
	}
	deliver("evt_uncollectible_3", "invoice.marked_uncollectible", cust, sid3, "inv_3")
	if reason, _ := settledAs("inv_3"); reason != "" || state() != "grace" {
		t.Fatalf("uncollectible inv_3 settled as %q, account %s; want unsettled, grace", reason, state())
	}
	deliver("evt_void_3", "invoice.voided", cust, sid3, "inv_3")
	if reason, at := settledAs("inv_3"); reason != "voided" || at == nil || state() != "ok" {
		t.Fatalf("voided inv_3 settled as %q at %v, account %s; want voided, ok", reason, at, state())
	}
	var events int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM stripe_events`).Scan(&events); err != nil || events != 7 {
		t.Fatalf("stripe_events: %d, %v; want the 7 distinct events", events, err)
	}
}
