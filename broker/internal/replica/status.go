package replica

import (
	"slices"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// Role is this node's part in a group, as metrics count it.
type Role int

// Roles.
const (
	RoleFollower Role = iota // a voter following (or a candidate)
	RoleLeader               // this node leads
	RoleLearner              // a learner: catching up, not voting
	RoleNone                 // not in the configuration: joining (no configuration yet) or removed
)

// Status is what the node's metrics read of a group; safe from any
// goroutine.
type Status struct {
	Role   Role
	Leader uint64 // 0: none known
	// FollowerLag (leading only) is the most committed entries one voter
	// or learner lacks (the leader's commit index minus its match), as of
	// the last tick: a dead or slow follower's grows with every commit.
	FollowerLag uint64
	// ApplyLag is how many committed entries this node has yet to apply,
	// by what it knows (Progress.Lag).
	ApplyLag uint64
	Pending  int // proposals waiting for their commit
}

// Status returns the group's status on this node.
func (g *Group) Status() Status {
	p := g.Progress()
	s := Status{Leader: p.Leader, ApplyLag: p.Lag()}
	cs := g.confAtom.Load()
	switch {
	case raft.StateType(g.roleAtom.Load()) == raft.StateLeader && p.Leader == g.node:
		s.Role, s.FollowerLag = RoleLeader, g.lagAtom.Load()
	case slices.Contains(cs.GetLearners(), g.node):
		s.Role = RoleLearner
	case slices.Contains(cs.GetVoters(), g.node) || slices.Contains(cs.GetVotersOutgoing(), g.node):
		s.Role = RoleFollower
	default:
		s.Role = RoleNone
	}
	g.mu.Lock()
	s.Pending = len(g.pending)
	g.mu.Unlock()
	return s
}

// ConfIndex is the log index of the configuration applied here (the
// snapshot's, when no later change was applied): a configuration with a
// higher index is newer. Read it before Members: the configuration is then
// at least as new as the index.
func (g *Group) ConfIndex() uint64 { return g.confIdx.Load() }

// Removed reports whether the configuration applied here is one this node
// is no member of: no voter (incoming or outgoing), no learner, no
// learner-to-be. A node joining (no configuration yet) is not removed. A
// removal is applied only once committed, so a removed node's copy is of
// no use to the group any more: only a new learner addition (a fresh
// copy, by snapshot) would bring it back. Delete the copy only after
// Host.RetireGroup: this node may hold (and have acknowledged) the change
// that adds it back, not applied yet.
func (g *Group) Removed() bool { return removedFrom(g.confAtom.Load(), g.node) }

// removedFrom reports whether cs is a configuration node is no member of
// (and not the empty one of a node joining).
func removedFrom(cs *pb.ConfState, node uint64) bool {
	if len(cs.GetVoters()) == 0 && len(cs.GetVotersOutgoing()) == 0 {
		return false
	}
	for _, ids := range [][]uint64{cs.GetVoters(), cs.GetVotersOutgoing(), cs.GetLearners(), cs.GetLearnersNext()} {
		if slices.Contains(ids, node) {
			return false
		}
	}
	return true
}

// noteLag (loop, after a tick) records the leader's view of its followers'
// lag for Status.
func (g *Group) noteLag() {
	st := g.rn.BasicStatus()
	if st.RaftState != raft.StateLeader {
		g.lagAtom.Store(0)
		return
	}
	commit := st.GetCommit()
	var lag uint64
	g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if id != g.node && pr.Match < commit {
			lag = max(lag, commit-pr.Match)
		}
	})
	g.lagAtom.Store(lag)
}
