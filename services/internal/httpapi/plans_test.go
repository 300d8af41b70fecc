package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"berth.dev/billing/plan"
	"berth.dev/quotas"
	"berth.dev/services/internal/httpapi"
)

// openPlans entitles every account to the plans named (cmd/api's
// -open-plans).
func openPlans(names ...string) envOption {
	return func(o *httpapi.Options) { o.OpenPlans = names }
}

func (e *env) tenantPlan(t *testing.T, u user, tid string) string {
	t.Helper()
	var tn tenantOut
	r := e.do(t, "GET", "/v1/tenants/"+tid, u.key, nil)
	want(t, r, http.StatusOK)
	r.json(t, &tn)
	return tn.Plan
}

func (e *env) tenantCount(t *testing.T, accountID string) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM tenants WHERE account_id = $1`, accountID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// wantNotEntitled checks a 402 problem naming the plan.
func wantNotEntitled(t *testing.T, r resp, planName string) {
	t.Helper()
	want(t, r, http.StatusPaymentRequired)
	p := r.problem(t)
	if !strings.HasSuffix(p.Type, "/plan-not-entitled") || !strings.Contains(p.Detail, `"`+planName+`"`) ||
		len(p.Errors) != 1 || p.Errors[0].Field != "plan" {
		t.Fatalf("problem %+v, want plan-not-entitled naming %q", p, planName)
	}
}

// The plan comes from the account's entitlement, not from the request: by
// default only free is open, and a paid plan answers 402 on create and on
// PATCH, changing nothing.
func TestPaidPlanNeedsEntitlement(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	for _, paid := range []string{"pro", "business"} {
		wantNotEntitled(t, e.do(t, "POST", "/v1/tenants", u.key, map[string]string{"slug": "paid-" + paid, "plan": paid}), paid)
		wantNotEntitled(t, e.do(t, "PATCH", "/v1/tenants/"+u.tenantID, u.key, map[string]string{"plan": paid}), paid)
	}
	if n := e.tenantCount(t, u.accountID); n != 1 {
		t.Fatalf("%d tenants after refused creations, want 1", n)
	}
	if got := e.tenantPlan(t, u, u.tenantID); got != "free" {
		t.Fatalf("plan %q after a refused PATCH, want free", got)
	}
	// A refused PATCH changes nothing else either.
	wantNotEntitled(t, e.do(t, "PATCH", "/v1/tenants/"+u.tenantID, u.key, map[string]string{"plan": "pro", "slug": "renamed"}), "pro")
	var tn tenantOut
	e.do(t, "GET", "/v1/tenants/"+u.tenantID, u.key, nil).json(t, &tn)
	if tn.Slug != u.slug {
		t.Fatalf("slug %q after a refused PATCH, want %q", tn.Slug, u.slug)
	}
	// Free is open; an unknown plan is still invalid input.
	want(t, e.do(t, "POST", "/v1/tenants", u.key, map[string]string{"slug": "on-free", "plan": "free"}), http.StatusCreated)
	want(t, e.do(t, "PATCH", "/v1/tenants/"+u.tenantID, u.key, map[string]string{"plan": "free"}), http.StatusOK)
	for _, r := range []resp{
		e.do(t, "POST", "/v1/tenants", u.key, map[string]string{"slug": "gold", "plan": "gold"}),
		e.do(t, "PATCH", "/v1/tenants/"+u.tenantID, u.key, map[string]string{"plan": "gold"}),
	} {
		want(t, r, http.StatusUnprocessableEntity)
		if p := r.problem(t); len(p.Errors) != 1 || p.Errors[0].Field != "plan" {
			t.Fatalf("unknown plan: %+v", p)
		}
	}

	// A tenant already on a paid plan (granted earlier) keeps it, may
	// "change" to it, may move down to an open plan, and not back.
	if _, err := e.pool.Exec(context.Background(), `UPDATE tenants SET plan = 'business' WHERE id = $1`, u.tenantID); err != nil {
		t.Fatal(err)
	}
	want(t, e.do(t, "PATCH", "/v1/tenants/"+u.tenantID, u.key, map[string]string{"plan": "business"}), http.StatusOK)
	want(t, e.do(t, "PATCH", "/v1/tenants/"+u.tenantID, u.key, map[string]string{"plan": "free"}), http.StatusOK)
	if got := e.tenantPlan(t, u, u.tenantID); got != "free" {
		t.Fatalf("plan %q after the downgrade, want free", got)
	}
	wantNotEntitled(t, e.do(t, "PATCH", "/v1/tenants/"+u.tenantID, u.key, map[string]string{"plan": "business"}), "business")
}

// With -open-plans an operator entitles every account to more plans: those
// are allowed, the others still refused.
func TestOpenPlansEntitle(t *testing.T) {
	e := newEnv(t, openPlans("free", "pro"))
	u := e.signup("ada@example.com")
	r := e.do(t, "POST", "/v1/tenants", u.key, map[string]string{"slug": "on-pro", "plan": "pro"})
	want(t, r, http.StatusCreated)
	var tn tenantOut
	r.json(t, &tn)
	if tn.Plan != "pro" {
		t.Fatalf("created on %q, want pro", tn.Plan)
	}
	// The account says what it is entitled to, for the dashboard to offer.
	acc := e.do(t, "GET", "/v1/account", u.key, nil)
	want(t, acc, http.StatusOK)
	var ent struct {
		Plans       []string
		TenantLimit int `json:"tenant_limit"`
	}
	acc.json(t, &ent)
	if !slices.Equal(ent.Plans, []string{"free", "pro"}) || ent.TenantLimit != 25 {
		t.Fatalf("entitlement %v, limit %d; want [free pro], 25", ent.Plans, ent.TenantLimit)
	}
	want(t, e.do(t, "PATCH", "/v1/tenants/"+u.tenantID, u.key, map[string]string{"plan": "pro"}), http.StatusOK)
	wantNotEntitled(t, e.do(t, "PATCH", "/v1/tenants/"+u.tenantID, u.key, map[string]string{"plan": "business"}), "business")
	wantNotEntitled(t, e.do(t, "POST", "/v1/tenants", u.key, map[string]string{"slug": "on-business", "plan": "business"}), "business")
	free, _ := plan.Lookup("free")
	want(t, e.do(t, "PUT", "/v1/tenants/"+tn.ID+"/quotas", u.key, free.Defaults), http.StatusOK) // within free's bounds
	want(t, e.do(t, "PATCH", "/v1/tenants/"+tn.ID, u.key, map[string]string{"plan": "free"}), http.StatusOK)
	if got := e.tenantPlan(t, u, tn.ID); got != "free" {
		t.Fatalf("plan %q after the downgrade, want free", got)
	}

	// The API refuses to start on a plan that does not exist.
	o := e.opts
	o.OpenPlans = []string{"free", "gold"}
	if _, err := httpapi.NewRouter(o); err == nil {
		t.Fatal("NewRouter accepted an unknown open plan")
	}
}

// A downgrade is refused (409 plan-change-refused, naming a quota above the
// new plan's bound) until the quotas fit; nothing changes meanwhile. An
// upgrade changes no quota.
func TestDowngradeNeedsQuotasWithinTheNewPlan(t *testing.T) {
	e := newEnv(t, openPlans("free", "pro", "business"))
	u := e.signup("ada@example.com")
	free, _ := plan.Lookup("free")
	business, _ := plan.Lookup("business")
	tid := u.tenantID
	want(t, e.do(t, "PATCH", "/v1/tenants/"+tid, u.key, map[string]string{"plan": "business"}), http.StatusOK)
	q := business.Max
	q.MaxInflight = 5
	want(t, e.do(t, "PUT", "/v1/tenants/"+tid+"/quotas", u.key, q), http.StatusOK)

	// One quota after another is named until every one fits.
	for range len(quotas.Fields) + 1 {
		r := e.do(t, "PATCH", "/v1/tenants/"+tid, u.key, map[string]string{"plan": "free"})
		if r.status == http.StatusOK {
			break
		}
		want(t, r, http.StatusConflict)
		pr := r.problem(t)
		if len(pr.Errors) != 1 {
			t.Fatalf("refused downgrade: %+v", pr)
		}
		field := pr.Errors[0].Field
		if got := e.tenantPlan(t, u, tid); got != "business" {
			t.Fatalf("plan %q after a refused downgrade", got)
		}
		var f *quotas.Field
		for i := range quotas.Fields {
			if quotas.Fields[i].Name == field {
				f = &quotas.Fields[i]
			}
		}
		if f == nil || *f.Get(&q) <= *f.Get(&free.Max) || !strings.Contains(pr.Detail, fmt.Sprint(*f.Get(&free.Max))) {
			t.Fatalf("the refusal names %q (%s), which is not above free's bound", field, pr.Detail)
		}
		*f.Get(&q) = *f.Get(&free.Max)
		want(t, e.do(t, "PUT", "/v1/tenants/"+tid+"/quotas", u.key, q), http.StatusOK)
	}
	var got struct{ Quotas quotas.Quotas }
	e.do(t, "GET", "/v1/tenants/"+tid+"/quotas", u.key, nil).json(t, &got)
	if e.tenantPlan(t, u, tid) != "free" || got.Quotas != q {
		t.Fatalf("after lowering every quota: plan %q, quotas %+v, want free and %+v", e.tenantPlan(t, u, tid), got.Quotas, q)
	}
	if q.MaxInflight != 5 {
		t.Fatalf("a quota within the bounds was changed: max_inflight %d", q.MaxInflight)
	}

	// An upgrade changes no quota: the tenant raises them itself.
	want(t, e.do(t, "PATCH", "/v1/tenants/"+tid, u.key, map[string]string{"plan": "pro"}), http.StatusOK)
	e.do(t, "GET", "/v1/tenants/"+tid+"/quotas", u.key, nil).json(t, &got)
	if got.Quotas != q {
		t.Fatalf("quotas changed by an upgrade: %+v", got.Quotas)
	}
}

// An account has at most its plans' tenant cap: free's 3 by default,
// pro's 25 when pro is open. The refusal is 403 naming the limit; deleting
// a tenant makes room; other accounts are not affected.
func TestTenantCap(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com") // the first tenant
	free, _ := plan.Lookup("free")
	for i := 1; i < free.TenantsPerAccount; i++ {
		want(t, e.do(t, "POST", "/v1/tenants", u.key, map[string]string{"slug": fmt.Sprint("ada-", i)}), http.StatusCreated)
	}
	r := e.do(t, "POST", "/v1/tenants", u.key, map[string]string{"slug": "one-too-many"})
	wantTenantLimit(t, r, free.TenantsPerAccount)
	if n := e.tenantCount(t, u.accountID); n != free.TenantsPerAccount {
		t.Fatalf("%d tenants, want %d", n, free.TenantsPerAccount)
	}
	// Another account has its own cap.
	v := e.signup("bob@example.com")
	want(t, e.do(t, "POST", "/v1/tenants", v.key, map[string]string{"slug": "bob-1"}), http.StatusCreated)
	// Room again after a delete.
	want(t, e.do(t, "DELETE", "/v1/tenants/"+u.tenantID, u.key, nil), http.StatusNoContent)
	want(t, e.do(t, "POST", "/v1/tenants", u.key, map[string]string{"slug": "one-too-many"}), http.StatusCreated)
	wantTenantLimit(t, e.do(t, "POST", "/v1/tenants", u.key, map[string]string{"slug": "and-another"}), free.TenantsPerAccount)

	// The cap is the largest among the open plans, whatever plan the
	// tenants are on.
	pro, _ := plan.Lookup("pro")
	e2 := newEnv(t, openPlans("free", "pro"))
	w := e2.signup("cy@example.com")
	for i := 1; i < pro.TenantsPerAccount; i++ {
		want(t, e2.do(t, "POST", "/v1/tenants", w.key, map[string]string{"slug": fmt.Sprint("cy-", i)}), http.StatusCreated)
	}
	wantTenantLimit(t, e2.do(t, "POST", "/v1/tenants", w.key, map[string]string{"slug": "cy-over"}), pro.TenantsPerAccount)
}

func wantTenantLimit(t *testing.T, r resp, limit int) {
	t.Helper()
	want(t, r, http.StatusForbidden)
	p := r.problem(t)
	if !strings.HasSuffix(p.Type, "/tenant-limit") || !strings.Contains(p.Detail, fmt.Sprint(limit, " tenants")) {
		t.Fatalf("problem %+v, want tenant-limit naming %d", p, limit)
	}
}

// Concurrent creations in one account never pass the cap together:
// exactly the places left are taken, every other request gets 403.
func TestTenantCapUnderConcurrentCreation(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	free, _ := plan.Lookup("free")
	const n = 12
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			statuses[i] = e.do(t, "POST", "/v1/tenants", u.key, map[string]string{"slug": fmt.Sprint("race-", i)}).status
		})
	}
	wg.Wait()
	count := map[int]int{}
	for _, s := range statuses {
		count[s]++
	}
	left := free.TenantsPerAccount - 1
	if count[http.StatusCreated] != left || count[http.StatusForbidden] != n-left {
		t.Fatalf("statuses %v, want %d × 201 and %d × 403", count, left, n-left)
	}
	if got := e.tenantCount(t, u.accountID); got != free.TenantsPerAccount {
		t.Fatalf("%d tenants, want %d", got, free.TenantsPerAccount)
	}
}
