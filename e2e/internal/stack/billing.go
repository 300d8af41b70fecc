package stack

import "testing"

// StartBilling starts a billing worker (billing/cmd/billing) named name on
// the stack's database, with the stack's Stripe when Options.Stripe is
// set, and args added to its flags (-interval, -now, …; a later flag
// wins). It returns at once: the worker leads within its -leader-poll
// (100 ms here) once no other worker does. docs/billing.md describes it.
func (s *Stack) StartBilling(t testing.TB, name string, args ...string) *Proc {
	t.Helper()
	all := []string{"-log-format", "text", "-leader-poll", "100ms"}
	if s.StripeKey != "" {
		all = append(all, "-stripe-key", s.StripeKey, "-stripe-url", s.StripeURL)
	}
	return Start(t, name, s.billingBin, append(all, args...), []string{"DATABASE_URL=" + s.DatabaseURL})
}
