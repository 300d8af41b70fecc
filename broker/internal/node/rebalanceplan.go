package node

import (
	"slices"

	"berth.dev/broker/internal/replica"
)

// The rebalance's plan (rebalance.go): the target spread, each tenant's
// preferred leader, and the replica step a group led here takes towards it.

// preferred is the node that leads the tenant's group once balanced: the
// first of its wanted replicas by rank.
func (r *replicas) preferred(tenantID string) (member, bool) {
	top := r.ranked(tenantID, 1, r.isDraining)
	if len(top) == 0 {
		return member{}, false
	}
	return top[0], true
}

// wantedIDs are the raft ids of the tenant's wanted replicas; false when
// one is not known yet.
func (r *replicas) wantedIDs(tenantID string) ([]uint64, bool) {
	var ids []uint64
	for _, m := range r.wanted(tenantID) {
		id, ok := r.raftOf(m)
		if !ok {
			return nil, false
		}
		ids = append(ids, id)
	}
	return ids, true
}

// rebalanceReplacement is replacement's step for a group with its voters
// (not more: shrink.go), every one a current member and none draining:
// while a rebalance is asked, a voter on no wanted node is replaced by nw,
// the first wanted node that does not vote (when that voter is this node,
// the leader, nw joins beside it: the group has a voter too many, so the
// leadership is handed to a wanted voter, which removes this node:
// shrink.go); else a learner (a move whose rebalance ended) is removed.
func (r *replicas) rebalanceReplacement(rg *replGroup, cur replica.Members, want []uint64, nw uint64) (old, nw2 uint64, next int) {
	var extra []uint64 // voters on no wanted node
	for _, v := range cur.Voters {
		if !slices.Contains(want, v) {
			extra = append(extra, v)
		}
	}
	if !r.rebalanceActive() || r.draining.Load() {
		for _, l := range cur.Learners {
			return l, 0, remove
		}
		return 0, 0, settle
	}
	if nw == 0 || len(extra) == 0 {
		return 0, 0, settle // replicas as wanted: the leadership is rebalanceLead's
	}
	if !r.host.Alive(nw) {
		return 0, 0, retry
	}
	for _, v := range extra {
		if v != r.self {
			return v, nw, act
		}
	}
	return 0, nw, act
}

// spread is the target: every member (in r.members' order) with its share.
func (r *replicas) spread() (nodes []rebalanceNode, tenants int) {
	r.plansMu.Lock()
	ids := make([]string, 0, len(r.plans))
	for id := range r.plans {
		ids = append(ids, id)
	}
	r.plansMu.Unlock()
	at := map[string]int{}
	for i, m := range r.members {
		at[m.id] = i
		nodes = append(nodes, rebalanceNode{ID: m.id, Zone: m.zone})
	}
	for _, id := range ids {
		for _, m := range r.wanted(id) {
			nodes[at[m.id]].Replicas++
		}
		if p, ok := r.preferred(id); ok {
			nodes[at[p.id]].Leaderships++
		}
	}
	r.announced(nodes)
	return nodes, len(ids)
}
