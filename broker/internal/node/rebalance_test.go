package node

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/broker/internal/tenanttest"
	"berth.dev/testenv"
)

// testMoveRate is the move rate of the rebalance test's nodes: low, so
// that the devices of one tenant take seconds to move and the bound shows.
const testMoveRate = 5

// rebalanceTenants are the rebalance test's tenants and their plans.
var rebalanceTenants = map[string]string{
	replTenant: "pro", "ten_rp1": "pro", "ten_rp2": "pro", "ten_rp3": "pro",
	"ten_rf1": "free", "ten_rf2": "free", "ten_rf3": "free", "ten_rf4": "free", "ten_rf5": "free", "ten_rf6": "free",
}

// startJoinCluster is two replicating nodes holding every tenant of
// rebalanceTenants, then a third node joining: started with the two as
// peers, the two restarted one after the other with it among theirs (a
// -peers change rolling through the cluster).
func startJoinCluster(t *testing.T) *cluster {
	t.Helper()
	url := testenv.DatabaseURL(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	q := tenanttest.Pro()
	q.ClientMsgsPerSec, q.MaxMsgsPerSec = 1_000_000, 1_000_000
	for id, plan := range rebalanceTenants {
		tenanttest.Seed(t, pool, id, q)
		setPlan(t, pool, id, plan)
	}
	c := &cluster{url: url, ids: []string{"node-r1", "node-r2", "node-r3"}}
	addrs := freePorts(t, 3)
	cfgOf := func(i int, peers ...int) func(*Config) {
		return func(cfg *Config) {
			cfg.Peers = nil
			for _, j := range peers {
				cfg.Peers = append(cfg.Peers, Peer{ID: c.ids[j], Addr: addrs[j], Zone: fmt.Sprintf("z%d", j)})
			}
			cfg.ID, cfg.PeerListen, cfg.PeerSecret, cfg.Zone = c.ids[i], addrs[i], testSecret, fmt.Sprintf("z%d", i)
			cfg.RaftTick, cfg.ProposeTimeout = testRaftTick, 2*time.Second
			cfg.MoveDisconnectRate = testMoveRate
			if os.Getenv("REPLICATION_LOG") != "" {
				cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", c.ids[i])
			}
		}
	}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	c.nodes = []*testNode{
		startNodeCfg(t, url, dirs[0], false, cfgOf(0, 1)),
		startNodeCfg(t, url, dirs[1], false, cfgOf(1, 0)),
	}
	c.waitFormed(t, 2)
	start := time.Now()
	c.nodes = append(c.nodes, startNodeCfg(t, url, dirs[2], false, cfgOf(2, 0, 1)))
	for i, peers := range [][]int{{1, 2}, {0, 2}} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := c.nodes[i].Shutdown(ctx); err != nil {
			t.Logf("restarting %s: %v", c.ids[i], err)
		}
		cancel()
		c.nodes[i] = startNodeCfg(t, url, dirs[i], false, cfgOf(i, peers...))
		c.waitFormed(t, 0) // a pro group grows once its leader knows the new node
	}
	c.waitFormed(t, 3)
	t.Logf("node-r3 joined, node-r1 and node-r2 restarted with it among their peers: %v", time.Since(start).Round(time.Millisecond))
	return c
}

// waitFormed waits until every tenant is served and its group has its
// factor of voters (pro: pro, unless 0, then any; free: 1), none moving.
func (c *cluster) waitFormed(t *testing.T, pro int) {
	t.Helper()
	for id, plan := range rebalanceTenants {
		want := pro
		if plan == "free" {
			want = 1
		}
		poll(t, 20*time.Second, fmt.Sprintf("%s served with %d voters", id, want), func() bool {
			lead := c.servedBy(id)
			if lead == nil {
				return false
			}
			m := lead.groupOf(t, id).g.Members()
			return (want == 0 || len(m.Voters) == want) && len(m.Learners) == 0 && !m.Joint
		})
	}
}

// TestRebalanceOntoJoinedNode: tenants live on two nodes (pro: both
// voters; free: one); a third joins (a -peers change rolled through the
// cluster): pro groups grow to it by themselves, but it leads nothing and
// holds no free tenant. A tenant led elsewhere and preferred by the new
// node has a QoS 1 publisher, an offline persistent session and 15 idle
// devices on its leader. A rebalance is started and aborted once a move
// has begun: every group is left healthy (a leader, its factor of voters,
// no learner, not joint) and takes a QoS 1 publish. A second rebalance
// answers 200 with every tenant at its target (voters = wanted replicas,
// leader = the preferred node), the new node holding its share of
// replicas and leaderships; the idle devices were disconnected with 0x9C
// at most testMoveRate a second (+1 for delivery jitter at a window's
// edge); a third rebalance moves nothing; the offline session receives
// every acknowledged message (0 lost).
func TestRebalanceOntoJoinedNode(t *testing.T) {
	t.Parallel()
	c := startJoinCluster(t)
	r3 := c.node("node-r3")
	if ok, why := c.atTarget(t, r3); ok {
		t.Fatal("balanced before any rebalance: the test moves nothing")
	} else {
		t.Logf("before: %s", why)
	}
	freeOn3 := func() int {
		n := 0
		for id, plan := range rebalanceTenants {
			if plan == "free" && slices.Contains(c.states(t)[id].voters, r3.repl.self) {
				n++
			}
		}
		return n
	}
	if n := freeOn3(); n != 0 {
		t.Fatalf("node-r3 holds %d free tenants before any rebalance", n)
	}

	// The loaded tenant: a pro tenant the new node should lead, led
	// elsewhere now.
	var tenant string
	for _, id := range []string{replTenant, "ten_rp1", "ten_rp2", "ten_rp3"} {
		if pm, _ := r3.repl.preferred(id); pm.id == "node-r3" {
			tenant = id
			break
		}
	}
	if tenant == "" {
		t.Fatal("node-r3 is preferred by none of the pro tenants: pick other tenant ids")
	}
	if lead := c.servedBy(tenant); lead == r3 {
		other := c.nodes[0]
		if err := r3.groupOf(t, tenant).g.TransferLeadership(other.repl.self); err != nil {
			t.Fatal(err)
		}
		poll(t, 10*time.Second, tenant+" led by node-r1", func() bool { return c.servedBy(tenant) == other })
	}
	lead := c.servedBy(tenant)
	cr := cred{tenant: tenant, id: "cred_rb", acl: allowAll}
	l := startDrainLoad(t, lead, cr)
	var idle idleDevices
	idle.connect(t, lead, cred{tenant: tenant, id: "cred_idle", acl: allowAll}, 15)
	lead.pacer.observe(idle.slot) // the node's own disconnect schedule
	t.Logf("%s led by %s: 50 acknowledged, 15 idle devices connected", tenant, lead.cfg.ID)

	i := 50
	moved := 0
	// publishUntil publishes one message at a time, following the
	// tenant's leader, until done says so.
	publishUntil := func(what string, done func() bool) {
		t.Helper()
		deadline := time.Now().Add(45 * time.Second)
		for ; !done(); i++ {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 45 s", what)
			}
			if l.publish(i) {
				continue
			}
			select {
			case code := <-l.disc:
				if code != 0x9c {
					t.Fatalf("publisher disconnected with %#x, want 0x9c", code)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("publish %d failed without a DISCONNECT 0x9c", i)
			}
			moved++
			l.pub = c.connectLeader(t, tenant, cr, "pub", l.disc)
		}
	}

	// Abort once a move has begun (a leader or the voters of a group
	// changed, or a learner joined): watched apart from the publisher,
	// whose publish may wait seconds for a PUBACK that does not come.
	before := c.states(t)
	done := rebalanceAsync(r3)
	abortErr := make(chan error, 1)
	go func() {
		for deadline := time.Now().Add(30 * time.Second); !c.moveBegun(before) && time.Now().Before(deadline); {
			time.Sleep(2 * time.Millisecond) // polling the groups: nothing to wait on
		}
		req, _ := http.NewRequest("DELETE", "http://"+r3.AdminAddr().String()+"/admin/rebalance", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("DELETE /admin/rebalance: %s", resp.Status)
			}
		}
		abortErr <- err
	}()
	var res rebalanced
	publishUntil("the aborted rebalance answers", func() bool {
		select {
		case res = <-done:
			return true
		default:
			return false
		}
	})
	if err := <-abortErr; err != nil {
		t.Fatal(err)
	}
	if res.err != nil || res.code != http.StatusServiceUnavailable || res.rep.Balanced {
		t.Fatalf("aborted rebalance: %d %+v %v", res.code, res.rep, res.err)
	}
	_, why := c.atTarget(t, r3)
	t.Logf("aborted after %d ms, %d acknowledged so far; not balanced: %s", res.rep.TookMS, len(l.acked), why)
	publishUntil("every group healthy after the abort", func() bool {
		for id, plan := range rebalanceTenants {
			n := c.servedBy(id)
			if n == nil {
				return false
			}
			m := n.groupOf(t, id).g.Members()
			if want := map[string]int{"pro": 3, "free": 1}[plan]; len(m.Voters) != want || len(m.Learners) > 0 || m.Joint {
				return false
			}
		}
		return true
	})
	for id := range rebalanceTenants {
		if id == tenant {
			continue
		}
		pc := c.connectLeader(t, id, cred{tenant: id, id: "cred_h", acl: allowAll}, "healthy", make(chan byte, 1))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r, err := pc.Publish(ctx, &paho.Publish{Topic: "h/x", QoS: 1, Payload: []byte("x")})
		cancel()
		if err != nil || r.ReasonCode >= 0x80 {
			t.Fatalf("%s after the abort: %v %v", id, r, err)
		}
		_ = pc.Disconnect(&paho.Disconnect{})
	}

	// The rebalance, to the end.
	done = rebalanceAsync(r3)
	publishUntil("the rebalance answers", func() bool {
		select {
		case res = <-done:
			return true
		default:
			return false
		}
	})
	if res.err != nil || res.code != http.StatusOK || !res.rep.Balanced {
		_, why := c.atTarget(t, r3)
		t.Fatalf("rebalance: %d %+v %v; %s", res.code, res.rep, res.err, why)
	}
	if ok, why := c.atTarget(t, r3); !ok {
		t.Fatalf("rebalance answered balanced, but %s", why)
	}
	tr, rp := c.moves()
	var share rebalanceNode
	for _, n := range res.rep.Nodes {
		if n.ID == "node-r3" {
			share = n
		}
	}
	holds, leads := 0, 0
	after := c.states(t)
	for id := range rebalanceTenants {
		if slices.Contains(after[id].voters, r3.repl.self) {
			holds++
		}
		if c.servedBy(id) == r3 {
			leads++
		}
	}
	if share.Leaderships == 0 || holds != share.Replicas || leads != share.Leaderships || freeOn3() == 0 || rp == 0 {
		t.Fatalf("node-r3 holds %d replicas (%d free tenants) and leads %d tenants, its target %+v; %d replicas moved", holds, freeOn3(), leads, share, rp)
	}
	t.Logf("rebalanced in %d ms, %d acknowledged so far, the publisher moved %d times (%d transfers, %d replicas moved in all): node-r3 holds %d replicas, leads %d; targets %+v",
		res.rep.TookMS, len(l.acked), moved, tr, rp, holds, leads, res.rep.Nodes)

	// The idle devices of the moved tenant: all told 0x9C, at the rate.
	poll(t, 15*time.Second, "every idle device disconnected", func() bool {
		_, total := idle.perSecond()
		return total == 15
	})
	most, _ := idle.perSecond()
	idle.mu.Lock()
	codes := slices.Clone(idle.codes)
	span := slices.MaxFunc(idle.at, time.Time.Compare).Sub(slices.MinFunc(idle.at, time.Time.Compare))
	idle.mu.Unlock()
	for _, code := range codes {
		if code != 0x9c {
			t.Fatalf("idle device disconnected with %#x, want 0x9c", code)
		}
	}
	// The bound is checked on the node's schedule: the devices' own
	// receive times bunch up on a busy machine (logged only).
	slots, mostSlots := idle.slotsPerSecond()
	t.Logf("15 idle devices moved over %v, at most %d received in one second; the node's pacer handed out %d slots, at most %d in one second (rate %d/s)", span.Round(time.Millisecond), most, slots, mostSlots, testMoveRate)
	if slots < 15 {
		t.Fatalf("the pacer handed out %d slots for 15 devices: some were disconnected unpaced", slots)
	}
	if mostSlots > testMoveRate {
		t.Fatalf("%d disconnects scheduled within one second, the rate is %d/s", mostSlots, testMoveRate)
	}

	// Nothing to do: nothing moves. A group may still elect by itself
	// (a missed heartbeat on a busy machine), which a rebalance rightly
	// moves back: up to 3 tries, each asked of a balanced cluster.
	for try := 1; ; try++ {
		poll(t, 10*time.Second, "balanced before the next rebalance", func() bool { ok, _ := c.atTarget(t, r3); return ok })
		before = c.states(t)
		tr, rp = c.moves()
		code, rep, err := postRebalance(r3)
		if err != nil || code != http.StatusOK || !rep.Balanced {
			t.Fatalf("rebalance with nothing to do: %d %+v %v", code, rep, err)
		}
		tr2, rp2 := c.moves()
		changed := ""
		for id, s := range c.states(t) {
			if b := before[id]; b.leader != s.leader || b.term != s.term || !slices.Equal(b.voters, s.voters) {
				changed += fmt.Sprintf(" %s: %+v → %+v;", id, b, s)
			}
		}
		if tr2 == tr && rp2 == rp && rep.LeadershipsMoved == 0 && rep.ReplicasMoved == 0 && changed == "" {
			t.Logf("rebalance with nothing to do: nothing moved (%d ms, try %d)", rep.TookMS, try)
			break
		}
		if try == 3 {
			t.Fatalf("rebalance with nothing to do moved: transfers %d → %d, replaced %d → %d;%s", tr, tr2, rp, rp2, changed)
		}
		t.Logf("try %d: a group changed during the call (transfers %d → %d):%s", try, tr, tr2, changed)
	}

	if moved == 0 {
		t.Fatal("the publisher was never moved")
	}
	l.checkDelivered(t, c.leader(t, tenant, nil), "after the rebalances")
}
