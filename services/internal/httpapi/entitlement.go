package httpapi

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"berth.dev/billing/plan"
)

// The plan of a tenant comes from what its account is entitled to, never
// from the request alone (docs/billing.md, "Entitlement"):
//   - every plan in the operator's -open-plans (Options.OpenPlans, "free"
//     by default), for every account;
//   - the plans an operator granted the account (`billing grant`): the way
//     to give paid plans when payment is disabled (no Stripe key);
//   - with payment enabled (Options.Payments), every plan once the account
//     has a valid payment method, unless its payment failed and its grace
//     ended (payment state "capped").

// notEntitledError is a plan the account may not put a tenant on (402).
type notEntitledError struct {
	plan     string
	entitled []string
}

func (e *notEntitledError) Error() string {
	return fmt.Sprintf("httpapi: the account is not entitled to the %q plan (it is to: %s)", e.plan, strings.Join(e.entitled, ", "))
}

// entitledPlans returns the plans accountID may put its tenants on, in
// catalogue order.
func (a *api) entitledPlans(ctx context.Context, accountID string) ([]string, error) {
	pay, err := a.store.AccountPayment(ctx, accountID)
	if err != nil {
		return nil, err
	}
	paid := a.opts.Payments != nil && pay.Method && pay.State != "capped"
	var plans []string
	for _, name := range plan.Names() {
		if paid || slices.Contains(a.opts.OpenPlans, name) || slices.Contains(pay.Grants, name) {
			plans = append(plans, name)
		}
	}
	return plans, nil
}

// checkEntitled returns a *notEntitledError unless accountID may put a
// tenant on the plan called name.
func (a *api) checkEntitled(ctx context.Context, accountID, name string) error {
	plans, err := a.entitledPlans(ctx, accountID)
	if err != nil {
		return err
	}
	if slices.Contains(plans, name) {
		return nil
	}
	return &notEntitledError{plan: name, entitled: plans}
}

// tenantCap returns how many tenants accountID may have: the largest
// bound among the plans it is entitled to.
func (a *api) tenantCap(ctx context.Context, accountID string) (int, error) {
	plans, err := a.entitledPlans(ctx, accountID)
	if err != nil {
		return 0, err
	}
	return plan.TenantCap(plans)
}
