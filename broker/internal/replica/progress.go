package replica

import (
	pb "go.etcd.io/raft/v3/raftpb"
)

// Progress is how far this node's copy of a group has come, as far as this
// node can tell: what a readiness check needs ("is this replica caught
// up?"). A follower learns the leader's commit index from the leader's
// appends (MsgApp carries it whole), heartbeats (only up to what the
// follower already holds), the start of a snapshot stream (its index) and
// its own HardState; nothing else tells it how far behind it is.
type Progress struct {
	Leader  uint64 // the leader this node knows of; 0 none (an election runs, or nothing was heard yet)
	Term    uint64 // this node's current term
	Applied uint64 // the last index applied to the state machine here
	// Commit is the highest index this node knows to be committed: its
	// own, or one a leader sent it (an append, a heartbeat, a snapshot's).
	Commit uint64
	// Confirmed: Commit is the leader's own, not only this node's. This
	// node leads; or the current term's leader sent it an append or a
	// snapshot (which carry the leader's commit index); or the group is
	// quiesced here, which the leader asks only of followers that hold
	// its whole log (quiesce.go). A follower that has only seen
	// heartbeats cannot tell whether the leader is about to send it a
	// snapshot.
	Confirmed bool
	Stopped   bool // the group stopped on an error (or was closed)
}

// Lag is how many committed entries this node has yet to apply, by what
// it knows.
func (p Progress) Lag() uint64 {
	if p.Commit <= p.Applied {
		return 0
	}
	return p.Commit - p.Applied
}

// Progress reports the group's progress on this node; safe from any
// goroutine.
func (g *Group) Progress() Progress {
	p := Progress{
		Leader: g.Leader(), Term: g.Term(), Applied: g.Applied(), Commit: g.knownCommit.Load(),
		Stopped: g.closed.Load(),
	}
	p.Confirmed = p.Leader != 0 && (p.Leader == g.node || g.Quiesced() || (p.Term != 0 && g.heardTerm.Load() == p.Term))
	return p
}

// noteCommit records that index is committed (commit indexes only grow,
// cluster-wide, so the largest one heard of holds whoever sent it).
func (g *Group) noteCommit(index uint64) {
	for {
		cur := g.knownCommit.Load()
		if index <= cur || g.knownCommit.CompareAndSwap(cur, index) {
			return
		}
	}
}

// heard (loop) notes what a stepped peer message tells of the leader's
// progress.
func (g *Group) heard(m *pb.Message) {
	switch m.GetType() {
	case pb.MsgApp:
		g.noteCommit(m.GetCommit())
		g.heardTerm.Store(m.GetTerm())
	case pb.MsgSnap:
		g.noteCommit(m.GetSnapshot().GetMetadata().GetIndex())
		g.heardTerm.Store(m.GetTerm())
	case pb.MsgHeartbeat:
		g.noteCommit(m.GetCommit())
	}
}
