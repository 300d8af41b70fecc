package route

import (
	"context"
	"testing"
	"time"

	"berth.dev/testenv"
)

// A placement row naming a node that is not live (stopped: its heartbeat
// aged at once; killed: its heartbeat older than the live window) does not
// beat a live node that can serve the tenant; a live leader still wins,
// draining or not (a move under way), and a leader that comes back wins
// again.
func TestStalePlacementLeaderNotPreferred(t *testing.T) {
	pool := testenv.Postgres(t)
	seed(t, pool)
	// node_gone stopped gracefully (registry.Shutdown), node_killed died
	// 40 s ago (no heartbeat since), node_3 is live.
	exec(t, pool, `INSERT INTO nodes (id, mqtt_addr, admin_addr, capacity, heartbeat_at, draining) VALUES
		('node_gone', '10.0.0.9:7903', '10.0.0.9:7900', 100, now() - interval '1 hour', true),
		('node_killed', '10.0.0.8:7893', '10.0.0.8:7890', 100, now() - interval '40 seconds', false),
		('node_3', '10.0.0.3:7883', '10.0.0.3:7880', 100, now(), false)`)
	tb := start(t, pool, Options{TTL: time.Hour, NegativeTTL: time.Hour})
	ctx := context.Background()
	check := func(t *testing.T, tenant, node, addr string, epoch uint64) {
		t.Helper()
		r, err := tb.Refresh(ctx, tenant)
		if err != nil || r.NodeID != node || r.NodeAddr != addr || r.Epoch != epoch {
			t.Fatalf("route of %s = %+v, %v; want %s at %s, epoch %d", tenant, r, err, node, addr, epoch)
		}
	}

	t.Run("a stopped leader does not beat tenants.node_id", func(t *testing.T) {
		exec(t, pool, `INSERT INTO tenant_placement (tenant_id, leader, replicas, epoch)
			VALUES ('ten_placed', 'node_gone', '{node_gone,node_killed,node_3}', 9)`)
		check(t, "ten_placed", "node_1", "10.0.0.1:7883", 9)
	})
	t.Run("a killed leader does not either", func(t *testing.T) {
		exec(t, pool, `UPDATE tenant_placement SET leader = 'node_killed', epoch = 10 WHERE tenant_id = 'ten_placed'`)
		check(t, "ten_placed", "node_1", "10.0.0.1:7883", 10)
	})
	t.Run("a live leader wins, draining or not", func(t *testing.T) {
		exec(t, pool, `UPDATE tenant_placement SET leader = 'node_2', epoch = 11 WHERE tenant_id = 'ten_placed'`)
		check(t, "ten_placed", "node_2", "10.0.0.2:7883", 11)
		exec(t, pool, `UPDATE nodes SET draining = true WHERE id = 'node_2'`) // a drain moving its tenants off
		check(t, "ten_placed", "node_2", "10.0.0.2:7883", 11)
	})
	t.Run("leader and tenants.node_id dead: a live replica", func(t *testing.T) {
		exec(t, pool, `UPDATE tenant_placement SET leader = 'node_gone', epoch = 12 WHERE tenant_id = 'ten_placed'`)
		exec(t, pool, `UPDATE tenants SET node_id = 'node_killed' WHERE id = 'ten_placed'`)
		check(t, "ten_placed", "node_3", "10.0.0.3:7883", 12)
	})
	t.Run("nothing live: the leader, as before", func(t *testing.T) {
		exec(t, pool, `UPDATE nodes SET heartbeat_at = now() - interval '1 hour' WHERE id = 'node_3'`)
		check(t, "ten_placed", "node_gone", "10.0.0.9:7903", 12)
	})
	t.Run("the leader back: it wins again", func(t *testing.T) {
		exec(t, pool, `UPDATE nodes SET heartbeat_at = now(), draining = false WHERE id = 'node_gone'`)
		check(t, "ten_placed", "node_gone", "10.0.0.9:7903", 12)
		exec(t, pool, `UPDATE nodes SET heartbeat_at = now() WHERE id = 'node_3'`)
		check(t, "ten_placed", "node_gone", "10.0.0.9:7903", 12)
	})
	t.Run("without a placement row tenants.node_id stays, live or not", func(t *testing.T) {
		exec(t, pool, `UPDATE tenants SET node_id = 'node_killed' WHERE id = 'ten_unplaced'`)
		check(t, "ten_unplaced", "node_killed", "10.0.0.8:7893", 0)
	})
	t.Run("the window is an option", func(t *testing.T) {
		wide := start(t, pool, Options{LiveWindow: time.Minute})
		exec(t, pool, `UPDATE tenant_placement SET leader = 'node_killed', epoch = 13 WHERE tenant_id = 'ten_placed'`)
		exec(t, pool, `UPDATE tenants SET node_id = 'node_1' WHERE id = 'ten_placed'`)
		if r, err := wide.Refresh(ctx, "ten_placed"); err != nil || r.NodeID != "node_killed" {
			t.Fatalf("40 s old heartbeat in a 1 min window: %+v, %v; want node_killed", r, err)
		}
		check(t, "ten_placed", "node_1", "10.0.0.1:7883", 13) // 30 s by default
	})
}
