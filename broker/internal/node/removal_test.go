package node

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"berth.dev/broker/internal/placement"
	"berth.dev/broker/internal/replica"
	"berth.dev/broker/internal/store"
)

// copyGone reports whether n holds nothing of tenant's group any more: no
// group open (in the node or its host), no raft directory, no store
// directory, and a tombstone.
func (n *testNode) copyGone(tenant string) bool {
	gid := replica.NameID(tenant)
	n.repl.mu.Lock()
	rg := n.repl.groups[tenant]
	n.repl.mu.Unlock()
	_, raftErr := os.Stat(filepath.Join(n.cfg.DataDir, "raft", strconv.FormatUint(gid, 10)))
	_, storeErr := os.Stat(store.TenantDir(n.cfg.DataDir, tenant))
	return rg == nil && n.repl.host.Group(gid) == nil && os.IsNotExist(raftErr) && os.IsNotExist(storeErr) && n.repl.isRemoved(tenant)
}

// voterNodes are the node ids of the voters of tenant's group as its
// leader (among the live nodes) sees them, sorted.
func (c *cluster) voterNodes(tenant string) []string {
	_, voters := c.holders(tenant, nil)
	var out []string
	for _, n := range c.nodes {
		if slices.Contains(voters, n.repl.self) {
			out = append(out, n.cfg.ID)
		}
	}
	slices.Sort(out)
	return out
}

// TestRemovedReplicaCleanedUp: four nodes, a pro tenant (three voters). A
// follower is drained: its replica moves to the fourth node (learner,
// promoted, the drained voter removed). Then, without an election (the
// same leader, the same epoch), tenant_placement names the new voters at a
// higher config index; the drained node has closed the group and deleted
// the tenant's raft log and store, keeping a tombstone; every acknowledged
// message is still delivered. Restarted with the two directories planted
// back (a crash in the middle of the cleanup), the node deletes them at
// start, opens no group for the tenant, and is ready.
func TestRemovedReplicaCleanedUp(t *testing.T) {
	t.Parallel()
	c := startClusterN(t, 4, nil)
	const tenant = replTenant
	cr := cred{tenant: tenant, id: "cred_rm", acl: allowAll}
	lead := c.leader(t, tenant, nil)
	poll(t, 10*time.Second, "three voters", func() bool { return len(c.voterNodes(tenant)) == 3 })
	var follower *testNode
	for _, n := range c.nodes {
		if n != lead && slices.Contains(c.voterNodes(tenant), n.cfg.ID) {
			follower = n
			break
		}
	}
	ps := placement.NewStore(lead.pool)
	before := lead.placedAt(t, tenant, 0)
	l := startDrainLoad(t, lead, cr)

	code, rep, err := postDrain(follower, testToken)
	if err != nil || code != http.StatusOK || !rep.Drained || rep.ReplicasMoved != 1 {
		t.Fatalf("drain of a follower: %d %+v %v", code, rep, err)
	}
	poll(t, 10*time.Second, "the drained follower's copy deleted", func() bool { return follower.copyGone(tenant) })
	voters := c.voterNodes(tenant)
	if len(voters) != 3 || slices.Contains(voters, follower.cfg.ID) {
		t.Fatalf("voters after the move: %v", voters)
	}
	var after placement.Placement
	poll(t, 10*time.Second, "tenant_placement names the new voters", func() bool {
		after, err = ps.Get(context.Background(), tenant)
		got := slices.Clone(after.Replicas)
		slices.Sort(got)
		return err == nil && slices.Equal(got, voters)
	})
	if after.Epoch != before.Epoch || after.Leader != before.Leader || after.ConfigIndex <= before.ConfigIndex {
		t.Fatalf("placement after the move %+v, before %+v: want the same leader and epoch, a higher config index", after, before)
	}
	t.Logf("placement %v at epoch %d, config index %d → %d, without an election", after.Replicas, after.Epoch, before.ConfigIndex, after.ConfigIndex)

	for i := 50; i < 100; i++ {
		if !l.publish(i) {
			t.Fatalf("publish %d after the move failed", i)
		}
	}
	l.checkDelivered(t, lead, "after the removed replica was deleted")

	// A crash in the middle of the cleanup: the tombstone written, the
	// directories not deleted yet.
	i := c.index(follower)
	follower.kill(t)
	gid := replica.NameID(tenant)
	for _, dir := range []string{filepath.Join(follower.cfg.DataDir, "raft", strconv.FormatUint(gid, 10), "log"), store.TenantDir(follower.cfg.DataDir, tenant)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "left-over"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	back := c.restart(t, i)
	if !back.copyGone(tenant) {
		t.Fatal("after a restart, the removed group's directories are back or its group is open")
	}
	poll(t, 10*time.Second, "the restarted node ready", func() bool {
		code, _, _ := getReadyz(t, back)
		return code == http.StatusOK
	})
	if !back.copyGone(tenant) {
		t.Fatal("the restarted node opened the removed group again")
	}
}
