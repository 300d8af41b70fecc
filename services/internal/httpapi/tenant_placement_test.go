package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"berth.dev/services/internal/store"
)

// TestTenantReplicatedPlacement: GET /v1/tenants/{tid} shows the tenant's
// tenant_placement row (leader, replicas, epoch) as "placement", null when
// it has none, follows the row as nodes move it forward, and shows a null
// leader once the leader's node row is gone. Other tenant answers (the
// list) do not carry it.
func TestTenantReplicatedPlacement(t *testing.T) {
	e := newEnv(t)
	u := e.signup("grace@example.com")
	ctx := context.Background()

	type placement struct {
		Leader    *string   `json:"leader"`
		Replicas  []string  `json:"replicas"`
		Epoch     int64     `json:"epoch"`
		UpdatedAt time.Time `json:"updated_at"`
	}
	get := func() (raw map[string]json.RawMessage, p *placement) {
		t.Helper()
		r := e.do(t, "GET", "/v1/tenants/"+u.tenantID, u.key, nil)
		want(t, r, http.StatusOK)
		r.json(t, &raw)
		got, ok := raw["placement"]
		if !ok {
			t.Fatalf("no placement field in %s", r.body)
		}
		if err := json.Unmarshal(got, &p); err != nil {
			t.Fatal(err)
		}
		return raw, p
	}
	if raw, p := get(); p != nil || string(raw["placement"]) != "null" {
		t.Fatalf("placement without a row: %s", raw["placement"])
	}

	for _, id := range []string{"node-a", "node-b", "node-c"} {
		if err := e.store.UpsertNode(ctx, store.Node{ID: id, MQTTAddr: "x:1", AdminAddr: "x:2", Capacity: 10, HeartbeatAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	// As a node's placement.Store writes it: forward only.
	record := func(leader string, epoch int64) {
		t.Helper()
		_, err := e.pool.Exec(ctx, `INSERT INTO tenant_placement (tenant_id, leader, replicas, epoch) VALUES ($1, $2, $3, $4)
			ON CONFLICT (tenant_id) DO UPDATE SET leader = EXCLUDED.leader, replicas = EXCLUDED.replicas, epoch = EXCLUDED.epoch,
			updated_at = now() WHERE tenant_placement.epoch < EXCLUDED.epoch`,
			u.tenantID, leader, []string{"node-a", "node-b", "node-c"}, epoch)
		if err != nil {
			t.Fatal(err)
		}
	}
	record("node-b", 4)
	_, p := get()
	leader := func(p *placement) string {
		if p == nil || p.Leader == nil {
			return "<none>"
		}
		return *p.Leader
	}
	if leader(p) != "node-b" || p.Epoch != 4 || p.UpdatedAt.IsZero() {
		t.Fatalf("placement %+v (leader %s), want node-b at epoch 4", p, leader(p))
	}
	if diff := cmp.Diff([]string{"node-a", "node-b", "node-c"}, p.Replicas); diff != "" {
		t.Fatalf("replicas (-want +got):\n%s", diff)
	}

	record("node-c", 7)
	record("node-a", 5) // a deposed leader's late write: no change
	if _, p = get(); leader(p) != "node-c" || p.Epoch != 7 {
		t.Fatalf("placement %+v (leader %s), want node-c at epoch 7", p, leader(p))
	}

	if _, err := e.pool.Exec(ctx, `DELETE FROM nodes WHERE id = 'node-c'`); err != nil {
		t.Fatal(err)
	}
	if _, p = get(); p == nil || p.Leader != nil || p.Epoch != 7 {
		t.Fatalf("placement %+v after the leader's node row went, want a null leader at epoch 7", p)
	}

	r := e.do(t, "GET", "/v1/tenants", u.key, nil)
	want(t, r, http.StatusOK)
	var list struct {
		Items []map[string]json.RawMessage `json:"items"`
	}
	r.json(t, &list)
	if len(list.Items) != 1 {
		t.Fatalf("list: %s", r.body)
	}
	if _, ok := list.Items[0]["placement"]; ok {
		t.Fatalf("the list carries placement: %s", r.body)
	}
}
