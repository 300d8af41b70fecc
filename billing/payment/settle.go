package payment

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// settlement is what settleInvoice did.
type settlement struct {
	account   string   // the customer's account; empty: no account has that customer
	marked    bool     // a pushed invoice of the account was marked settled
	state     string   // the account's payment state before the event
	unsettled []string // Berth invoices pushed for the account and still owed
	restored  []string // tenants whose capped quotas were restored
}

// settleInvoice records, in tx, that the Stripe invoice stripeID (Berth's
// berthID, from its metadata) of customer was settled for reason ("paid",
// "voided"), and puts the account back in good standing, restoring the
// quotas its grace's end capped (RestoreTenants), only when no invoice
// pushed for it is still owed (invoice_payments.paid_at NULL). An invoice
// Berth never pushed settles nothing but still lets an account that owes
// nothing else recover. The account's row is locked first, so two
// settlements of one account apply one after the other and the second
// sees the first.
func settleInvoice(ctx context.Context, tx pgx.Tx, customer, stripeID, berthID, reason string) (settlement, error) {
	var s settlement
	if customer == "" {
		return s, nil
	}
	err := tx.QueryRow(ctx, `SELECT id, payment_state FROM accounts WHERE stripe_customer_id = $1 FOR UPDATE`, customer).
		Scan(&s.account, &s.state)
	if errors.Is(err, pgx.ErrNoRows) {
		return settlement{}, nil
	}
	if err != nil {
		return s, err
	}
	tag, err := tx.Exec(ctx, `UPDATE invoice_payments ip SET paid_at = now(), settled_reason = $4
		FROM invoices i
		WHERE i.id = ip.invoice_id AND i.account_id = $1
		  AND (ip.stripe_invoice_id = $2 OR ip.invoice_id = $3)
		  AND (ip.settled_reason IS NULL OR ip.settled_reason = 'untracked')`, s.account, stripeID, berthID, reason)
	if err != nil {
		return s, err
	}
	s.marked = tag.RowsAffected() > 0
	rows, err := tx.Query(ctx, `SELECT ip.invoice_id FROM invoice_payments ip JOIN invoices i ON i.id = ip.invoice_id
		WHERE i.account_id = $1 AND ip.paid_at IS NULL ORDER BY i.number`, s.account)
	if err != nil {
		return s, err
	}
	if s.unsettled, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(s.unsettled) > 0 {
		return s, err
	}
	if s.state != "ok" {
		if _, err := tx.Exec(ctx, `UPDATE accounts SET payment_state = 'ok', grace_until = NULL WHERE id = $1`, s.account); err != nil {
			return s, err
		}
	}
	s.restored, err = RestoreTenants(ctx, tx, s.account)
	return s, err
}
