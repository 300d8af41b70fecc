package replica

import (
	"context"
	"slices"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// Membership changes. A voter that lost its raft state comes back under a
// new raft id (identity.go) with an empty log; its group's leader
// replaces the old id by the new one with Replace, one step per call:
//
//  1. the new id joins as a learner (raft catches it up: the log, or a
//     snapshot, streamed with the store's files for a FileState);
//  2. once its log is within caughtUpLag entries of the leader's and
//     raft replicates to it, one joint change promotes it and removes the
//     old id; raft leaves the joint configuration by itself (AutoLeave).
//
// Each call reads the configuration afresh, so the steps are resumable:
// a step lost with a leader is taken again by the next leader's call.
// One change is in flight at a time: no step is proposed while the joint
// configuration is being left or before this node's last change is
// applied (raft refuses a second one too).

// caughtUpLag is how many entries behind the leader's last index a
// learner may be, while replicating, to be promoted.
const caughtUpLag = 64

// Members is a group's configuration as this node last applied it.
type Members struct {
	Voters, Learners []uint64
	Joint            bool // entered a joint configuration, not left yet
}

// Members returns the group's configuration; safe from any goroutine.
func (g *Group) Members() Members {
	cs := g.confAtom.Load()
	return Members{
		Voters: slices.Clone(cs.GetVoters()), Learners: slices.Clone(cs.GetLearners()),
		Joint: len(cs.GetVotersOutgoing()) > 0,
	}
}

// Replace takes the next step of replacing voter old (0: none, only add
// nw) by nw in the group's configuration. Only the leader changes the
// configuration: ErrNotLeader elsewhere. It reports done when nw is a
// voter and old is not a member; otherwise call it again later (the
// caller's loop: a step takes a commit, a learner takes its catch-up).
func (g *Group) Replace(ctx context.Context, old, nw uint64) (done bool, err error) {
	return g.confStep(ctx, func() (bool, error) { return g.replaceStep(old, nw) })
}

// Remove takes the step of removing member id: a learner whose move was
// abandoned (a drain ended before it was promoted), or a voter the group
// has one too many of (a drained node's, once its replacement votes).
// Only the leader changes the configuration, and does not remove itself:
// ErrNotLeader otherwise. It reports done when id is no member.
func (g *Group) Remove(ctx context.Context, id uint64) (done bool, err error) {
	return g.confStep(ctx, func() (bool, error) { return g.removeStep(id) })
}

// confStep runs step on the group's loop and returns its result.
func (g *Group) confStep(ctx context.Context, step func() (bool, error)) (bool, error) {
	type result struct {
		done bool
		err  error
	}
	res := make(chan result, 1)
	call := func() {
		d, err := step()
		res <- result{d, err}
	}
	if g.closed.Load() {
		return false, ErrClosed
	}
	select {
	case g.callc <- call:
	case <-ctx.Done():
		return false, ctx.Err()
	case <-g.donec:
		return false, ErrClosed
	}
	select {
	case r := <-res:
		return r.done, r.err
	case <-ctx.Done():
		return false, ctx.Err()
	case <-g.donec:
		return false, ErrClosed
	}
}

// removeStep (loop) is Remove's step.
func (g *Group) removeStep(id uint64) (bool, error) {
	if g.rn.BasicStatus().RaftState != raft.StateLeader || id == g.node {
		return false, ErrNotLeader
	}
	cs := g.confState
	if !slices.Contains(cs.GetVoters(), id) && !slices.Contains(cs.GetVotersOutgoing(), id) &&
		!slices.Contains(cs.GetLearners(), id) && !slices.Contains(cs.GetLearnersNext(), id) {
		return true, nil
	}
	if len(cs.GetVotersOutgoing()) > 0 || g.confWait > g.applied {
		return false, nil // a change is being applied (or left)
	}
	return false, g.proposeConf([]*pb.ConfChangeSingle{{Type: pb.ConfChangeType_ConfChangeRemoveNode.Enum(), NodeId: new(id)}}, 0, id)
}

// replaceStep (loop) is Replace's step.
func (g *Group) replaceStep(old, nw uint64) (bool, error) {
	if nw == 0 || nw == old {
		return false, ErrUnknownPeer
	}
	if g.rn.BasicStatus().RaftState != raft.StateLeader {
		return false, ErrNotLeader
	}
	cs := g.confState
	member := func(id uint64) bool {
		return slices.Contains(cs.GetVoters(), id) || slices.Contains(cs.GetLearners(), id) ||
			slices.Contains(cs.GetVotersOutgoing(), id) || slices.Contains(cs.GetLearnersNext(), id)
	}
	voter, learner := slices.Contains(cs.GetVoters(), nw), slices.Contains(cs.GetLearners(), nw)
	oldIn := old != 0 && member(old)
	if voter && !oldIn && len(cs.GetVotersOutgoing()) == 0 {
		return true, nil
	}
	if len(cs.GetVotersOutgoing()) > 0 || g.confWait > g.applied {
		return false, nil // a change is being applied (or left)
	}
	if old == g.node {
		return false, ErrNotLeader // a leader does not remove itself: transfer first
	}
	var changes []*pb.ConfChangeSingle
	change := func(t pb.ConfChangeType, id uint64) {
		changes = append(changes, &pb.ConfChangeSingle{Type: t.Enum(), NodeId: new(id)})
	}
	switch {
	case !voter && !learner:
		change(pb.ConfChangeType_ConfChangeAddLearnerNode, nw)
	case learner:
		if !g.caughtUpPeer(nw) {
			return false, g.snapshotWith(nw)
		}
		change(pb.ConfChangeType_ConfChangeAddNode, nw)
		if oldIn {
			change(pb.ConfChangeType_ConfChangeRemoveNode, old)
		}
	default: // nw votes, old is still a member
		change(pb.ConfChangeType_ConfChangeRemoveNode, old)
	}
	return false, g.proposeConf(changes, old, nw)
}

// proposeConf (loop, leader) proposes one configuration change.
func (g *Group) proposeConf(changes []*pb.ConfChangeSingle, old, nw uint64) error {
	last, err := g.store.LastIndex()
	if err != nil {
		return err
	}
	g.wake(false)
	if err := g.rn.ProposeConfChange(&pb.ConfChangeV2{Changes: changes}); err != nil {
		if err == raft.ErrProposalDropped {
			return nil // a leadership transfer runs: the next call sees
		}
		return err
	}
	g.confWait = last + 1
	g.log.Info("replica: configuration change proposed", "changes", changeList(changes), "replacing", old, "by", nw)
	return nil
}

// snapshotWith (loop) makes sure the snapshot a learner is sent names it
// and is not older than the configuration it applied last: a follower
// ignores a snapshot whose configuration it is not in, and the last
// compaction's may be older than the learner. A snapshot that names id
// but predates the latest configuration change may be from id's previous
// membership, with its removal in the log after it: a node added back
// after it deleted its copy (node/removal.go) would restore it, then apply
// its own removal and take itself for removed while the leader counts the
// entries it acknowledged. It compacts now when the stored snapshot does
// not name id or is older than the configuration applied.
func (g *Group) snapshotWith(id uint64) error {
	snap, err := g.store.Snapshot()
	if err != nil {
		return err
	}
	md := snap.GetMetadata()
	cs := md.GetConfState()
	named := slices.Contains(cs.GetLearners(), id) || slices.Contains(cs.GetVoters(), id)
	if (named && md.GetIndex() >= g.confNext) || g.applied <= g.store.snapIndex {
		return nil
	}
	data, err := g.sm.Snapshot()
	if err != nil {
		return err
	}
	cfg := &g.h.cfg
	g.log.Info("replica: snapshot for a new member", "peer", id, "index", g.applied)
	return g.store.Compact(g.applied, g.confState, data, cfg.CatchUpEntries, cfg.MaxLogBytes/2)
}

// snapshotForLearners (loop) runs when a configuration change is
// applied, and when this node becomes leader: on the leader, a learner
// just added (or one a former leader added) gets a snapshot that names it
// at once rather than after a refused (or stale) one.
func (g *Group) snapshotForLearners() error {
	if g.lead != g.node {
		return nil
	}
	for _, id := range g.confState.GetLearners() {
		if err := g.snapshotWith(id); err != nil {
			return err
		}
	}
	return nil
}

// caughtUpPeer (loop, leader) reports whether id's log is within
// caughtUpLag entries of this node's and raft replicates to it.
func (g *Group) caughtUpPeer(id uint64) bool {
	last, err := g.store.LastIndex()
	if err != nil {
		return false
	}
	ok := false
	g.rn.WithProgress(func(pid uint64, _ raft.ProgressType, pr tracker.Progress) {
		if pid == id {
			ok = pr.State == tracker.StateReplicate && pr.Match+caughtUpLag >= last
		}
	})
	return ok
}

func changeList(cs []*pb.ConfChangeSingle) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.GetType().String())
	}
	return out
}
