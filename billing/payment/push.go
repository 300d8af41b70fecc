package payment

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v82"
)

// PushFinal pushes every final invoice and correction with something to
// charge that is not yet in Stripe (invoice_payments), each as a Stripe
// invoice, then every credit whose amended document is in Stripe and that
// is not yet (credit_note_payments), each as a Stripe credit note
// (credit.go). It returns how many documents it pushed.
func (p *Provider) PushFinal(ctx context.Context) (int, error) {
	rows, err := p.pool.Query(ctx, `SELECT i.id FROM invoices i
		WHERE i.status = 'final' AND i.kind IN ('invoice', 'correction') AND i.total_cents > 0
		  AND NOT EXISTS (SELECT 1 FROM invoice_payments ip WHERE ip.invoice_id = i.id)
		ORDER BY i.number`)
	if err != nil {
		return 0, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	for i, id := range ids {
		if err := p.Push(ctx, id); err != nil {
			return i, err
		}
	}
	n, err := p.pushCredits(ctx)
	return len(ids) + n, err
}

// Push sends the final invoice or correction id to Stripe: a draft Stripe
// invoice for the account's customer, one invoice item per line with an
// amount, then finalization. Every request carries an idempotency key
// derived from the document's id (and line number), so a push repeated
// after a crash creates nothing twice. The Stripe invoice's id is recorded
// in invoice_payments. A correction becomes a Stripe invoice of its own,
// its description and metadata naming the invoice it amends.
func (p *Provider) Push(ctx context.Context, id string) error {
	var account, currency, kind string
	var number int64
	var amends *string
	var amendsNumber *int64
	err := p.pool.QueryRow(ctx, `SELECT i.account_id, i.currency, i.number, i.kind, i.amends, a.number
		FROM invoices i LEFT JOIN invoices a ON a.id = i.amends
		WHERE i.id = $1 AND i.status = 'final' AND i.kind IN ('invoice', 'correction')`, id).
		Scan(&account, &currency, &number, &kind, &amends, &amendsNumber)
	if err != nil {
		return fmt.Errorf("payment: invoice %s: %w", id, err)
	}
	cust, err := p.Customer(ctx, account)
	if err != nil {
		return err
	}
	key := "berth-invoice-" + id
	ip := &stripe.InvoiceCreateParams{
		Customer: stripe.String(cust), AutoAdvance: stripe.Bool(true),
		CollectionMethod:            stripe.String("charge_automatically"),
		PendingInvoiceItemsBehavior: stripe.String("exclude"),
		Description:                 stripe.String(description(kind, number, amendsNumber)),
	}
	ip.AddMetadata("berth_invoice_id", id)
	if amends != nil {
		ip.AddMetadata("berth_amends", *amends)
	}
	ip.SetIdempotencyKey(key)
	si, err := p.sc.V1Invoices.Create(ctx, ip)
	if err != nil {
		return fmt.Errorf("payment: create invoice %s: %w", id, err)
	}
	rows, err := p.pool.Query(ctx, `SELECT line, description, amount_cents FROM invoice_lines
		WHERE invoice_id = $1 AND amount_cents > 0 ORDER BY line`, id)
	if err != nil {
		return err
	}
	type line struct {
		n      int
		desc   string
		amount int64
	}
	lines, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (line, error) {
		var l line
		return l, r.Scan(&l.n, &l.desc, &l.amount)
	})
	if err != nil {
		return err
	}
	for _, l := range lines {
		it := &stripe.InvoiceItemCreateParams{
			Customer: stripe.String(cust), Invoice: stripe.String(si.ID),
			Amount: stripe.Int64(l.amount), Currency: stripe.String(currency), Description: stripe.String(l.desc),
		}
		it.AddMetadata("berth_invoice_id", id)
		it.AddMetadata("berth_line", strconv.Itoa(l.n))
		it.SetIdempotencyKey(key + "-line-" + strconv.Itoa(l.n))
		if _, err := p.sc.V1InvoiceItems.Create(ctx, it); err != nil {
			return fmt.Errorf("payment: invoice %s line %d: %w", id, l.n, err)
		}
	}
	fp := &stripe.InvoiceFinalizeInvoiceParams{}
	fp.SetIdempotencyKey(key + "-finalize")
	if _, err := p.sc.V1Invoices.FinalizeInvoice(ctx, si.ID, fp); err != nil {
		return fmt.Errorf("payment: finalize invoice %s: %w", id, err)
	}
	if _, err := p.pool.Exec(ctx, `INSERT INTO invoice_payments (invoice_id, stripe_invoice_id, pushed_at)
		VALUES ($1, $2, now()) ON CONFLICT DO NOTHING`, id, si.ID); err != nil {
		return err
	}
	p.log.Info("invoice pushed to stripe", slog.String("invoice", id), slog.String("stripe_invoice", si.ID), slog.Int("lines", len(lines)))
	return nil
}

// description is a Stripe invoice's: "Berth invoice 7", "Berth correction
// 9 (amends invoice 7)".
func description(kind string, number int64, amends *int64) string {
	d := "Berth " + kind + " " + strconv.FormatInt(number, 10)
	if amends != nil {
		d += " (amends invoice " + strconv.FormatInt(*amends, 10) + ")"
	}
	return d
}
