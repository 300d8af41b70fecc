package store

import (
	"context"
	"time"
)

// Payment is what the API knows of an account's payment (docs/billing.md,
// "Payment"): whether it has a valid payment method (set by the Stripe
// webhook), its payment state (ok, grace, capped), and the plans an
// operator granted it whatever its payment (`billing grant`).
type Payment struct {
	Method     bool       `json:"payment_method"`
	State      string     `json:"payment_state"`
	GraceUntil *time.Time `json:"grace_until,omitempty"`
	Grants     []string   `json:"-"`
}

// AccountPayment returns accountID's payment facts.
func (s *Store) AccountPayment(ctx context.Context, accountID string) (Payment, error) {
	var p Payment
	err := s.pool.QueryRow(ctx, `SELECT payment_method_at IS NOT NULL, payment_state, grace_until,
			array(SELECT plan FROM plan_grants WHERE account_id = $1 ORDER BY plan)
		FROM accounts WHERE id = $1`, accountID).Scan(&p.Method, &p.State, &p.GraceUntil, &p.Grants)
	return p, classify("account payment", err)
}
