package httpapi_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"berth.dev/billing/plan"
)

type period struct {
	Plan  string
	Start time.Time
	End   *time.Time
}

func (e *env) planPeriods(t *testing.T, tid string) []period {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT plan, starts_at, ends_at FROM tenant_plan_periods WHERE tenant_id = $1 ORDER BY starts_at`, tid)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ps []period
	for rows.Next() {
		var p period
		if err := rows.Scan(&p.Plan, &p.Start, &p.End); err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ps
}

// TestPlanChangeRecordsPlanPeriods: the plan periods billing prorates by
// (docs/billing.md, "Plan changes") follow the API: creation opens one at
// the tenant's created_at; each PATCH of the plan closes the open period
// and opens the next at the same instant, a whole second within the
// request; a downgrade refused over a quota (409) records nothing; two
// changes within one second rename the open period (no period shorter
// than a second); DELETE closes the last at the tombstone's deleted_at.
func TestPlanChangeRecordsPlanPeriods(t *testing.T) {
	e := newEnv(t, openPlans("free", "pro", "business"))
	u := e.signup("ada@example.com")
	ctx := context.Background()
	r := e.do(t, "POST", "/v1/tenants", u.key, map[string]string{"slug": "fleet", "plan": "free"})
	want(t, r, http.StatusCreated)
	var tn tenantOut
	r.json(t, &tn)
	var created time.Time
	if err := e.pool.QueryRow(ctx, `SELECT created_at FROM tenants WHERE id = $1`, tn.ID).Scan(&created); err != nil {
		t.Fatal(err)
	}
	if got := e.planPeriods(t, tn.ID); len(got) != 1 || got[0].Plan != "free" || !got[0].Start.Equal(created) || got[0].End != nil {
		t.Fatalf("after creation: %+v, want one open free period from %v", got, created)
	}
	// Each change below happens in a later second than the last period's
	// start: the recorded periods are moved an hour back between requests
	// (as if the requests were an hour apart).
	back := func() {
		t.Helper()
		if _, err := e.pool.Exec(ctx, `UPDATE tenant_plan_periods SET starts_at = starts_at - interval '1 hour',
			ends_at = ends_at - interval '1 hour' WHERE tenant_id = $1`, tn.ID); err != nil {
			t.Fatal(err)
		}
	}
	patch := func(to string, status int) (before, after time.Time) {
		t.Helper()
		back()
		before = time.Now().Truncate(time.Second)
		want(t, e.do(t, "PATCH", "/v1/tenants/"+tn.ID, u.key, map[string]string{"plan": to}), status)
		return before, time.Now()
	}
	b1, a1 := patch("pro", http.StatusOK)
	b2, a2 := patch("business", http.StatusOK)
	// business's connection bound is above pro's: a downgrade is refused.
	biz, _ := plan.Lookup("business")
	q := biz.Defaults
	q.MaxConnections = 50_000
	want(t, e.do(t, "PUT", "/v1/tenants/"+tn.ID+"/quotas", u.key, q), http.StatusOK)
	patch("pro", http.StatusConflict)
	got := e.planPeriods(t, tn.ID)
	if plans := []string{got[0].Plan, got[len(got)-1].Plan}; len(got) != 3 || !cmp.Equal(plans, []string{"free", "business"}) || got[1].Plan != "pro" {
		t.Fatalf("periods %+v, want free, pro, business (the refused downgrade records nothing)", got)
	}
	for i, w := range []struct{ before, after time.Time }{{b1, a1}, {b2, a2}} {
		prev, next := got[i], got[i+1]
		at := next.Start
		if prev.End == nil || !prev.End.Equal(at) || !at.Equal(at.Truncate(time.Second)) {
			t.Fatalf("change %d: period %+v then %+v, want the first to end where the next starts, on a whole second", i+1, prev, next)
		}
		// Moved back by the later requests' back(): one hour for each.
		at = at.Add(time.Duration(2-i) * time.Hour)
		if at.Before(w.before) || at.After(w.after) {
			t.Fatalf("change %d recorded at %v, outside its request [%v, %v]", i+1, at, w.before, w.after)
		}
	}
	if got[2].End != nil {
		t.Fatalf("the current period is closed: %+v", got[2])
	}

	// Two changes in one transaction (one second): the open period renamed.
	back()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, p := range []string{"pro", "free"} {
		if _, err := tx.Exec(ctx, `UPDATE tenants SET plan = $2 WHERE id = $1`, tn.ID, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got = e.planPeriods(t, tn.ID)
	if len(got) != 4 || got[3].Plan != "free" || got[3].End != nil || got[2].End == nil || !got[2].End.Equal(got[3].Start) {
		t.Fatalf("after two changes within a second: %+v, want …, business, then one open free period", got)
	}

	want(t, e.do(t, "DELETE", "/v1/tenants/"+tn.ID, u.key, nil), http.StatusNoContent)
	var deleted time.Time
	if err := e.pool.QueryRow(ctx, `SELECT deleted_at FROM deleted_tenants WHERE id = $1`, tn.ID).Scan(&deleted); err != nil {
		t.Fatal(err)
	}
	got = e.planPeriods(t, tn.ID)
	if last := got[len(got)-1]; len(got) != 4 || last.End == nil || !last.End.Equal(deleted) {
		t.Fatalf("after DELETE: %+v, want the last period closed at %v", got, deleted)
	}
}
