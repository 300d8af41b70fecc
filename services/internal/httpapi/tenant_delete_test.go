package httpapi_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// DELETE /v1/tenants/{tid}: the tenant and everything of it answers 404
// afterwards, its credentials, quotas and topic rules are gone, its
// tombstone stays, nodes hear of it on berth_tenants_deleted (gateways on
// berth_placement), and its usage stays the account's: GET /v1/usage
// still counts it, and with group_by=tenant shows it as deleted.
func TestDeleteTenant(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	other := e.signup("bob@example.com")
	ctx := context.Background()
	r := e.do(t, "POST", "/v1/tenants", u.key, map[string]string{"slug": "doomed"})
	want(t, r, http.StatusCreated)
	var doomed struct{ ID string }
	r.json(t, &doomed)
	path := "/v1/tenants/" + doomed.ID
	cred := e.createCredential(user{key: u.key, tenantID: doomed.ID}, map[string]any{"name": "d", "acl": map[string][]string{"pub": {"#"}, "sub": {"#"}}})
	want(t, e.do(t, "POST", path+"/topics", u.key, map[string]any{"filter": "a/#"}), http.StatusCreated)

	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for _, row := range []struct {
		tenant string
		at     time.Time
		in     int64
	}{
		{u.tenantID, base, 5},
		{doomed.ID, base, 7},
		{doomed.ID, base.Add(time.Minute), 1}, // a node's last flush, after the deletion
		{other.tenantID, base, 1000},
	} {
		if _, err := e.pool.Exec(ctx, `INSERT INTO usage (tenant_id, node_id, bucket, messages_in) VALUES ($1, 'n1', $2, $3)`,
			row.tenant, row.at, row.in); err != nil {
			t.Fatal(err)
		}
	}

	nodes := listen(t, e, "berth_tenants_deleted")
	gateways := listen(t, e, "berth_placement")
	want(t, e.do(t, "DELETE", path, u.key, nil), http.StatusNoContent)
	waitNotify(t, nodes, "berth_tenants_deleted", doomed.ID)
	waitNotify(t, gateways, "berth_placement", doomed.ID)

	// Every path of it is now unknown, as another account's would be.
	for _, p := range []string{path, path + "/credentials", path + "/quotas", path + "/topics", path + "/usage"} {
		want(t, e.do(t, "GET", p, u.key, nil), http.StatusNotFound)
	}
	want(t, e.do(t, "POST", path+"/credentials", u.key, map[string]any{"name": "x", "acl": map[string][]string{"pub": {"#"}}}), http.StatusNotFound)
	want(t, e.do(t, "DELETE", path, u.key, nil), http.StatusNotFound)
	var creds, quotas, rules, tombstones int
	var slug, account, plan string
	if err := e.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM credentials WHERE tenant_id = $1),
		(SELECT count(*) FROM quotas WHERE tenant_id = $1), (SELECT count(*) FROM topic_rules WHERE tenant_id = $1),
		(SELECT count(*) FROM deleted_tenants WHERE id = $1)`, doomed.ID).Scan(&creds, &quotas, &rules, &tombstones); err != nil {
		t.Fatal(err)
	}
	if creds != 0 || quotas != 0 || rules != 0 || tombstones != 1 {
		t.Fatalf("after the deletion: %d credentials (%s), %d quotas, %d topic rules, %d tombstones; want 0, 0, 0, 1",
			creds, cred["id"], quotas, rules, tombstones)
	}
	// The tombstone keeps the plan: billing rates the tenant's last month.
	if err := e.pool.QueryRow(ctx, `SELECT slug, account_id, plan FROM deleted_tenants WHERE id = $1`, doomed.ID).Scan(&slug, &account, &plan); err != nil ||
		slug != "doomed" || account != u.accountID || plan != "free" {
		t.Fatalf("tombstone slug %q account %q plan %q (%v), want doomed, %s, free", slug, account, plan, err, u.accountID)
	}

	// The account's usage still counts the deleted tenant's messages.
	q := url.Values{"from": {base.Format(time.RFC3339)}, "to": {base.Add(time.Hour).Format(time.RFC3339)}, "step": {"1h"}}
	var sum struct {
		Points []struct {
			MessagesIn int64 `json:"messages_in"`
		} `json:"points"`
	}
	r = e.do(t, "GET", "/v1/usage?"+q.Encode(), u.key, nil)
	want(t, r, http.StatusOK)
	r.json(t, &sum)
	if len(sum.Points) != 1 || sum.Points[0].MessagesIn != 13 {
		t.Fatalf("account usage %s, want 13 messages in (5 + the deleted tenant's 8)", r.body)
	}
	q.Set("group_by", "tenant")
	r = e.do(t, "GET", "/v1/usage?"+q.Encode(), u.key, nil)
	want(t, r, http.StatusOK)
	var grouped struct {
		Series []struct {
			TenantID  string     `json:"tenant_id"`
			Slug      string     `json:"slug"`
			DeletedAt *time.Time `json:"deleted_at"`
			Points    []struct {
				MessagesIn int64 `json:"messages_in"`
			} `json:"points"`
		} `json:"series"`
	}
	r.json(t, &grouped)
	if len(grouped.Series) != 2 {
		t.Fatalf("grouped %s, want the live and the deleted tenant", r.body)
	}
	for _, s := range grouped.Series {
		switch s.TenantID {
		case u.tenantID:
			if s.DeletedAt != nil || s.Points[0].MessagesIn != 5 {
				t.Errorf("live tenant's series %s", r.body)
			}
		case doomed.ID:
			if s.DeletedAt == nil || s.Slug != "doomed" || s.Points[0].MessagesIn != 8 {
				t.Errorf("deleted tenant's series %s, want slug doomed, deleted_at, 8 messages in", r.body)
			}
		default:
			t.Errorf("unexpected series %s", s.TenantID)
		}
	}
	// Where it has no usage, a deleted tenant has no series; a live one
	// always has.
	q.Set("from", base.Add(24*time.Hour).Format(time.RFC3339))
	q.Set("to", base.Add(25*time.Hour).Format(time.RFC3339))
	r = e.do(t, "GET", "/v1/usage?"+q.Encode(), u.key, nil)
	want(t, r, http.StatusOK)
	r.json(t, &grouped)
	if len(grouped.Series) != 1 || grouped.Series[0].TenantID != u.tenantID {
		t.Fatalf("grouped a day later %s, want only the live tenant", r.body)
	}
	// Another account never sees it.
	q = url.Values{"from": {base.Format(time.RFC3339)}, "to": {base.Add(time.Hour).Format(time.RFC3339)}, "step": {"1h"}}
	r = e.do(t, "GET", "/v1/usage?"+q.Encode(), other.key, nil)
	want(t, r, http.StatusOK)
	r.json(t, &sum)
	if sum.Points[0].MessagesIn != 1000 {
		t.Fatalf("other account's usage %s, want its own 1000 only", r.body)
	}

	// The slug is free again.
	want(t, e.do(t, "POST", "/v1/tenants", u.key, map[string]string{"slug": "doomed"}), http.StatusCreated)
}
