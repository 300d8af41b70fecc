package payment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v82/webhook"
)

// ErrSignature is a webhook whose Stripe-Signature does not verify (or is
// too old, or there is no signing secret to verify it with).
var ErrSignature = errors.New("payment: webhook signature does not verify")

// HandleWebhook verifies payload against its Stripe-Signature header and
// applies the event, once (Stripe delivers at least once; stripe_events
// remembers the ids handled). It returns the event's type.
//
//   - setup_intent.succeeded, payment_method.attached, and
//     checkout.session.completed of a setup-mode session: the customer's
//     account has a valid payment method (and with it the paid plans).
//   - invoice.payment_failed: an account in good standing enters its grace
//     period (Config.Grace); EnforceGrace caps it when that ends.
//   - invoice.paid, invoice.voided: the pushed invoice (matched by its
//     Stripe id or its berth_invoice_id metadata) is settled
//     (invoice_payments.paid_at); once no invoice pushed for the account
//     is still owed, the account is in good standing again and the quotas
//     its grace's end capped to the free plan's bounds are restored
//     (settleInvoice, RestoreTenants, live through berth_quotas). While
//     one is, the account stays as it is, and the log says which.
//
// Other events are acknowledged and ignored.
func (p *Provider) HandleWebhook(ctx context.Context, payload []byte, signature string) (string, error) {
	if p.secret == "" {
		return "", ErrSignature
	}
	// Only the customer's id is read from an event's object, which every API
	// version carries: the event's version need not match stripe-go's.
	ev, err := webhook.ConstructEventWithOptions(payload, signature, p.secret,
		webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true})
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrSignature, err)
	}
	typ := string(ev.Type)
	var obj struct {
		ID       string            `json:"id"`
		Customer json.RawMessage   `json:"customer"`
		Mode     string            `json:"mode"`     // a Checkout session's
		Metadata map[string]string `json:"metadata"` // an invoice's: berth_invoice_id
	}
	if ev.Data != nil {
		if err := json.Unmarshal(ev.Data.Raw, &obj); err != nil {
			return typ, fmt.Errorf("payment: event %s: %w", ev.ID, err)
		}
	}
	customer := customerID(obj.Customer)
	var settled settlement
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO stripe_events (id, type) VALUES ($1, $2) ON CONFLICT DO NOTHING`, ev.ID, typ)
		if err != nil || tag.RowsAffected() == 0 { // seen before: done
			return err
		}
		switch typ {
		case "setup_intent.succeeded", "payment_method.attached":
			_, err = tx.Exec(ctx, `UPDATE accounts SET payment_method_at = coalesce(payment_method_at, now())
				WHERE stripe_customer_id = $1`, customer)
		case "checkout.session.completed":
			if obj.Mode == "setup" { // a card saved through Checkout (CheckoutSession)
				_, err = tx.Exec(ctx, `UPDATE accounts SET payment_method_at = coalesce(payment_method_at, now())
					WHERE stripe_customer_id = $1`, customer)
			}
		case "invoice.payment_failed":
			_, err = tx.Exec(ctx, `UPDATE accounts SET payment_state = 'grace', grace_until = now() + $2::interval
				WHERE stripe_customer_id = $1 AND payment_state = 'ok'`, customer, p.grace)
		case "invoice.paid":
			settled, err = settleInvoice(ctx, tx, customer, obj.ID, obj.Metadata["berth_invoice_id"], "paid")
		case "invoice.voided":
			settled, err = settleInvoice(ctx, tx, customer, obj.ID, obj.Metadata["berth_invoice_id"], "voided")
		}
		return err
	})
	if err != nil {
		return typ, fmt.Errorf("payment: event %s: %w", ev.ID, err)
	}
	p.log.Info("stripe event", slog.String("id", ev.ID), slog.String("type", typ), slog.String("customer", customer))
	p.logSettlement(typ, obj.ID, settled)
	return typ, nil
}

// logSettlement says what an invoice.paid or invoice.voided did to its
// account, and why an account not in good standing stays so.
func (p *Provider) logSettlement(typ, stripeID string, s settlement) {
	if s.account == "" {
		return
	}
	attrs := []any{slog.String("account", s.account), slog.String("stripe_invoice", stripeID), slog.Bool("marked_settled", s.marked)}
	switch {
	case len(s.unsettled) > 0 && s.state != "ok":
		p.log.Warn(typ+": account stays "+s.state+" while pushed invoices are unpaid",
			append(attrs, slog.Any("unpaid", s.unsettled))...)
	case len(s.unsettled) > 0:
		p.log.Info(typ+": other pushed invoices are still unpaid", append(attrs, slog.Any("unpaid", s.unsettled))...)
	case s.state != "ok":
		p.log.Info(typ+": every pushed invoice settled, account in good standing again; capped quotas restored",
			append(attrs, slog.String("was", s.state), slog.Int("tenants", len(s.restored)))...)
	}
}

// customerID reads an object's customer field: an id, or an expanded
// customer object with one.
func customerID(raw json.RawMessage) string {
	var id string
	if json.Unmarshal(raw, &id) == nil {
		return id
	}
	var obj struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(raw, &obj)
	return obj.ID
}
