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
//   - invoice.paid: the account is in good standing again, and the quotas
//     its grace's end capped to the free plan's bounds are restored
//     (RestoreTenants, live through berth_quotas).
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
		Customer json.RawMessage `json:"customer"`
		Mode     string          `json:"mode"` // a Checkout session's
	}
	if ev.Data != nil {
		if err := json.Unmarshal(ev.Data.Raw, &obj); err != nil {
			return typ, fmt.Errorf("payment: event %s: %w", ev.ID, err)
		}
	}
	customer := customerID(obj.Customer)
	var restored []string
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
			var account string
			err = tx.QueryRow(ctx, `UPDATE accounts SET payment_state = 'ok', grace_until = NULL
				WHERE stripe_customer_id = $1 RETURNING id`, customer).Scan(&account)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			if err != nil {
				return err
			}
			restored, err = RestoreTenants(ctx, tx, account)
		}
		return err
	})
	if err != nil {
		return typ, fmt.Errorf("payment: event %s: %w", ev.ID, err)
	}
	p.log.Info("stripe event", slog.String("id", ev.ID), slog.String("type", typ), slog.String("customer", customer))
	if len(restored) > 0 {
		p.log.Info("invoice paid: quotas capped at the end of the payment grace restored", slog.String("customer", customer),
			slog.Int("tenants", len(restored)))
	}
	return typ, nil
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
