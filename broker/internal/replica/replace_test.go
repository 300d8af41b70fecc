package replica

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// rejoin starts a node whose storage was wiped: same transport id and
// address, a new raft id, an empty directory, the group opened with no
// configuration (it waits to be added).
func (c *cluster) rejoin(peer, raftID uint64) {
	c.t.Helper()
	c.dirs[peer] = c.t.TempDir()
	cfg := c.config(peer)
	cfg.NodeID, cfg.PeerID = raftID, peer
	h, err := New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.hosts[peer] = h
	c.mu.Unlock()
	c.wire(peer)
	sm := &listSM{}
	if _, err := h.OpenGroup(testGroup, nil, sm); err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.sms[peer] = sm
	c.mu.Unlock()
}

// TestWipedNodeRejoinsAsNewMember: a follower's storage is wiped and it
// comes back under a new raft id. A message for its former id (a
// heartbeat whose commit index is far past its empty log: the raft panic
// "tocommit(N) is out of range [lastIndex(1)]" when a node reuses its id)
// is refused; the leader adds the new id as a learner, which catches up
// (snapshot and log), then promotes it and removes the old id in one
// joint change; the leader is killed and the replaced node leads, with
// every entry committed before, during and after the wipe.
func TestWipedNodeRejoinsAsNewMember(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.SnapshotEntries, cfg.CatchUpEntries = 40, 10 })
	lead := c.leader(10 * time.Second)
	var acked []string
	propose := func(on uint64, prefix string, n int) {
		t.Helper()
		for i := range n {
			v := fmt.Sprintf("%s%d", prefix, i)
			if err := c.propose(on, v, 5*time.Second); err != nil {
				t.Fatalf("propose %s on %d: %v", v, on, err)
			}
			acked = append(acked, v)
		}
	}
	propose(lead, "before-", 100)
	wiped, other := uint64(0), uint64(0)
	for _, id := range []uint64{1, 2, 3} {
		switch {
		case id == lead:
		case wiped == 0:
			wiped = id
		default:
			other = id
		}
	}
	c.kill(wiped)
	propose(lead, "down-", 30) // two of three: a quorum
	const newID = 1003
	start := time.Now()
	c.rejoin(wiped, newID)
	fresh := c.host(wiped)

	// The leader learns the new raft id from the wiped node's liveness.
	waitFor(t, 5*time.Second, "the leader to learn the new raft id", func() bool {
		id, ok := c.host(lead).PeerRaftID(wiped)
		return ok && id == newID
	})
	waitFor(t, 5*time.Second, "the wiped node to learn the leader's raft id", func() bool {
		_, ok := fresh.PeerRaftID(lead)
		return ok
	})
	// A heartbeat for the former incarnation, committing far past an
	// empty log, on the leader's own authenticated connection: refused.
	bad := fresh.Stats().BadMessages
	conn, key, err := dialAs(t, fresh.Addr(), c.secret, lead, wiped)
	if err != nil {
		t.Fatal(err)
	}
	hb, _ := proto.Marshal(&pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(lead), To: new(wiped),
		Term: new(c.group(lead).Term()), Commit: new(uint64(412))})
	if _, err := conn.Write(frame(key, 0, kindRaft, testGroup, hb)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the message for the former raft id to be refused", func() bool {
		return fresh.Stats().BadMessages > bad
	})
	if m := fresh.Group(testGroup).Members(); len(m.Voters)+len(m.Learners) != 0 {
		t.Fatalf("the rejoined node is a member before being added: %+v", m)
	}

	// Replacement, driven like the node's loop does, under writes.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	steps := 0
	for done := false; !done; steps++ {
		if ctx.Err() != nil {
			t.Fatalf("replacement not done in 30 s: leader's members %+v", c.group(lead).Members())
		}
		if done, err = c.group(lead).Replace(ctx, wiped, newID); err != nil {
			t.Fatalf("replace: %v", err)
		}
		if !done {
			propose(lead, fmt.Sprintf("during%d-", steps), 1)
			time.Sleep(20 * time.Millisecond)
		}
	}
	took := time.Since(start)
	want := []uint64{lead, other, newID}
	slices.Sort(want)
	for _, id := range []uint64{lead, other, wiped} {
		waitFor(t, 10*time.Second, fmt.Sprintf("node %d to apply the final configuration", id), func() bool {
			m := c.group(id).Members()
			return slices.Equal(m.Voters, want) && len(m.Learners) == 0 && !m.Joint
		})
	}
	t.Logf("wiped node %d rejoined as %d and was promoted in %v (%d Replace calls); restores on it: %d",
		wiped, newID, took.Round(time.Millisecond), steps, c.sm(wiped).restores.Load())
	if c.sm(wiped).restores.Load() == 0 {
		t.Error("the rejoined node never restored a snapshot (the leader's log was compacted past its start)")
	}

	// The leader dies: the replaced node and the other survivor are a
	// quorum of the new configuration; the replaced node is made to lead.
	c.kill(lead)
	waitFor(t, 15*time.Second, "a leader among the survivors", func() bool {
		l := c.group(other).Leader()
		return (l == other || l == newID) && c.group(wiped).Leader() == l
	})
	if c.group(other).Leader() == other {
		waitFor(t, 15*time.Second, "the replaced node to take the leadership", func() bool {
			if c.group(other).Leader() == other {
				c.group(other).TransferLeadership(newID)
			}
			return c.group(wiped).Leader() == newID && c.group(other).Leader() == newID
		})
	}
	for i := range 10 {
		v := fmt.Sprintf("after-%d", i)
		var err error
		for try := 0; try < 50; try++ {
			if err = c.propose(wiped, v, 5*time.Second); err == nil || !isRetryable(err) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("propose %s on the replaced node: %v", v, err)
		}
		acked = append(acked, v)
	}
	for _, id := range []uint64{wiped, other} {
		waitFor(t, 10*time.Second, fmt.Sprintf("node %d to apply every acknowledged entry", id), func() bool {
			return len(c.sm(id).list()) >= len(acked)
		})
		if got := c.sm(id).list(); !slices.Equal(got, acked) {
			t.Fatalf("node %d holds %d entries, %d acknowledged; first difference at %d", id, len(got), len(acked), firstDiff(got, acked))
		}
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
