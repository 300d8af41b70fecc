package node

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"berth.dev/broker/internal/placement"
)

// setPlanNotify moves tenant to plan and announces it as the API does
// (NOTIFY berth_quotas in the same transaction).
func setPlanNotify(t *testing.T, n *testNode, tenant, plan string) {
	t.Helper()
	_, err := n.pool.Exec(context.Background(),
		`WITH u AS (UPDATE tenants SET plan = $2 WHERE id = $1 RETURNING id) SELECT pg_notify('berth_quotas', id) FROM u`, tenant, plan)
	if err != nil {
		t.Fatal(err)
	}
}

// TestPlanDowngradeShrinksGroup: three nodes, a pro tenant (three voters)
// with a persistent session offline and 50 messages acknowledged. Moved to
// free (factor 1), the group's leader removes the two voters not wanted
// (handing its leadership over first if it is one of them); the two nodes
// delete their copies; tenant_placement names the one voter left; 50 more
// messages are acknowledged and the session receives all 100. Moved back
// to pro, the group grows to three voters again: the removed nodes, added
// back as learners, reopen the group empty and are caught up by snapshot.
func TestPlanDowngradeShrinksGroup(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	const tenant = replTenant
	cr := cred{tenant: tenant, id: "cred_shrink", acl: allowAll}
	lead := c.leader(t, tenant, nil)
	poll(t, 10*time.Second, "three voters", func() bool { return len(c.voterNodes(tenant)) == 3 })
	// The leader is made one of the voters the downgrade removes: it must
	// hand its leadership over before it can go.
	if keep := lead.repl.ranked(tenant, 1, nil)[0].id; lead.cfg.ID == keep {
		other := c.nodes[(c.index(lead)+1)%len(c.nodes)]
		if err := lead.groupOf(t, tenant).g.TransferLeadership(other.repl.self); err != nil {
			t.Fatal(err)
		}
		poll(t, 10*time.Second, "the leadership on "+other.cfg.ID, func() bool {
			_, err := other.repl.serving(tenant)
			return err == nil
		})
		lead = other
	}
	l := startDrainLoad(t, lead, cr)

	start := time.Now()
	setPlanNotify(t, lead, tenant, "free")
	var kept []string
	poll(t, 20*time.Second, "one voter left, the others' copies deleted", func() bool {
		kept = c.voterNodes(tenant)
		if len(kept) != 1 {
			return false
		}
		for _, n := range c.nodes {
			if n.cfg.ID != kept[0] && !n.copyGone(tenant) {
				return false
			}
		}
		return true
	})
	t.Logf("pro → free: voters %v after %v, two copies deleted", kept, time.Since(start).Round(time.Millisecond))
	next := c.leader(t, tenant, nil)
	if next.cfg.ID != kept[0] {
		t.Fatalf("leader %s, voter %s", next.cfg.ID, kept[0])
	}
	if next == lead {
		t.Fatal("the leader, a voter too many, still leads")
	}
	{
		select {
		case code := <-l.disc:
			if code != 0x9c {
				t.Fatalf("the former leader disconnected the publisher with %#x, want 0x9c", code)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the former leader kept the publisher")
		}
		l.pub = next.mqtt5Watched(t, cr, "pub", l.disc)
	}
	poll(t, 10*time.Second, "tenant_placement names the one voter", func() bool {
		p, err := placement.NewStore(lead.pool).Get(context.Background(), tenant)
		return err == nil && slices.Equal(p.Replicas, kept) && p.Leader == kept[0]
	})
	for i := 50; i < 100; i++ {
		if !l.publish(i) {
			t.Fatalf("publish %d on the shrunk group failed", i)
		}
	}
	l.checkDelivered(t, next, "after pro → free")

	start = time.Now()
	setPlanNotify(t, next, tenant, "pro")
	poll(t, 30*time.Second, "three voters again", func() bool { return len(c.voterNodes(tenant)) == 3 })
	t.Logf("free → pro: three voters after %v", time.Since(start).Round(time.Millisecond))
	for _, n := range c.nodes {
		poll(t, 10*time.Second, n.cfg.ID+" ready", func() bool {
			code, _, _ := getReadyz(t, n)
			return code == http.StatusOK
		})
		if n.repl.isRemoved(tenant) {
			t.Fatalf("%s votes again but keeps its tombstone", n.cfg.ID)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pub := c.leader(t, tenant, nil).mqtt5Watched(t, cred{tenant: tenant, id: "cred_grown", acl: allowAll}, "grown", make(chan byte, 1))
	if r, err := pub.Publish(ctx, &paho.Publish{Topic: "d/x", QoS: 1, Payload: []byte("grown")}); err != nil || r.ReasonCode >= 0x80 {
		t.Fatalf("publish on the regrown group: %v %v", r, err)
	}
}
