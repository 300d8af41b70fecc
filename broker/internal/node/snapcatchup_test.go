package node

import (
	"fmt"
	"testing"
	"time"
)

// smallSnapshots makes groups compact every 40 entries and keep only 5
// before a snapshot: a follower down for a few hundred entries can only
// be caught up from a snapshot.
func smallSnapshots(cfg *Config) { cfg.RaftSnapshotEntries, cfg.RaftCatchUpEntries = 40, 5 }

// restart starts node i again on its data directory and configuration
// (after kill) and puts it in the cluster.
func (c *cluster) restart(t *testing.T, i int) *testNode {
	t.Helper()
	cfg := c.nodes[i].cfg
	n := startNodeCfg(t, c.url, cfg.DataDir, false, func(nc *Config) { *nc = cfg })
	c.nodes[i] = n
	return n
}

func (c *cluster) index(n *testNode) int {
	for i, m := range c.nodes {
		if m == n {
			return i
		}
	}
	return -1
}

// groupOf is the tenant's raft group on n (opened at start).
func (n *testNode) groupOf(t *testing.T, tenant string) *replGroup {
	t.Helper()
	rg, err := n.repl.group(tenant)
	if err != nil {
		t.Fatalf("%s holds no replica of %s: %v", n.cfg.ID, tenant, err)
	}
	return rg
}

// TestFarBehindFollowerCatchesUpFromSnapshot: a follower is down while the
// leader takes a few hundred QoS 1 messages and compacts its raft log far
// past the follower's index. The follower comes back: the leader streams
// it a checkpoint of the tenant's store with the snapshot, it installs it
// and catches up. Then the leader is killed and that follower, promoted,
// serves every acknowledged message to a persistent session that was
// offline throughout.
func TestFarBehindFollowerCatchesUpFromSnapshot(t *testing.T) {
	t.Parallel()
	c := startCluster(t, smallSnapshots)
	const tenant = replTenant
	cr := cred{tenant: tenant, id: "cred_s", acl: allowAll}
	got := make(chan string, 4096)
	lead := subscribedAtLeader(t, c, tenant, cr, "sub", "s/#", got)
	var behind *testNode
	for _, n := range c.nodes {
		if n != lead {
			behind = n
			break
		}
	}
	bi := c.index(behind)
	behindApplied := behind.groupOf(t, tenant).g.Applied()
	behind.kill(t)

	// With one voter down a slow fsync on the other follower can depose
	// the leader (leaderpub_test.go): the publisher then goes on at the
	// leader elected, as a device through the gateway would.
	pub := newLeaderPublisher(t, c, tenant, cr, "pub")
	const total = 300
	var want []string
	for i := range total {
		payload := fmt.Sprintf("m%04d", i)
		if r := pub.publish(t, "s/x", payload); r >= 0x80 {
			t.Fatalf("PUBACK %d: %#x", i, r)
		}
		want = append(want, "s/x="+payload)
	}
	if lead != pub.at {
		t.Logf("the leadership moved from %s to %s while the follower was down", lead.cfg.ID, pub.at.cfg.ID)
		lead = pub.at
	}
	lg := lead.groupOf(t, tenant).g
	first := lg.FirstIndex()
	if first <= behindApplied+1 {
		t.Fatalf("the leader's log still starts at %d; the follower stopped at %d: no snapshot needed", first, behindApplied)
	}
	t.Logf("leader at applied %d, log from %d; follower stopped at %d", lg.Applied(), first, behindApplied)

	start := time.Now()
	back := c.restart(t, bi)
	bg := back.groupOf(t, tenant).g
	poll(t, 20*time.Second, "the restarted follower caught up", func() bool {
		return bg.Applied() >= lg.Applied()
	})
	st := back.repl.host.Stats()
	if st.SnapshotsInstalled == 0 {
		t.Fatalf("the follower caught up without installing a snapshot: %+v", st)
	}
	t.Logf("follower caught up in %v (%d snapshot(s) installed)", time.Since(start).Round(time.Millisecond), st.SnapshotsInstalled)

	lead.kill(t)
	next := c.leader(t, tenant, lead)
	if next != back {
		t.Logf("%s elected; handing the leadership to the caught-up follower", next.cfg.ID)
		if err := next.groupOf(t, tenant).g.TransferLeadership(back.repl.self); err != nil {
			t.Fatal(err)
		}
		poll(t, 15*time.Second, "the caught-up follower leads", func() bool {
			_, err := back.repl.serving(tenant)
			return err == nil
		})
	}

	_, ack := back.persistent5(t, cr, "sub", false, got)
	if ack.ReasonCode != 0 || !ack.SessionPresent {
		t.Fatalf("subscriber at the promoted follower: reason %#x, session present %v", ack.ReasonCode, ack.SessionPresent)
	}
	seen := map[string]int{}
	deadline := time.After(15 * time.Second)
	for missing := len(want); missing > 0; {
		select {
		case m := <-got:
			if seen[m]++; seen[m] == 1 {
				missing--
			}
		case <-deadline:
			t.Fatalf("%d of %d acknowledged messages never delivered (first missing %s)", missing, len(want), firstMissing(want, seen))
		}
	}
	t.Logf("all %d acknowledged messages delivered by the follower that was caught up from a snapshot", len(want))
}
