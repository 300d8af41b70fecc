package httpapi_test

import (
	"net/http"
	"testing"

	"berth.dev/billing/plan"
	"berth.dev/quotas"
)

// The session caps are quotas like the others: set live within the plan's
// bounds (PUT, NOTIFY berth_quotas), refused outside them with the field
// named.
func TestSessionCapQuotas(t *testing.T) {
	e := newEnv(t)
	u := e.signup("sessions@example.com")
	path := "/v1/tenants/" + u.tenantID + "/quotas"
	free, _ := plan.Lookup("free")
	var got struct{ Quotas, Max quotas.Quotas }
	e.do(t, "GET", path, u.key, nil).json(t, &got)
	if got.Quotas.MaxSessions != free.Defaults.MaxSessions || got.Quotas.MaxSessionExpiry != free.Defaults.MaxSessionExpiry ||
		got.Max.MaxSessions != free.Max.MaxSessions || got.Max.MaxSessionExpiry != free.Max.MaxSessionExpiry {
		t.Fatalf("a new free tenant's session caps %+v, bounds %+v", got.Quotas, got.Max)
	}

	conn := listen(t, e, "berth_quotas")
	r := e.do(t, "PUT", path, u.key, map[string]int64{"max_sessions": 40, "max_session_expiry": 600})
	want(t, r, http.StatusOK)
	waitNotify(t, conn, "berth_quotas", u.tenantID)
	e.do(t, "GET", path, u.key, nil).json(t, &got)
	if got.Quotas.MaxSessions != 40 || got.Quotas.MaxSessionExpiry != 600 {
		t.Fatalf("stored session caps %d, %d; want 40, 600", got.Quotas.MaxSessions, got.Quotas.MaxSessionExpiry)
	}

	for _, c := range []struct {
		body  map[string]int64
		field string
	}{
		{map[string]int64{"max_sessions": free.Max.MaxSessions + 1}, "max_sessions"},
		{map[string]int64{"max_session_expiry": free.Max.MaxSessionExpiry + 1}, "max_session_expiry"},
		{map[string]int64{"max_session_expiry": 0}, "max_session_expiry"},
	} {
		r := e.do(t, "PUT", path, u.key, c.body)
		want(t, r, http.StatusUnprocessableEntity)
		if p := r.problem(t); len(p.Errors) != 1 || p.Errors[0].Field != c.field {
			t.Fatalf("%v: errors %+v, want %s", c.body, p.Errors, c.field)
		}
	}
}
