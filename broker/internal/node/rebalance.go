package node

import (
	"sync"
	"sync/atomic"
	"time"
)

// Rebalance (docs/replication.md, "Rebalance"): POST /admin/rebalance on
// any node moves the cluster towards its target spread, the one rendezvous
// hashing gives every tenant: its replicas on wanted(tenant) (its plan's
// factor, one per zone first, no draining node) and its leadership on the
// first of them by rank (preferred), so that each of N nodes holds about
// 1/N of the leaderships and factor/N of the replicas. A node that joined
// (a new -peers entry) or came back with few groups takes its share.
//
// The node asks (flagRebalanceAsked in its liveness frames, authenticated
// like its raft id); every node that hears an ask from a live node, itself
// included, moves the groups it leads with the drain's protocol
// (membership.go): a replica on a node that is not wanted is replaced by
// a wanted one (learner, caught up, promoted with the old voter removed in
// one joint change; at most maxMoves in flight per leader); a leader that
// is not wanted hands its leadership to a wanted voter first, the
// replacement joining beside it; once the voters are the wanted ones the
// leadership goes to the preferred node (≤ drainPerSecond transfers a
// second per node). Each node announces that it follows (flagRebalancing)
// and whether groups it leads are still off target (flagRebalanceWork);
// the asking node answers once every node follows and none has work left,
// continuously for rebalanceSettle. Every step is derived from the
// configuration when it is taken: resumable by the next leader, and a
// second call with nothing to do moves nothing. DELETE /admin/rebalance
// (or the call's timeout, or the asking node's death) withdraws the ask:
// no move starts any more, a learner not yet promoted is removed, moves
// done stay done.
//
// Why not by itself when membership changes: while a -peers change rolls
// through the nodes, they disagree on the members and would move replicas
// back and forth; every replica move streams the tenant's store and every
// leadership move disconnects its devices, which an operator schedules.
// What does run by itself: a group short of voters grows, a replica that
// lost its disk is replaced, a voter too many is removed.

// Liveness flags of the rebalance (replica.Host.SetFlags; replica.FlagDraining is 1).
const (
	flagRebalanceAsked byte = 2 // this node's POST /admin/rebalance runs
	flagRebalancing    byte = 4 // this node heard an ask and judged the groups it leads
	flagRebalanceWork  byte = 8 // and some are not at their target yet, or a group it votes in elects
)

// rebalanceSettle is how long the asking node must see every node follow
// with no work left before it answers: a leadership just handed over is
// judged by its new leader within memberEvery.
const rebalanceSettle = 3 * memberEvery

const (
	rebalanceDefaultTimeout = 5 * time.Minute
	rebalanceMaxTimeout     = time.Hour
)

// rebalancing is this node's side of rebalances.
type rebalancing struct {
	asks atomic.Int32 // POST /admin/rebalance calls running here
	// Counted for the answers (and the tests): leadership transfers asked
	// by rebalances, and voters that joined groups while led here.
	transfers, replaced atomic.Int64
	// handedAt: when memberLoop last asked a group to transfer its
	// leadership; voters: the voters of each group led here at the last
	// pass (memberLoop's own).
	handedAt map[string]time.Time
	voters   map[string][]uint64

	mu    sync.Mutex
	abort chan struct{} // closed by DELETE /admin/rebalance: running calls end
}

// rebalanceActive reports whether this node or a live peer asks for a
// rebalance.
func (r *replicas) rebalanceActive() bool {
	if r.rebal.asks.Load() > 0 {
		return true
	}
	for _, m := range r.members {
		if m.id != r.n.cfg.ID && r.host.PeerFlags(m.peer)&flagRebalanceAsked != 0 && r.aliveMember(m) {
			return true
		}
	}
	return false
}

// aliveMember reports whether m is this node or a peer heard from lately.
func (r *replicas) aliveMember(m member) bool {
	if m.id == r.n.cfg.ID {
		return true
	}
	id, ok := r.host.PeerRaftID(m.peer)
	return ok && r.host.Alive(id)
}
