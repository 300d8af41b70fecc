package payment

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v82"
)

// pushCredits pushes every final credit whose amended document is in
// Stripe (invoice_payments) and that is not yet (credit_note_payments), and
// returns how many it pushed. A credit of a document that is never pushed
// (nothing to charge, or issued while payment was disabled) stays Berth's.
func (p *Provider) pushCredits(ctx context.Context) (int, error) {
	rows, err := p.pool.Query(ctx, `SELECT c.id FROM invoices c JOIN invoice_payments ip ON ip.invoice_id = c.amends
		WHERE c.kind = 'credit' AND c.status = 'final'
		  AND NOT EXISTS (SELECT 1 FROM credit_note_payments cp WHERE cp.invoice_id = c.id)
		ORDER BY c.number`)
	if err != nil {
		return 0, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	for i, id := range ids {
		if err := p.PushCredit(ctx, id); err != nil {
			return i, err
		}
	}
	return len(ids), nil
}

// PushCredit sends the credit id to Stripe as a credit note on the Stripe
// invoice of the document it amends: one custom line (the reason) for the
// credit's amount, with the idempotency key berth-credit-<id>, so a push
// repeated after a crash issues one credit note. Its id is recorded in
// credit_note_payments.
func (p *Provider) PushCredit(ctx context.Context, id string) error {
	var (
		amends, amendsKind, sinv, reason string
		number, amendsNumber             int64
		total                            int64
	)
	err := p.pool.QueryRow(ctx, `SELECT c.amends, a.kind, a.number, ip.stripe_invoice_id, c.number, c.total_cents, l.description
		FROM invoices c JOIN invoices a ON a.id = c.amends JOIN invoice_payments ip ON ip.invoice_id = c.amends
		JOIN invoice_lines l ON l.invoice_id = c.id AND l.line = 1
		WHERE c.id = $1 AND c.kind = 'credit' AND c.status = 'final'`, id).
		Scan(&amends, &amendsKind, &amendsNumber, &sinv, &number, &total, &reason)
	if err != nil {
		return fmt.Errorf("payment: credit %s: %w", id, err)
	}
	params := &stripe.CreditNoteCreateParams{
		Invoice: stripe.String(sinv),
		Lines: []*stripe.CreditNoteCreateLineParams{{
			Type: stripe.String("custom_line_item"), Description: stripe.String(reason),
			Quantity: stripe.Int64(1), UnitAmount: stripe.Int64(-total),
		}},
		Memo: stripe.String("Berth credit note " + strconv.FormatInt(number, 10) + " (amends " + amendsKind + " " +
			strconv.FormatInt(amendsNumber, 10) + "): " + reason),
	}
	params.AddMetadata("berth_invoice_id", id)
	params.AddMetadata("berth_amends", amends)
	params.SetIdempotencyKey("berth-credit-" + id)
	cn, err := p.sc.V1CreditNotes.Create(ctx, params)
	if err != nil {
		return fmt.Errorf("payment: credit note for %s: %w", id, err)
	}
	if _, err := p.pool.Exec(ctx, `INSERT INTO credit_note_payments (invoice_id, stripe_credit_note_id, pushed_at)
		VALUES ($1, $2, now()) ON CONFLICT DO NOTHING`, id, cn.ID); err != nil {
		return err
	}
	p.log.Info("credit pushed to stripe", slog.String("invoice", id), slog.String("stripe_invoice", sinv),
		slog.String("stripe_credit_note", cn.ID))
	return nil
}
