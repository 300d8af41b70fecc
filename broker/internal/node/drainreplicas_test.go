package node

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/broker/internal/tenanttest"
)

// startFourWithPlans is four replicating nodes with, besides replTenant
// (pro), tenants on each plan: free, business, and two more on pro.
func startFourWithPlans(t *testing.T) (*cluster, []string) {
	t.Helper()
	extra := map[string]string{"ten_f": "free", "ten_b": "business", "ten_p2": "pro", "ten_p3": "pro"}
	c := startClusterN(t, 4, func(pool *pgxpool.Pool) {
		for id, plan := range extra {
			tenanttest.Seed(t, pool, id, tenanttest.Pro())
			setPlan(t, pool, id, plan)
		}
	})
	tenants := []string{replTenant}
	for id := range extra {
		tenants = append(tenants, id)
	}
	slices.Sort(tenants)
	return c, tenants
}

// holders are the live nodes whose group of tenant lists their own raft
// id among its voters, and the voters as the group's leader sees them.
func (c *cluster) holders(tenant string, skip *testNode) (voting []*testNode, voters []uint64) {
	for _, n := range c.nodes {
		if n == skip {
			continue
		}
		n.repl.mu.Lock()
		rg := n.repl.groups[tenant]
		n.repl.mu.Unlock()
		if rg == nil {
			continue
		}
		m := rg.g.Members()
		if slices.Contains(m.Voters, n.repl.self) {
			voting = append(voting, n)
		}
		if rg.g.Leader() == n.repl.self {
			voters = m.Voters
		}
	}
	return voting, voters
}

// TestReplicationFactorPerPlan: a free tenant's group has one voter and
// is held by one node only; pro has three; business three too where
// -replicas caps it at 3 (the default). A free tenant moved to pro grows
// to three voters without anyone touching the nodes.
func TestReplicationFactorPerPlan(t *testing.T) {
	t.Parallel()
	c, _ := startFourWithPlans(t)
	for tenant, want := range map[string]int{"ten_f": 1, replTenant: 3, "ten_p2": 3, "ten_b": 3} {
		c.leader(t, tenant, nil)
		poll(t, 10*time.Second, fmt.Sprintf("%s has %d voters", tenant, want), func() bool {
			voting, voters := c.holders(tenant, nil)
			return len(voting) == want && len(voters) == want
		})
		open := 0
		for _, n := range c.nodes {
			if _, err := n.repl.group(tenant); err == nil {
				open++
			}
		}
		if open != want {
			t.Fatalf("%s: %d nodes hold its group, want %d", tenant, open, want)
		}
		t.Logf("%s: %d voters", tenant, want)
	}

	// A drain that keeps the replicas (a restart): leaderships move, the
	// node stays a voter of every group it was one of. On a node that does
	// not hold the free tenant's only replica (that one could not move).
	var keeper *testNode
	for _, n := range c.nodes {
		if _, err := n.repl.group("ten_f"); err != nil {
			keeper = n
			break
		}
	}
	voting, kept := keeper.repl.votingHere()
	before := append(voting, kept...)
	code, rep, err := postDrain(keeper, testToken, "replicas=keep")
	if err != nil || code != http.StatusOK || !rep.Drained || rep.ReplicasMoved != 0 || rep.Kept != len(before) || rep.Voting != 0 {
		t.Fatalf("drain keeping replicas: %d %+v %v (voting in %v)", code, rep, err, before)
	}
	if code, _, _ := postDrain(keeper, testToken, "replicas=some"); code != http.StatusBadRequest {
		t.Fatalf("replicas=some: %d, want 400", code)
	}
	// A ?timeout= that is no duration, or outside (0, the call's bound]:
	// 400, on both calls that wait (waitTimeout).
	for _, path := range []string{"/admin/drain?timeout=x", "/admin/drain?timeout=0s", "/admin/drain?timeout=11m", "/admin/rebalance?timeout=-1s", "/admin/rebalance?timeout=2h"} {
		req, _ := http.NewRequest("POST", "http://"+keeper.AdminAddr().String()+path, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("POST %s: %d, want 400", path, resp.StatusCode)
		}
	}
	req, _ := http.NewRequest("DELETE", "http://"+keeper.AdminAddr().String()+"/admin/drain", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE /admin/drain: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	for _, id := range before {
		if voting, _ := c.holders(id, nil); !slices.Contains(voting, keeper) {
			t.Fatalf("%s: the node drained with replicas=keep is no voter any more", id)
		}
	}
	t.Logf("drain with replicas=keep: %d leaderships moved, voter of %d groups still", rep.Moved, len(before))

	setPlan(t, c.nodes[0].pool, "ten_f", "pro")
	start := time.Now()
	poll(t, 20*time.Second, "ten_f grown to 3 voters after moving to pro", func() bool {
		voting, voters := c.holders("ten_f", nil)
		return len(voting) == 3 && len(voters) == 3
	})
	t.Logf("ten_f: 3 voters %v after the plan change (the nodes read plans every %v)", time.Since(start).Round(time.Millisecond), tenantsRefresh)
	lead := c.leader(t, "ten_f", nil)
	cr := cred{tenant: "ten_f", id: "cred_f", acl: allowAll}
	pub := lead.mqtt5Watched(t, cr, "pub", make(chan byte, 1))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if r, err := pub.Publish(ctx, &paho.Publish{Topic: "f/x", QoS: 1, Payload: []byte("x")}); err != nil || r.ReasonCode >= 0x80 {
		t.Fatalf("publish on the grown group: %v %v", r, err)
	}
}

// TestDrainMovesReplicasUnderLoad: four nodes, five tenants (one free:
// one voter). The leader of replTenant is drained while a publisher
// streams QoS 1 messages to it: its leaderships are handed over and every
// replica it holds moves to the fourth node (learner, promoted, the
// drained voter removed). The drain answers 200 once it leads nothing and
// votes in nothing; every group then has its factor of voters, none on the
// drained node; the drained node is stopped and every tenant still takes
// a QoS 1 publish (no quorum lost); an offline persistent session gets
// every acknowledged message.
func TestDrainMovesReplicasUnderLoad(t *testing.T) {
	t.Parallel()
	c, tenants := startFourWithPlans(t)
	const tenant = replTenant
	cr := cred{tenant: tenant, id: "cred_dr", acl: allowAll}
	lead := c.leader(t, tenant, nil)
	factor := map[string]int{}
	for _, id := range tenants {
		c.leader(t, id, nil)
		factor[id] = 3
		if id == "ten_f" {
			factor[id] = 1
		}
		poll(t, 10*time.Second, id+" formed", func() bool {
			voting, voters := c.holders(id, nil)
			return len(voting) == factor[id] && len(voters) == factor[id]
		})
	}
	voting, kept := lead.repl.votingHere() // kept: no node drains yet, so every wanted node votes
	voting = append(voting, kept...)
	if len(voting) == 0 {
		t.Fatal("before the drain: the node votes in no group")
	}
	t.Logf("drained node %s votes in %d groups: %v", lead.cfg.ID, len(voting), voting)

	l := startDrainLoad(t, lead, cr)
	done := drainAsync(lead)
	var result *drained
	moved := false
	for i := 50; i < 20000 && (result == nil || i < 150); i++ {
		if result == nil {
			select {
			case d := <-done:
				result = &d
			default:
			}
		}
		if l.publish(i) {
			continue
		}
		select {
		case code := <-l.disc:
			if code != 0x9c {
				t.Fatalf("the drained node disconnected the publisher with %#x, want 0x9c", code)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("publish %d failed without a DISCONNECT 0x9c", i)
		}
		if moved {
			t.Fatalf("publish %d at the new leader failed", i)
		}
		moved = true
		next := c.leader(t, tenant, lead)
		l.pub = next.mqtt5Watched(t, cr, "pub", l.disc)
	}
	if result == nil {
		select {
		case d := <-done:
			result = &d
		case <-time.After(35 * time.Second):
			t.Fatal("the drain never answered")
		}
	}
	rep := result.rep
	if result.err != nil || result.code != http.StatusOK || !rep.Drained || rep.Voting != 0 || rep.Kept != 0 ||
		len(rep.Remaining) != 0 || rep.ReplicasMoved != len(voting) || rep.Moved < 1 {
		t.Fatalf("drain: %d %+v %v", result.code, rep, result.err)
	}
	if !moved {
		t.Fatal("the publisher was never moved off the drained node")
	}
	t.Logf("drain answered in %d ms: %d leaderships and %d replicas moved, %d acknowledged so far", rep.TookMS, rep.Moved, rep.ReplicasMoved, len(l.acked))

	for _, id := range tenants {
		poll(t, 10*time.Second, id+": its factor of voters, none on the drained node", func() bool {
			_, voters := c.holders(id, lead)
			return len(voters) == factor[id] && !slices.Contains(voters, lead.repl.self)
		})
	}

	lead.kill(t)
	for _, id := range tenants {
		n := c.leader(t, id, lead)
		pc := n.mqtt5Watched(t, cred{tenant: id, id: "cred_after", acl: allowAll}, "after", make(chan byte, 1))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r, err := pc.Publish(ctx, &paho.Publish{Topic: "a/x", QoS: 1, Payload: []byte("after")})
		cancel()
		if err != nil || r.ReasonCode >= 0x80 {
			t.Fatalf("%s after the drained node stopped: %v %v", id, r, err)
		}
		if id == tenant {
			l.pub = pc
			for i := 20000; i < 20050; i++ {
				if !l.publish(i) {
					t.Fatalf("publish %d after the drained node stopped failed", i)
				}
			}
		}
	}

	next := c.leader(t, tenant, lead)
	l.checkDelivered(t, next, "after the drain and the stop")
}
