package httpapi

import (
	"net/http"

	"berth.dev/services/internal/store"
)

// A budget caps an account's monthly spend (docs/billing.md, "Budgets"):
// the billing worker compares the month's draft invoice with it at every
// run, records 80 % and 100 % once a month, and at 100 % with action
// "cap" caps the account's tenants' quotas to the free plan's bounds.

type budgetJSON struct {
	store.Budget
	Notices []store.BudgetNotice `json:"notices"`
}

// maxBudgetCents bounds a budget: $10,000,000.00.
const maxBudgetCents = 1_000_000_000

func (a *api) putBudget(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		MonthlyCents *int64  `json:"monthly_cents"`
		Action       *string `json:"action"`
	}
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	var v validator
	v.check(req.MonthlyCents != nil && *req.MonthlyCents >= 1 && *req.MonthlyCents <= maxBudgetCents, "monthly_cents",
		"required: a whole number of cents from 1 to 1000000000")
	v.check(req.Action != nil && (*req.Action == "notify" || *req.Action == "cap"), "action", "required: notify or cap")
	if err := v.err(); err != nil {
		return err
	}
	accountID := principalFrom(r.Context()).AccountID
	if _, err := a.store.SetBudget(r.Context(), accountID, store.Budget{MonthlyCents: *req.MonthlyCents, Action: *req.Action}); err != nil {
		return err
	}
	return a.writeBudget(w, r, accountID)
}

func (a *api) getBudget(w http.ResponseWriter, r *http.Request) error {
	return a.writeBudget(w, r, principalFrom(r.Context()).AccountID)
}

func (a *api) writeBudget(w http.ResponseWriter, r *http.Request, accountID string) error {
	b, ns, err := a.store.GetBudget(r.Context(), accountID)
	if err != nil {
		return err
	}
	if ns == nil {
		ns = []store.BudgetNotice{}
	}
	return writeJSON(w, http.StatusOK, budgetJSON{Budget: b, Notices: ns})
}
