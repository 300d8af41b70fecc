package replica

import (
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// Quiescence (CockroachDB's idea, on etcd raft): a group with nothing to do
// stops ticking, so it sends no heartbeats and runs no election timer; an
// idle tenant costs nothing but memory. The leader quiesces when every live
// follower has the whole log and knows it is committed, after telling them
// so with a heartbeat flagged "quiesce"; a follower quiesces on that
// heartbeat when it agrees (same leader, term and commit index). Any
// proposal or raft message wakes the group. A dead leader is noticed by node
// liveness (one frame per peer per tick from the Host, not per group): the
// followers of a group whose leader stopped being alive wake with their
// election timer already run out, and elect a new leader at once.

// quiesceAfterTicks is how many ticks a leader stays caught up before it
// quiesces: enough for a heartbeat round to carry the commit index.
const quiesceAfterTicks = 3

// maybeQuiesce runs after every tick of an awake group, once the tick's
// Ready (heartbeats) is handled.
func (g *Group) maybeQuiesce() {
	if !g.h.cfg.Quiesce || g.quiesced.Load() {
		return
	}
	if !g.caughtUp() {
		g.idleTicks = 0
		return
	}
	g.idleTicks++
	if g.idleTicks < quiesceAfterTicks {
		return
	}
	st := g.rn.BasicStatus()
	g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if id == g.node || !g.h.alive(id) {
			return
		}
		g.h.sendQuiesce(g.id, &pb.Message{
			Type: pb.MsgHeartbeat.Enum(), To: new(id), From: new(g.node),
			Term: new(st.GetTerm()), Commit: new(st.GetCommit()),
		})
	})
	g.quiesced.Store(true)
}

// caughtUp reports whether this node leads, has applied everything, has no
// proposal waiting, and every live follower has matched the commit index.
func (g *Group) caughtUp() bool {
	st := g.rn.BasicStatus()
	if st.RaftState != raft.StateLeader || st.Applied != st.GetCommit() || g.rn.HasReady() {
		return false
	}
	g.mu.Lock()
	waiting := len(g.pending)
	g.mu.Unlock()
	if waiting > 0 || len(g.propc) > 0 {
		return false
	}
	ok := true
	g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if id == g.node {
			ok = ok && pr.Match == st.GetCommit()
			return
		}
		if g.h.alive(id) && (pr.Match != st.GetCommit() || pr.State != tracker.StateReplicate) {
			ok = false
		}
	})
	return ok
}

// followerQuiesce runs after a quiesce heartbeat was stepped.
func (g *Group) followerQuiesce(m *pb.Message) {
	st := g.rn.BasicStatus()
	if st.RaftState == raft.StateFollower && st.Lead == m.GetFrom() && st.GetTerm() == m.GetTerm() && st.GetCommit() == m.GetCommit() {
		g.quiesced.Store(true)
	}
}

// wake makes a quiesced group tick again. expired runs its election timer
// out first (the leader is known dead: no reason to wait a whole timeout
// before campaigning, and peers must not think the old leader's lease holds).
func (g *Group) wake(expired bool) {
	if !g.quiesced.Load() {
		return
	}
	g.quiesced.Store(false)
	g.idleTicks = 0
	if w := g.h.cfg.hooks.wake; w != nil {
		w(g.id, expired)
	}
	if expired {
		for i := 0; i < g.h.cfg.ElectionTick; i++ {
			g.rn.TickQuiesced()
		}
	}
}

// onLiveness runs when a peer became dead or alive: a quiesced group whose
// leader died wakes with its timer run out; a leader wakes to catch a peer
// that came back up; the rest stay asleep.
func (g *Group) onLiveness() {
	if !g.quiesced.Load() {
		return
	}
	st := g.rn.BasicStatus()
	switch {
	case st.RaftState == raft.StateLeader:
		back := false
		g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
			if id != g.node && g.h.alive(id) && pr.Match != st.GetCommit() {
				back = true
			}
		})
		if back {
			g.wake(false)
		}
	case st.Lead == raft.None || !g.h.alive(st.Lead):
		g.wake(true)
	}
}
