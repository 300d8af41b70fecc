package node

import (
	"slices"
	"time"
)

// The rebalance's pass (rebalance.go): after each of memberLoop's passes,
// the groups led here are judged against their target and their
// leaderships handed to their preferred node.

// rebalancePass runs after memberLoop's reconcile pass over the groups led
// here (led): while a rebalance is asked, it hands the leadership of those
// whose voters are the wanted ones to their preferred node (at most
// drainPerSecond a second), and announces whether any led group is still
// off target, or (leaderless) a group this node votes in has no leader:
// an election (a transfer, a leader lost) leaves a group judged by no
// node until its new leader's next pass, so it must not pass for balanced.
func (r *replicas) rebalancePass(led []*replGroup, leaderless bool) {
	r.countMoves(led)
	const mask = flagRebalancing | flagRebalanceWork
	if !r.rebalanceActive() {
		r.host.SetFlags(mask, 0)
		clear(r.rebal.handedAt)
		return
	}
	if r.rebal.handedAt == nil {
		r.rebal.handedAt = map[string]time.Time{}
	}
	budget := max(1, int(drainPerSecond*memberEvery/time.Second))
	now := time.Now()
	work := leaderless
	for _, rg := range led {
		if r.n.ctx.Err() != nil {
			return
		}
		off, handed := r.rebalanceLead(rg, now, budget > 0)
		if handed {
			budget--
		}
		work = work || off
	}
	flags := flagRebalancing
	if work {
		flags |= flagRebalanceWork
	}
	r.host.SetFlags(mask, flags)
}

// countMoves counts the voters that joined the groups led here since the
// last pass (replicas moved here by this node's leadership: a rebalance's,
// a drain's, a group's growth).
func (r *replicas) countMoves(led []*replGroup) {
	seen := make(map[string][]uint64, len(led))
	for _, rg := range led {
		v := rg.g.Members().Voters
		if prev, ok := r.rebal.voters[rg.id]; ok {
			for _, id := range v {
				if !slices.Contains(prev, id) {
					r.rebal.replaced.Add(1)
				}
			}
		}
		seen[rg.id] = v
	}
	r.rebal.voters = seen // a group led elsewhere meanwhile starts afresh
}

// rebalanceLead judges one group led here: off reports that it is not at
// its target (its voters are not the wanted ones, a move is in flight, or
// it is not led by its preferred node); handed that its leadership
// transfer was asked now (only when may).
func (r *replicas) rebalanceLead(rg *replGroup, now time.Time, may bool) (off, handed bool) {
	if rg.g.Leader() != r.self {
		return false, false // handed over since memberLoop listed it: its new leader judges it
	}
	cur := rg.g.Members()
	want, known := r.wantedIDs(rg.id)
	pm, ok := r.preferred(rg.id)
	if !known || !ok {
		return true, false
	}
	pref, _ := r.raftOf(pm)
	voters := slices.Clone(cur.Voters)
	slices.Sort(voters)
	slices.Sort(want)
	wanted := slices.Equal(voters, want)
	if wanted && pref == r.self && !cur.Joint && len(cur.Learners) == 0 {
		return false, false
	}
	if cur.Joint || len(cur.Learners) > 0 || r.draining.Load() || !may {
		return true, false
	}
	// The replicas first (membership.go: a move, or a voter too many
	// whose leader hands over: shrink.go), then the leadership.
	to := pref
	if !wanted || to == r.self || !r.host.Alive(to) || now.Sub(r.rebal.handedAt[rg.id]) < handOffEvery {
		return true, false
	}
	r.rebal.handedAt[rg.id] = now
	if err := rg.g.TransferLeadership(to); err != nil {
		return true, false
	}
	r.rebal.transfers.Add(1)
	r.n.log.Info("rebalance: handing the tenant's leadership over", "tenant_id", rg.id, "to", to)
	return true, true
}
