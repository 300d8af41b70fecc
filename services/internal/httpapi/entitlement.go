package httpapi

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"berth.dev/billing/plan"
)

// The plan of a tenant comes from what its account is entitled to, never
// from the request alone. Until billing decides it per account (a payment
// method on file), every account is entitled to the same plans: the
// operator's -open-plans (Options.OpenPlans, "free" by default).

// notEntitledError is a plan the account may not put a tenant on (402).
type notEntitledError struct {
	plan     string
	entitled []string
}

func (e *notEntitledError) Error() string {
	return fmt.Sprintf("httpapi: the account is not entitled to the %q plan (it is to: %s)", e.plan, strings.Join(e.entitled, ", "))
}

// entitledPlans returns the plans accountID may put its tenants on.
func (a *api) entitledPlans(context.Context, string) []string { return a.opts.OpenPlans }

// checkEntitled returns a *notEntitledError unless accountID may put a
// tenant on the plan called name.
func (a *api) checkEntitled(ctx context.Context, accountID, name string) error {
	plans := a.entitledPlans(ctx, accountID)
	if slices.Contains(plans, name) {
		return nil
	}
	return &notEntitledError{plan: name, entitled: plans}
}

// tenantCap returns how many tenants accountID may have: the largest
// bound among the plans it is entitled to.
func (a *api) tenantCap(ctx context.Context, accountID string) (int, error) {
	return plan.TenantCap(a.entitledPlans(ctx, accountID))
}
