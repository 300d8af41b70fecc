package replica

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var failoverCycles = flag.Int("failover-cycles", 3, "leader kills in TestLeaderKilledLosesNoAckedEntry")

// storeHas reports whether node id's raft log (what it has written to disk)
// holds an entry with data v.
func (c *cluster) storeHas(id uint64, v string) bool {
	g := c.group(id)
	if g == nil {
		return false
	}
	first, _ := g.store.FirstIndex()
	last, _ := g.store.LastIndex()
	if last < first {
		return false
	}
	ents, err := g.store.Entries(first, last+1, math.MaxUint64)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if d := e.GetData(); len(d) >= proposalHeader && string(d[proposalHeader:]) == v {
			return true
		}
	}
	return false
}

// TestProposeAckedOnlyAfterQuorum: a proposal returns once the entry is on
// the disk of a quorum and applied on the leader, and every node ends with
// the same log.
func TestProposeAckedOnlyAfterQuorum(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.leader(10 * time.Second)
	const writers, each = 8, 25
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				v := fmt.Sprintf("w%d-%d", w, i)
				if err := c.propose(lead, v, 10*time.Second); err != nil {
					t.Errorf("propose %s: %v", v, err)
					return
				}
				if !c.sm(lead).has(v) {
					t.Errorf("%s acknowledged before the leader applied it", v)
				}
				stored := 0
				for _, id := range c.live() {
					if c.storeHas(id, v) {
						stored++
					}
				}
				if stored < 2 {
					t.Errorf("%s acknowledged while on the disk of %d node(s), not a quorum", v, stored)
				}
			}
		}()
	}
	wg.Wait()
	want := c.sm(lead).list()
	if len(want) != writers*each {
		t.Fatalf("leader applied %d entries, want %d", len(want), writers*each)
	}
	for _, id := range c.live() {
		waitFor(t, 10*time.Second, fmt.Sprintf("node %d to apply every entry", id), func() bool {
			return len(c.sm(id).list()) == len(want)
		})
		if diff := cmp.Diff(want, c.sm(id).list()); diff != "" {
			t.Errorf("node %d applied a different log (-leader +node):\n%s", id, diff)
		}
	}
}

// ackLog is what proposers had acknowledged, and when.
type ackLog struct {
	mu    sync.Mutex
	vals  []string
	times []time.Time
	nodes []uint64
}

func (a *ackLog) add(v string, node uint64) {
	a.mu.Lock()
	a.vals, a.times, a.nodes = append(a.vals, v), append(a.times, time.Now()), append(a.nodes, node)
	a.mu.Unlock()
}

func (a *ackLog) snapshot() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.vals)
}

// firstAfter is the first ack by a node other than not, after t0.
func (a *ackLog) firstAfter(t0 time.Time, not uint64) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, at := range a.times {
		if at.After(t0) && a.nodes[i] != not {
			return at, true
		}
	}
	return time.Time{}, false
}

// TestLeaderKilledLosesNoAckedEntry kills the leader under load, cycle after
// cycle: a new leader takes over, every acknowledged entry is on every
// survivor, and the killed node, restarted, catches up.
func TestLeaderKilledLosesNoAckedEntry(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.leader(10 * time.Second)
	var acks ackLog
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil && i < 1_000_000; i++ {
				v := fmt.Sprintf("p%d-%d", w, i)
				for _, id := range c.live() {
					if g := c.group(id); g != nil && g.Leader() == id {
						if err := c.propose(id, v, time.Second); err == nil {
							acks.add(v, id)
						} else if !isRetryable(err) {
							t.Errorf("propose on node %d: %v", id, err)
						}
						break
					}
				}
				if i%64 == 0 {
					time.Sleep(time.Millisecond) // let the rest of the test breathe under -race
				}
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	var failovers []time.Duration
	for cycle := range *failoverCycles {
		before := len(acks.snapshot())
		waitFor(t, 10*time.Second, "acknowledgements before the kill", func() bool { return len(acks.snapshot()) >= before+50 })
		lead := c.leader(10 * time.Second)
		killed := time.Now()
		c.kill(lead)
		var first time.Time
		waitFor(t, 10*time.Second, "an acknowledgement from a new leader", func() bool {
			var ok bool
			first, ok = acks.firstAfter(killed, lead)
			return ok
		})
		failovers = append(failovers, first.Sub(killed))
		acked := acks.snapshot()
		for _, id := range c.live() {
			waitFor(t, 10*time.Second, fmt.Sprintf("node %d to hold every acknowledged entry", id), func() bool {
				for _, v := range acked {
					if !c.sm(id).has(v) {
						return false
					}
				}
				return true
			})
		}
		c.restart(lead)
		waitFor(t, 10*time.Second, fmt.Sprintf("restarted node %d to catch up", lead), func() bool {
			for _, v := range acked {
				if !c.sm(lead).has(v) {
					return false
				}
			}
			return true
		})
		t.Logf("cycle %d: killed leader %d, %d acknowledged so far, first ack from the new leader after %v",
			cycle, lead, len(acked), failovers[len(failovers)-1])
	}
	cancel()
	wg.Wait()
	acked := acks.snapshot()
	for _, id := range c.live() {
		waitFor(t, 10*time.Second, fmt.Sprintf("node %d final state", id), func() bool {
			got := c.sm(id).list()
			for _, v := range acked {
				if !slices.Contains(got, v) {
					return false
				}
			}
			return true
		})
	}
	slices.Sort(failovers)
	t.Logf("%d cycles, %d entries acknowledged, 0 lost; failover (kill → first ack) min %v p50 %v max %v (tick %v × election %d)",
		len(failovers), len(acked), failovers[0], failovers[len(failovers)/2], failovers[len(failovers)-1],
		c.config(1).TickInterval, c.config(1).ElectionTick)
}

// TestOldLeaderCannotCommit cuts the leader off from both followers: what it
// is asked to commit never commits, the majority elects a new leader and
// goes on, and after the partition heals the old leader holds the
// majority's log, without its own orphan entry.
func TestOldLeaderCannotCommit(t *testing.T) {
	c := newCluster(t, 3, nil)
	old := c.leader(10 * time.Second)
	if err := c.propose(old, "before", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	var others []uint64
	for _, id := range c.live() {
		if id != old {
			others = append(others, id)
		}
	}
	c.host(old).tr.partition(others...)
	for _, id := range others {
		c.host(id).tr.partition(old)
	}
	err := c.propose(old, "orphan", 1500*time.Millisecond)
	if err == nil {
		t.Fatal("a leader cut off from its quorum acknowledged a proposal")
	}
	t.Logf("propose on the isolated old leader: %v", err)
	var lead uint64
	waitFor(t, 10*time.Second, "a new leader among the majority", func() bool {
		l := c.group(others[0]).Leader()
		if l != 0 && l != old && c.group(others[1]).Leader() == l {
			lead = l
			return true
		}
		return false
	})
	if err := c.propose(lead, "after", 5*time.Second); err != nil {
		t.Fatalf("the majority's leader: %v", err)
	}
	c.host(old).tr.partition()
	for _, id := range others {
		c.host(id).tr.partition()
	}
	waitFor(t, 10*time.Second, "the old leader to catch up with the majority", func() bool {
		return c.sm(old).has("after")
	})
	for _, id := range c.live() {
		if c.sm(id).has("orphan") {
			t.Errorf("node %d applied the entry the isolated leader was asked for", id)
		}
		if diff := cmp.Diff([]string{"before", "after"}, c.sm(id).list()); diff != "" {
			t.Errorf("node %d (-want +got):\n%s", id, diff)
		}
	}
	if g := c.group(old); g.Leader() == old {
		t.Errorf("old leader %d still leads after the partition healed", old)
	}
}

// TestRestartedNodeCatchesUp: a follower that was down catches up from the
// leader's log when the log still has what it missed, and from a snapshot
// when the leader compacted it away; a whole-cluster restart replays every
// node's log and snapshot from disk.
func TestRestartedNodeCatchesUp(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.SnapshotEntries, cfg.CatchUpEntries, cfg.SegmentBytes = 40, 5, 2048
	})
	lead := c.leader(10 * time.Second)
	follower := uint64(1)
	if follower == lead {
		follower = 2
	}
	var all []string
	proposeN := func(n int) {
		t.Helper()
		for range n {
			v := fmt.Sprintf("e%d", len(all))
			if err := c.propose(lead, v, 5*time.Second); err != nil {
				t.Fatalf("propose %s: %v", v, err)
			}
			all = append(all, v)
		}
	}
	caughtUp := func(id uint64) func() bool {
		return func() bool { return slices.Equal(c.sm(id).list(), all) }
	}

	proposeN(10)
	waitFor(t, 10*time.Second, "the follower to apply", caughtUp(follower))
	c.kill(follower)
	proposeN(3) // fewer than the leader keeps: catch up from its log
	c.restart(follower)
	waitFor(t, 10*time.Second, "catch-up from the log", caughtUp(follower))
	if n := c.sm(follower).restores.Load(); n != 1 {
		t.Errorf("follower restored %d snapshots catching up from the log, want only its own at start", n)
	}

	c.kill(follower)
	proposeN(150) // several compactions: what it missed is gone from the leader's log
	if first, _ := c.group(lead).store.FirstIndex(); first <= 20 {
		t.Fatalf("leader's log starts at %d: it did not compact", first)
	}
	if segs := c.group(lead).store.wal.Segments(); len(segs) > 4 {
		t.Errorf("leader keeps %d WAL segments after compaction", len(segs))
	}
	c.restart(follower)
	waitFor(t, 20*time.Second, "catch-up from a snapshot", caughtUp(follower))
	if n := c.sm(follower).restores.Load(); n < 2 {
		t.Errorf("follower restored %d snapshot(s); it should have received one from the leader", n)
	}

	for _, id := range c.live() {
		c.kill(id)
	}
	for id := uint64(1); id <= 3; id++ {
		c.restart(id)
	}
	lead = c.leader(10 * time.Second)
	proposeN(1)
	for id := uint64(1); id <= 3; id++ {
		waitFor(t, 10*time.Second, fmt.Sprintf("node %d after a cluster restart", id), caughtUp(id))
	}
}

// TestProposeOnFollowerRefused: only the leader takes proposals.
func TestProposeOnFollowerRefused(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.leader(10 * time.Second)
	for _, id := range c.live() {
		if id == lead {
			continue
		}
		if err := c.propose(id, "x", 5*time.Second); !errors.Is(err, ErrNotLeader) {
			t.Errorf("propose on follower %d: %v, want ErrNotLeader", id, err)
		}
	}
}
