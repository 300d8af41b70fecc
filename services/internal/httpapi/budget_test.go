package httpapi_test

import (
	"context"
	"net/http"
	"testing"
)

// A budget is per account: 404 until set; PUT validates both fields (422
// naming each); it is replaced by the next PUT; GET shows the notices the
// billing worker recorded, and another account sees none of it.
func TestBudget(t *testing.T) {
	e := newEnv(t)
	u := e.signup("budget@example.com")
	other := e.signup("other@example.com")
	want(t, e.do(t, "GET", "/v1/billing/budget", u.key, nil), http.StatusNotFound)

	r := e.do(t, "PUT", "/v1/billing/budget", u.key, map[string]any{"monthly_cents": 0, "action": "explode"})
	want(t, r, http.StatusUnprocessableEntity)
	if p := r.problem(t); len(p.Errors) != 2 || p.Errors[0].Field != "monthly_cents" || p.Errors[1].Field != "action" {
		t.Fatalf("problem %+v, want monthly_cents and action named", p)
	}
	want(t, e.do(t, "PUT", "/v1/billing/budget", u.key, map[string]any{"monthly_cents": 12.5, "action": "cap"}), http.StatusUnprocessableEntity)

	type budget struct {
		MonthlyCents int64  `json:"monthly_cents"`
		Action       string `json:"action"`
		Notices      []struct {
			Percent    int   `json:"percent"`
			TotalCents int64 `json:"total_cents"`
			Capped     bool  `json:"capped"`
		} `json:"notices"`
	}
	var b budget
	want(t, e.do(t, "PUT", "/v1/billing/budget", u.key, map[string]any{"monthly_cents": 5000, "action": "notify"}), http.StatusOK)
	r = e.do(t, "PUT", "/v1/billing/budget", u.key, map[string]any{"monthly_cents": 6000, "action": "cap"})
	want(t, r, http.StatusOK)
	r.json(t, &b)
	if b.MonthlyCents != 6000 || b.Action != "cap" || b.Notices == nil || len(b.Notices) != 0 {
		t.Fatalf("budget %+v", b)
	}
	if _, err := e.pool.Exec(context.Background(), `INSERT INTO budget_notifications (account_id, month, percent, total_cents, budget_cents, capped, created_at)
		VALUES ($1, date_trunc('month', now(), 'UTC'), 80, 4900, 6000, false, now())`, u.accountID); err != nil {
		t.Fatal(err)
	}
	r = e.do(t, "GET", "/v1/billing/budget", u.key, nil)
	want(t, r, http.StatusOK)
	b = budget{}
	r.json(t, &b)
	if len(b.Notices) != 1 || b.Notices[0].Percent != 80 || b.Notices[0].TotalCents != 4900 {
		t.Fatalf("budget %+v, want the 80 %% notice", b)
	}
	want(t, e.do(t, "GET", "/v1/billing/budget", other.key, nil), http.StatusNotFound)
}

// DELETE removes the account's budget (204, then GET is 404 and another
// DELETE 404); another account's DELETE leaves it alone; the notices
// recorded stay, shown again once a budget is set again.
func TestBudgetDelete(t *testing.T) {
	e := newEnv(t)
	u := e.signup("budget-delete@example.com")
	other := e.signup("budget-delete-other@example.com")
	want(t, e.do(t, "DELETE", "/v1/billing/budget", u.key, nil), http.StatusNotFound)
	want(t, e.do(t, "PUT", "/v1/billing/budget", u.key, map[string]any{"monthly_cents": 2500, "action": "cap"}), http.StatusOK)
	if _, err := e.pool.Exec(context.Background(), `INSERT INTO budget_notifications (account_id, month, percent, total_cents, budget_cents, capped, created_at)
		VALUES ($1, date_trunc('month', now(), 'UTC'), 100, 2600, 2500, true, now())`, u.accountID); err != nil {
		t.Fatal(err)
	}

	want(t, e.do(t, "DELETE", "/v1/billing/budget", other.key, nil), http.StatusNotFound)
	want(t, e.do(t, "GET", "/v1/billing/budget", u.key, nil), http.StatusOK)

	want(t, e.do(t, "DELETE", "/v1/billing/budget", u.key, nil), http.StatusNoContent)
	want(t, e.do(t, "GET", "/v1/billing/budget", u.key, nil), http.StatusNotFound)
	want(t, e.do(t, "DELETE", "/v1/billing/budget", u.key, nil), http.StatusNotFound)

	r := e.do(t, "PUT", "/v1/billing/budget", u.key, map[string]any{"monthly_cents": 9000, "action": "notify"})
	want(t, r, http.StatusOK)
	var b struct {
		MonthlyCents int64  `json:"monthly_cents"`
		Action       string `json:"action"`
		Notices      []struct {
			Percent int  `json:"percent"`
			Capped  bool `json:"capped"`
		} `json:"notices"`
	}
	r.json(t, &b)
	if b.MonthlyCents != 9000 || b.Action != "notify" || len(b.Notices) != 1 || b.Notices[0].Percent != 100 || !b.Notices[0].Capped {
		t.Fatalf("budget set again: %+v, want 9000 notify with the month's 100 %% notice kept", b)
	}
}
