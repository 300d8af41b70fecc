package route

import (
	"context"
	"errors"
	"testing"
	"time"

	"berth.dev/testenv"
)

// A replicated tenant routes to the leader recorded in tenant_placement,
// follows it through the trigger's NOTIFY, re-reads it after a lost LISTEN,
// and falls back to tenants.node_id when the row goes.
func TestPlacementLeader(t *testing.T) {
	pool := testenv.Postgres(t)
	seed(t, pool)
	exec(t, pool, `INSERT INTO nodes (id, mqtt_addr, admin_addr, capacity) VALUES ('node_3', '10.0.0.3:7883', '10.0.0.3:7880', 100)`)
	tb := start(t, pool, Options{TTL: time.Hour, NegativeTTL: time.Hour})
	ctx := context.Background()
	if r, err := tb.Lookup(ctx, "ten_placed"); err != nil || r.NodeID != "node_1" || r.Epoch != 0 {
		t.Fatalf("before any placement: %+v, %v", r, err)
	}
	at := func(node, addr string, epoch uint64) func(Route, error) bool {
		return func(r Route, err error) bool {
			return err == nil && r.NodeID == node && r.NodeAddr == addr && r.Epoch == epoch && r.Slug == "placed" && r.MaxConnections == 25
		}
	}

	t.Run("a recorded leader overrides tenants.node_id", func(t *testing.T) {
		exec(t, pool, `INSERT INTO tenant_placement (tenant_id, leader, replicas, epoch) VALUES ('ten_placed', 'node_2', '{node_1,node_2,node_3}', 3)`)
		waitFor(t, tb, "ten_placed", at("node_2", "10.0.0.2:7883", 3))
	})
	t.Run("a new epoch moves it", func(t *testing.T) {
		exec(t, pool, `UPDATE tenant_placement SET leader = 'node_3', epoch = 4 WHERE tenant_id = 'ten_placed' AND epoch < 4`)
		waitFor(t, tb, "ten_placed", at("node_3", "10.0.0.3:7883", 4))
	})
	t.Run("Refresh reads a change whose NOTIFY has not arrived", func(t *testing.T) {
		exec(t, pool, `ALTER TABLE tenant_placement DISABLE TRIGGER tenant_placement_changed`)
		t.Cleanup(func() { exec(t, pool, `ALTER TABLE tenant_placement ENABLE TRIGGER tenant_placement_changed`) })
		exec(t, pool, `UPDATE tenant_placement SET leader = 'node_1', epoch = 5 WHERE tenant_id = 'ten_placed'`)
		if r, _ := tb.Lookup(ctx, "ten_placed"); r.NodeID != "node_3" {
			t.Fatalf("changed without a notification: %+v", r) // still cached
		}
		if r, err := tb.Refresh(ctx, "ten_placed"); !at("node_1", "10.0.0.1:7883", 5)(r, err) {
			t.Fatalf("Refresh = %+v, %v", r, err)
		}
		if r, err := tb.Lookup(ctx, "ten_placed"); !at("node_1", "10.0.0.1:7883", 5)(r, err) {
			t.Fatalf("Lookup after Refresh = %+v, %v", r, err)
		}
	})
	t.Run("a lost LISTEN re-reads the leader", func(t *testing.T) {
		exec(t, pool, `ALTER TABLE tenant_placement DISABLE TRIGGER tenant_placement_changed`)
		exec(t, pool, `UPDATE tenant_placement SET leader = 'node_2', epoch = 6 WHERE tenant_id = 'ten_placed'`)
		exec(t, pool, `ALTER TABLE tenant_placement ENABLE TRIGGER tenant_placement_changed`)
		if r, _ := tb.Lookup(ctx, "ten_placed"); r.NodeID != "node_1" {
			t.Fatalf("changed without a notification: %+v", r)
		}
		exec(t, pool, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'LISTEN%'`)
		waitFor(t, tb, "ten_placed", at("node_2", "10.0.0.2:7883", 6))
	})
	t.Run("a leader whose node row goes falls back to tenants.node_id", func(t *testing.T) {
		exec(t, pool, `DELETE FROM nodes WHERE id = 'node_2'`) // leader SET NULL: an UPDATE, notified
		waitFor(t, tb, "ten_placed", at("node_1", "10.0.0.1:7883", 6))
	})
	t.Run("deleting the placement falls back to tenants.node_id", func(t *testing.T) {
		exec(t, pool, `UPDATE tenant_placement SET leader = 'node_3', epoch = 7 WHERE tenant_id = 'ten_placed'`)
		waitFor(t, tb, "ten_placed", at("node_3", "10.0.0.3:7883", 7))
		exec(t, pool, `DELETE FROM tenant_placement WHERE tenant_id = 'ten_placed'`)
		waitFor(t, tb, "ten_placed", at("node_1", "10.0.0.1:7883", 0))
	})
	t.Run("a placement without a reachable node is not placed", func(t *testing.T) {
		exec(t, pool, `INSERT INTO tenant_placement (tenant_id, leader, epoch) VALUES ('ten_unplaced', 'node_3', 1)`)
		waitFor(t, tb, "ten_unplaced", func(r Route, err error) bool { return err == nil && r.NodeAddr == "10.0.0.3:7883" })
		exec(t, pool, `DELETE FROM tenant_placement WHERE tenant_id = 'ten_unplaced'`)
		waitFor(t, tb, "ten_unplaced", func(_ Route, err error) bool { return errors.Is(err, ErrNotPlaced) })
	})
}
