package httpapi_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestUsageByCredential: ?group_by=credential answers a series per
// credential with traffic in the range, hourly rows summed over nodes and
// hours into each step, named when the credential still exists; another
// tenant's rows stay out; the step must be whole hours.
func TestUsageByCredential(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	other := e.signup("bob@example.com")
	ctx := context.Background()
	fleet := e.createCredential(u, map[string]any{"name": "fleet-a", "acl": map[string]any{"pub": []string{"#"}, "sub": []string{"#"}}})
	crd := fleet["id"].(string)
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	ins := func(tid, cred, node string, hour time.Time, msgsIn int64) {
		t.Helper()
		if _, err := e.pool.Exec(ctx,
			`INSERT INTO usage_credentials (tenant_id, credential_id, node_id, hour, messages_in, messages_out, bytes_in, bytes_out)
			 VALUES ($1, $2, $3, $4, $5::bigint, $5::bigint * 2, $5::bigint * 10, $5::bigint * 20)`, tid, cred, node, hour, msgsIn); err != nil {
			t.Fatal(err)
		}
	}
	ins(u.tenantID, crd, "n1", base, 5)
	ins(u.tenantID, crd, "n2", base, 7)
	ins(u.tenantID, crd, "n1", base.Add(2*time.Hour), 1)
	ins(u.tenantID, "crd_gone", "n1", base.Add(time.Hour), 3)
	ins(u.tenantID, crd, "n1", base.Add(-time.Hour), 1000)    // before the range
	ins(other.tenantID, crd, "n1", base.Add(time.Hour), 1000) // another tenant
	ins(other.tenantID, "crd_bob", "n1", base, 1000)

	q := url.Values{"group_by": {"credential"}, "from": {base.Format(time.RFC3339)}, "to": {base.Add(3 * time.Hour).Format(time.RFC3339)}, "step": {"1h"}}
	r := e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/usage?"+q.Encode(), u.key, nil)
	want(t, r, http.StatusOK)
	type point struct {
		T           time.Time `json:"t"`
		MessagesIn  int64     `json:"messages_in"`
		MessagesOut int64     `json:"messages_out"`
		BytesIn     int64     `json:"bytes_in"`
		BytesOut    int64     `json:"bytes_out"`
	}
	var out struct {
		StepSeconds int64  `json:"step_seconds"`
		GroupBy     string `json:"group_by"`
		Series      []struct {
			CredentialID string  `json:"credential_id"`
			Name         *string `json:"name"`
			Points       []point `json:"points"`
		} `json:"series"`
	}
	r.json(t, &out)
	if out.GroupBy != "credential" || out.StepSeconds != 3600 || len(out.Series) != 2 {
		t.Fatalf("answer %s", r.body)
	}
	gone, a := out.Series[0], out.Series[1]
	if out.Series[0].CredentialID > out.Series[1].CredentialID {
		t.Fatalf("series not in credential id order: %s", r.body)
	}
	if a.CredentialID == "crd_gone" {
		gone, a = a, gone
	}
	if gone.CredentialID != "crd_gone" || gone.Name != nil || a.CredentialID != crd || a.Name == nil || *a.Name != "fleet-a" {
		t.Fatalf("series %s", r.body)
	}
	wantA := []point{
		{base, 12, 24, 120, 240},
		{base.Add(time.Hour), 0, 0, 0, 0},
		{base.Add(2 * time.Hour), 1, 2, 10, 20},
	}
	if len(a.Points) != 3 {
		t.Fatalf("fleet-a points %s", r.body)
	}
	for i, p := range a.Points {
		if !p.T.Equal(wantA[i].T) || p.MessagesIn != wantA[i].MessagesIn || p.MessagesOut != wantA[i].MessagesOut ||
			p.BytesIn != wantA[i].BytesIn || p.BytesOut != wantA[i].BytesOut {
			t.Errorf("fleet-a point %d = %+v, want %+v", i, p, wantA[i])
		}
	}
	if len(gone.Points) != 3 || gone.Points[1].MessagesIn != 3 || gone.Points[0].MessagesIn != 0 {
		t.Errorf("crd_gone points %+v", gone.Points)
	}

	// One day step: everything in the day, summed.
	q.Set("step", "24h")
	r = e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/usage?"+q.Encode(), u.key, nil)
	want(t, r, http.StatusOK)
	r.json(t, &out)
	if len(out.Series) != 2 || len(out.Series[0].Points) != 1 || out.Series[0].Points[0].MessagesIn+out.Series[1].Points[0].MessagesIn != 16 {
		t.Fatalf("day step %s", r.body)
	}

	for _, c := range []struct{ query, field string }{
		{"group_by=credential&step=30m", "step"},
		{"group_by=credential&step=90m", "step"},
		{"group_by=node", "group_by"},
		{"group_by=tenant", "group_by"},
	} {
		r := e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/usage?"+c.query, u.key, nil)
		want(t, r, http.StatusUnprocessableEntity)
		if !strings.Contains(string(r.body), `"`+c.field+`"`) {
			t.Errorf("%s: %s, want a problem naming %s", c.query, r.body, c.field)
		}
	}
	// Another account's tenant is not found, grouped or not.
	want(t, e.do(t, "GET", "/v1/tenants/"+other.tenantID+"/usage?group_by=credential", u.key, nil), http.StatusNotFound)
}

// TestAccountUsage: GET /v1/usage sums every tenant of the caller's account
// (another account's tenant stays out), and ?group_by=tenant answers a series
// per tenant, each tenant of the account present even without usage.
func TestAccountUsage(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	other := e.signup("bob@example.com")
	ctx := context.Background()
	r := e.do(t, "POST", "/v1/tenants", u.key, map[string]string{"slug": "second"})
	want(t, r, http.StatusCreated)
	var second struct{ ID string }
	r.json(t, &second)
	r = e.do(t, "POST", "/v1/tenants", u.key, map[string]string{"slug": "idle"})
	want(t, r, http.StatusCreated)
	var idle struct{ ID string }
	r.json(t, &idle)

	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	ins := func(tid, node string, at time.Time, msgsIn, stored int64) {
		t.Helper()
		if _, err := e.pool.Exec(ctx,
			`INSERT INTO usage (tenant_id, node_id, bucket, messages_in, messages_out, bytes_in, bytes_out, connection_seconds, stored_bytes)
			 VALUES ($1, $2, $3, $4::bigint, $4::bigint * 2, $4::bigint * 10, $4::bigint * 20, 60, $5)`, tid, node, at, msgsIn, stored); err != nil {
			t.Fatal(err)
		}
	}
	ins(u.tenantID, "n1", base, 5, 100)
	ins(second.ID, "n2", base, 7, 50)                            // same minute: stored adds up to 150
	ins(u.tenantID, "n1", base.Add(time.Minute), 1, 120)         // a lower level later in the hour
	ins(second.ID, "n1", base.Add(2*time.Hour), 3, 10)           // the third hour
	ins(other.tenantID, "n1", base.Add(time.Minute), 1000, 9999) // another account
	if _, err := e.pool.Exec(ctx, `INSERT INTO usage_drops (tenant_id, node_id, bucket, reason, count) VALUES
		($1, 'n1', $3, 'queue_full', 4), ($2, 'n1', $3, 'queue_full', 1), ($4, 'n1', $3, 'queue_full', 100)`,
		u.tenantID, second.ID, base, other.tenantID); err != nil {
		t.Fatal(err)
	}

	type point struct {
		T                 time.Time        `json:"t"`
		MessagesIn        int64            `json:"messages_in"`
		MessagesOut       int64            `json:"messages_out"`
		ConnectionSeconds int64            `json:"connection_seconds"`
		StoredBytes       int64            `json:"stored_bytes"`
		Drops             map[string]int64 `json:"drops"`
	}
	q := url.Values{"from": {base.Format(time.RFC3339)}, "to": {base.Add(3 * time.Hour).Format(time.RFC3339)}, "step": {"1h"}}
	r = e.do(t, "GET", "/v1/usage?"+q.Encode(), u.key, nil)
	want(t, r, http.StatusOK)
	var sum struct {
		StepSeconds int64   `json:"step_seconds"`
		Points      []point `json:"points"`
	}
	r.json(t, &sum)
	if sum.StepSeconds != 3600 || len(sum.Points) != 3 {
		t.Fatalf("account usage %s", r.body)
	}
	if p := sum.Points[0]; !p.T.Equal(base) || p.MessagesIn != 13 || p.MessagesOut != 26 || p.ConnectionSeconds != 180 ||
		p.StoredBytes != 150 || p.Drops["queue_full"] != 5 {
		t.Errorf("hour 0 %+v", p)
	}
	if p := sum.Points[1]; p.MessagesIn != 0 || len(p.Drops) != 0 {
		t.Errorf("hour 1 %+v", p)
	}
	if p := sum.Points[2]; p.MessagesIn != 3 || p.StoredBytes != 10 {
		t.Errorf("hour 2 %+v", p)
	}

	q.Set("group_by", "tenant")
	r = e.do(t, "GET", "/v1/usage?"+q.Encode(), u.key, nil)
	want(t, r, http.StatusOK)
	var grouped struct {
		GroupBy string `json:"group_by"`
		Series  []struct {
			TenantID string  `json:"tenant_id"`
			Slug     string  `json:"slug"`
			Points   []point `json:"points"`
		} `json:"series"`
	}
	r.json(t, &grouped)
	if grouped.GroupBy != "tenant" || len(grouped.Series) != 3 {
		t.Fatalf("grouped %s", r.body)
	}
	got := map[string][]point{}
	for _, s := range grouped.Series {
		if s.TenantID == other.tenantID || len(s.Points) != 3 {
			t.Fatalf("grouped %s", r.body)
		}
		got[s.TenantID] = s.Points
	}
	if p := got[u.tenantID]; p[0].MessagesIn != 6 || p[0].StoredBytes != 120 || p[0].Drops["queue_full"] != 4 || p[2].MessagesIn != 0 {
		t.Errorf("first tenant %+v", p)
	}
	if p := got[second.ID]; p[0].MessagesIn != 7 || p[0].StoredBytes != 50 || p[0].Drops["queue_full"] != 1 || p[2].MessagesIn != 3 {
		t.Errorf("second tenant %+v", p)
	}
	if p, ok := got[idle.ID]; !ok || p[0].MessagesIn != 0 || p[0].Drops == nil {
		t.Errorf("idle tenant %+v", p)
	}

	// The other account sees only its own.
	r = e.do(t, "GET", "/v1/usage?"+url.Values{"from": q["from"], "to": q["to"], "step": {"3h"}}.Encode(), other.key, nil)
	want(t, r, http.StatusOK)
	r.json(t, &sum)
	if len(sum.Points) != 1 || sum.Points[0].MessagesIn != 1000 || sum.Points[0].Drops["queue_full"] != 100 {
		t.Errorf("other account %s", r.body)
	}
	want(t, e.do(t, "GET", "/v1/usage?group_by=credential", u.key, nil), http.StatusUnprocessableEntity)
	want(t, e.do(t, "GET", "/v1/usage", "", nil), http.StatusUnauthorized)
}
