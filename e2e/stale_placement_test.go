package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/e2e/internal/stack"
)

// A replicated run (BERTH_NODES=3 make run, make bench-repl) leaves
// tenant_placement rows behind that name its nodes. Back on one node that
// does not replicate, a device of the tenant is served by that live node,
// through the gateway, although the row's leader is a node that has
// stopped (its port closed, its registry row aged by its own graceful
// stop); no operator deletes rows by hand. A placement naming the live
// node as leader is still honoured over a tenants.node_id that names the
// stopped one.
func TestStalePlacementServedByLiveNode(t *testing.T) {
	t.Parallel()
	s := stack.New(t, bins, stack.Options{Gateways: 2})
	a := s.Signup(t)
	c := s.CreateCredential(t, a, []string{"#"}, []string{"#"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := pgxpool.New(ctx, s.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	var live string
	if err := db.QueryRow(ctx, `SELECT node_id FROM tenants WHERE id = $1`, a.Tenant.ID).Scan(&live); err != nil {
		t.Fatal(err)
	}

	// A node of the replicated run: a real node process, registered, then
	// stopped with SIGTERM as Ctrl-C on the stack stops it.
	goneMQTT, goneAdmin := stack.FreeAddr(t), stack.FreeAddr(t)
	gone := stack.Start(t, "stale-node-3", bins.Broker, []string{
		"-node-id", "stale-node-3", "-internal-listen", goneMQTT, "-admin-listen", goneAdmin,
		"-data", t.TempDir(), "-log-format", "text", "-jwks-url", s.API + "/v1/.well-known/jwks.json",
	}, []string{"DATABASE_URL=" + s.DatabaseURL, "BERTH_PROXY_SECRET=" + s.ProxySecret, "BERTH_NODE_TOKEN=" + s.NodeToken})
	// Its listeners open before it registers: wait for its row.
	for deadline := time.Now().Add(30 * time.Second); ; {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM nodes WHERE id = 'stale-node-3'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if gone.Exited() || time.Now().After(deadline) {
			t.Fatalf("stale-node-3 did not register within 30 s\n%s", gone.Log())
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
	if err := gone.Stop(10 * time.Second); err != nil {
		t.Fatalf("stale-node-3 stop: %v", err)
	}
	var aged bool
	if err := db.QueryRow(ctx, `SELECT draining AND heartbeat_at < now() - interval '30 seconds' FROM nodes
		WHERE id = 'stale-node-3'`).Scan(&aged); err != nil || !aged {
		t.Fatalf("stale-node-3's row after its stop: aged %v, %v; want draining with an old heartbeat", aged, err)
	}
	exec(`INSERT INTO tenant_placement (tenant_id, leader, replicas, epoch) VALUES ($1, 'stale-node-3', $2, 7)`,
		a.Tenant.ID, []string{live, "stale-node-3"})

	sub := mustConnectV5(t, s.Gateways[0].MQTT, c, "stale-sub")
	sub.subscribe(t, "stale/#")
	pub := mustConnectV5(t, s.Gateways[0].MQTT, c, "stale-pub")
	if rc := pub.publishCode(t, "stale/1", "served", false); rc != 0 {
		t.Fatalf("publish: PUBACK %#x", rc)
	}
	sub.expect(t, "stale/1=served")

	// The live node recorded as leader wins over tenants.node_id naming the
	// stopped node. The second gateway has not routed the tenant yet, so
	// nothing cached answers for it.
	exec(`UPDATE tenants SET node_id = 'stale-node-3' WHERE id = $1`, a.Tenant.ID)
	exec(`UPDATE tenant_placement SET leader = $2, epoch = 8 WHERE tenant_id = $1 AND epoch < 8`, a.Tenant.ID, live)
	pub2 := mustConnectV5(t, s.Gateways[1].MQTT, c, "leader-pub")
	if rc := pub2.publishCode(t, "stale/2", "led", false); rc != 0 {
		t.Fatalf("publish through the leader: PUBACK %#x", rc)
	}
	sub.expect(t, "stale/2=led")
}
