package replica

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// restoreSM is a listSM that records, for every snapshot it restores, the
// index of the last entry the snapshot holds.
type restoreSM struct {
	listSM
	mu    sync.Mutex
	lasts []uint64
}

func (s *restoreSM) Restore(data []byte) error {
	if err := s.listSM.Restore(data); err != nil {
		return err
	}
	s.listSM.mu.Lock()
	last := s.listSM.last
	s.listSM.mu.Unlock()
	s.mu.Lock()
	s.lasts = append(s.lasts, last)
	s.mu.Unlock()
	return nil
}

func (s *restoreSM) restored() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.lasts)
}

// TestReaddedMemberGetsFreshSnapshot: a follower is removed from its
// group, retires it and deletes its copy (as a node does: node/removal.go);
// the leader, whose last snapshot is older than the removal and names the
// follower, adds it back. The snapshot the follower restores is newer than
// its removal: it never applies its own removal again (it would take
// itself for removed while the leader counts what it acknowledged). It is
// caught up, promoted, and holds every entry.
func TestReaddedMemberGetsFreshSnapshot(t *testing.T) {
	// Snapshots every 25 entries: one at about 26, none between the
	// removal (about 33) and the re-addition (about 39).
	c := newCluster(t, 3, func(cfg *Config) { cfg.SnapshotEntries, cfg.CatchUpEntries = 25, 5 })
	lead := c.leader(10 * time.Second)
	var acked []string
	propose := func(prefix string, n int) {
		t.Helper()
		for i := range n {
			v := fmt.Sprintf("%s%d", prefix, i)
			if err := c.propose(lead, v, 5*time.Second); err != nil {
				t.Fatalf("propose %s: %v", v, err)
			}
			acked = append(acked, v)
		}
	}
	propose("before-", 30)
	x := uint64(1)
	for x == lead {
		x++
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	step := func(what string, f func() (bool, error)) {
		t.Helper()
		for {
			done, err := f()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if done {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("%s: not done in time; leader's members %+v", what, c.group(lead).Members())
			}
			time.Sleep(10 * time.Millisecond) // the next step needs the last one applied: polled
		}
	}
	step("remove", func() (bool, error) { return c.group(lead).Remove(ctx, x) })
	waitFor(t, 10*time.Second, "the removed node to apply its removal", func() bool { return c.group(x).Removed() })
	removedAt := c.group(x).ConfIndex()
	if ok, err := c.host(x).RetireGroup(testGroup); !ok || err != nil {
		t.Fatalf("RetireGroup of a removed group: %v %v", ok, err)
	}
	if c.group(x) != nil {
		t.Fatal("the retired group is still open")
	}
	if err := c.host(x).RemoveGroupData(testGroup); err != nil {
		t.Fatal(err)
	}
	c.host(x).Asked() // forget what came before
	propose("after-removal-", 5)

	// Added back: the first step adds a learner; the removed node opens
	// the group empty once its leader sends it something.
	if _, err := c.group(lead).Replace(ctx, 0, x); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the leader's message to the node added back", func() bool {
		return slices.Contains(c.host(x).Asked(), testGroup)
	})
	sm := &restoreSM{}
	if _, err := c.host(x).OpenGroup(testGroup, nil, sm); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.sms[x] = &sm.listSM
	c.mu.Unlock()
	step("add back", func() (bool, error) { return c.group(lead).Replace(ctx, 0, x) })
	propose("after-", 5)
	waitFor(t, 10*time.Second, "the node added back to apply every entry", func() bool {
		return len(sm.list()) >= len(acked)
	})
	lasts := sm.restored()
	t.Logf("removed at index %d; snapshots restored after the re-addition hold entries up to %v", removedAt, lasts)
	if len(lasts) == 0 || lasts[0] < removedAt {
		t.Fatalf("the node added back restored a snapshot from before its removal (up to %v, removed at %d)", lasts, removedAt)
	}
	if c.group(x).Removed() || !slices.Contains(c.group(x).Members().Voters, x) {
		t.Fatalf("node added back: removed %v, members %+v", c.group(x).Removed(), c.group(x).Members())
	}
	if got := sm.list(); !slices.Equal(got, acked) {
		t.Fatalf("the node added back holds %d entries, %d acknowledged; first difference at %d", len(got), len(acked), firstDiff(got, acked))
	}
}

// TestRetireGroup: a group is retired only when this node is no member of
// its applied configuration and no configuration change waits in its log
// after it (one that adds it back, which it may have acknowledged).
func TestRetireGroup(t *testing.T) {
	c := newCluster(t, 1, nil)
	h := c.host(1)
	// Groups whose first configuration does not hold this node (as one
	// that applied its removal), each with one entry after it, appended
	// through the group's loop as raft would.
	conf, _ := proto.Marshal(&pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{{Type: pb.ConfChangeType_ConfChangeAddLearnerNode.Enum(), NodeId: new(uint64(1))}}})
	for _, tc := range []struct {
		name  string
		group uint64
		tail  *pb.Entry // nil: none
		want  bool
	}{
		{"removed, nothing after", 101, nil, true},
		{"removed, an entry after", 102, &pb.Entry{Type: pb.EntryNormal.Enum(), Data: []byte("x")}, true},
		{"removed, added back after", 103, &pb.Entry{Type: pb.EntryConfChangeV2.Enum(), Data: conf}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := h.OpenGroup(tc.group, []uint64{2, 3}, &listSM{})
			if err != nil {
				t.Fatal(err)
			}
			if !g.Removed() {
				t.Fatal("a group whose configuration lacks this node is not Removed")
			}
			if tc.tail != nil {
				tc.tail.Index, tc.tail.Term = new(uint64(2)), new(uint64(1))
				if _, err := g.confStep(context.Background(), func() (bool, error) {
					return false, g.store.Save(nil, []*pb.Entry{tc.tail}, nil, true)
				}); err != nil {
					t.Fatal(err)
				}
			}
			got, err := h.RetireGroup(tc.group)
			if err != nil || got != tc.want {
				t.Fatalf("RetireGroup: %v %v, want %v", got, err, tc.want)
			}
			if open := h.Group(tc.group) != nil; open == got {
				t.Fatalf("retired %v, still open %v", got, open)
			}
		})
	}
	// A member: not retired, its group runs on.
	c.leader(10 * time.Second)
	if got, err := h.RetireGroup(testGroup); got || err != nil {
		t.Fatalf("RetireGroup of a member: %v %v", got, err)
	}
	if err := c.propose(1, "still-running", 5*time.Second); err != nil {
		t.Fatalf("the member's group after RetireGroup: %v", err)
	}
}
