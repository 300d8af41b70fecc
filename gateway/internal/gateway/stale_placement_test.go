package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"berth.dev/broker/packet"
)

// A tenant_placement row left by a replicated run names a node that has
// since stopped (its registry row aged by its graceful stop, its port
// closed): a device of the tenant is served by the live node the tenant
// is placed on, not refused. A placement naming a live leader still wins
// over tenants.node_id.
func TestStalePlacementDoesNotMisroute(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.exec(t, `INSERT INTO nodes (id, mqtt_addr, admin_addr, capacity, heartbeat_at, draining)
		VALUES ('dev-node-3', $1, '127.0.0.1:1', 10, now() - interval '1 hour', true)`, e.dead)
	e.exec(t, `INSERT INTO tenant_placement (tenant_id, leader, replicas, epoch)
		VALUES ('ten_acme', 'dev-node-3', '{dev-node-1,dev-node-2,dev-node-3}', 7)`)

	id, tok := e.credential(t, tenantAcme, nil)
	c, rc, err := connect5(t, e.addr(KindTCP), id, tok)
	if err != nil || rc != 0 {
		t.Fatalf("connect with a stale placement: reason %#x, err %v; want success on node_1", byte(rc), err)
	}
	relayed(t, e, id, packet.Version5, "dev-5")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Publish(ctx, &paho.Publish{Topic: "devices/1/up", QoS: 1, Payload: []byte("served")}); err != nil {
		t.Fatalf("publish through node_1: %v", err)
	}

	// A live leader recorded in the placement is honoured: the device goes
	// to it, not to tenants.node_id (node_1).
	leader := newTestNode(t, e.secret)
	e.exec(t, `INSERT INTO nodes (id, mqtt_addr, admin_addr, capacity) VALUES ('node_leader', $1, '127.0.0.1:1', 10)`, leader.addr())
	e.exec(t, `UPDATE tenant_placement SET leader = 'node_leader', epoch = 8 WHERE tenant_id = 'ten_acme' AND epoch < 8`)
	waitUntil(t, func() bool {
		r, err := e.gw.d.Routes.Lookup(context.Background(), tenantAcme)
		return err == nil && r.NodeID == "node_leader"
	})
	id2, tok2 := e.credential(t, tenantAcme, nil)
	if _, rc, err := connect5(t, e.addr(KindTCP), id2, tok2); err != nil || rc != 0 {
		t.Fatalf("connect with a live leader: reason %#x, err %v", byte(rc), err)
	}
	nc := leader.next(t)
	if nc.err != nil || nc.info.TenantID != tenantAcme || nc.info.CredentialID != id2 {
		t.Fatalf("the leader got %+v, want %s of %s", nc, id2, tenantAcme)
	}
	select {
	case got := <-e.node.conns:
		t.Fatalf("tenants.node_id's node got a connection too: %+v", got)
	default:
	}
}
