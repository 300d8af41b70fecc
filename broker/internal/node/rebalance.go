package node

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"berth.dev/broker/internal/replica"
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

// aborted is closed when DELETE /admin/rebalance ends the calls running now.
func (rb *rebalancing) aborted() <-chan struct{} {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if rb.abort == nil {
		rb.abort = make(chan struct{})
	}
	return rb.abort
}

// abortRebalance ends the rebalance calls running on this node: their ask
// is withdrawn.
func (r *replicas) abortRebalance() {
	r.rebal.mu.Lock()
	defer r.rebal.mu.Unlock()
	if r.rebal.abort != nil {
		close(r.rebal.abort)
		r.rebal.abort = nil
	}
	r.n.log.Info("rebalance: aborted")
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

// rebalanceNode is a node in a rebalance's answer: its target share and
// what it announced last.
type rebalanceNode struct {
	ID   string `json:"id"`
	Zone string `json:"zone,omitempty"`
	// Replicas and Leaderships are its target: tenants it should hold a
	// replica of and lead.
	Replicas    int  `json:"replicas"`
	Leaderships int  `json:"leaderships"`
	Alive       bool `json:"alive"`
	Following   bool `json:"following"` // heard the ask and judged its groups
	Work        bool `json:"work"`      // leads groups not at their target yet
}

// rebalanceReport is the answer of POST /admin/rebalance.
type rebalanceReport struct {
	NodeID   string          `json:"node_id"`
	Balanced bool            `json:"balanced"`
	Tenants  int             `json:"tenants"`
	Nodes    []rebalanceNode `json:"nodes"`
	// Moves made by the groups this node leads during the call (the other
	// nodes' leaders make theirs).
	LeadershipsMoved int64 `json:"leaderships_moved"`
	ReplicasMoved    int64 `json:"replicas_moved"`
	TookMS           int64 `json:"took_ms"`
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

// announced fills in what each node (in r.members' order) announced last.
func (r *replicas) announced(nodes []rebalanceNode) {
	for i, m := range r.members {
		flags := r.host.Flags()
		if m.id != r.n.cfg.ID {
			flags = r.host.PeerFlags(m.peer)
		}
		nodes[i].Alive = r.aliveMember(m)
		nodes[i].Following = flags&flagRebalancing != 0
		nodes[i].Work = flags&flagRebalanceWork != 0
	}
}

// rebalance asks the cluster to rebalance and waits until every node
// follows with no work left (rebalanceSettle in a row), or ctx.
func (r *replicas) rebalance(ctx context.Context) rebalanceReport {
	start := time.Now()
	transfers, replaced := r.rebal.transfers.Load(), r.rebal.replaced.Load()
	asked := false
	defer func() {
		if asked && r.rebal.asks.Add(-1) == 0 {
			r.host.SetFlags(flagRebalanceAsked, 0)
			r.n.log.Info("rebalance: ask withdrawn")
		}
	}()
	abort := r.rebal.aborted()
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	var settledSince time.Time
	rep := rebalanceReport{NodeID: r.n.cfg.ID}
	nodes, _ := r.spread()
	for {
		r.announced(nodes)
		following, work, down := true, false, false
		for _, n := range nodes {
			following = following && n.Following
			work = work || n.Work
			down = down || !n.Alive
		}
		switch {
		case !asked:
			// A round another node asked for: join it. Else wait until
			// the last round has wound down (no node follows one), so
			// that what the nodes announce is about this one.
			if r.rebalanceActive() || !slices.ContainsFunc(nodes, func(n rebalanceNode) bool { return n.Following }) {
				asked = true
				r.rebal.asks.Add(1)
				r.host.SetFlags(flagRebalanceAsked, flagRebalanceAsked)
				r.n.log.Info("rebalance: asked")
			}
		case following && !work && !down:
			if settledSince.IsZero() {
				settledSince = time.Now()
			} else if time.Since(settledSince) >= rebalanceSettle {
				rep.Balanced = true
			}
		default:
			settledSince = time.Time{}
		}
		if rep.Balanced {
			break
		}
		select {
		case <-ctx.Done():
		case <-abort:
		case <-tick.C:
			continue
		}
		break
	}
	rep.Nodes, rep.Tenants = r.spread()
	slices.SortFunc(rep.Nodes, func(a, b rebalanceNode) int { return strings.Compare(a.ID, b.ID) })
	rep.LeadershipsMoved = r.rebal.transfers.Load() - transfers
	rep.ReplicasMoved = r.rebal.replaced.Load() - replaced
	rep.TookMS = time.Since(start).Milliseconds()
	r.n.log.Info("rebalance: done", "balanced", rep.Balanced, "leaderships_moved", rep.LeadershipsMoved,
		"replicas_moved", rep.ReplicasMoved, "took", time.Since(start).Round(time.Millisecond))
	return rep
}

// handleRebalance serves POST /admin/rebalance[?timeout=5m]: 200 when the
// cluster is at its target, 503 (Retry-After) at the timeout; 409 on a
// draining node.
func (n *Node) handleRebalance(w http.ResponseWriter, r *http.Request) {
	repl := n.replication()
	if n.noReplication(w, repl) {
		return
	}
	timeout := rebalanceDefaultTimeout
	if s := r.URL.Query().Get("timeout"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 || d > rebalanceMaxTimeout {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "timeout: a duration such as 5m, at most " + rebalanceMaxTimeout.String()})
			return
		}
		timeout = d
	}
	if repl.draining.Load() {
		writeJSON(w, http.StatusConflict, map[string]string{"error": "this node drains: end the drain (DELETE /admin/drain) or ask another node"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	rep := repl.rebalance(ctx)
	status := http.StatusOK
	if !rep.Balanced {
		status = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", strconv.Itoa(int(handOffEvery.Seconds())))
	}
	writeJSON(w, status, rep)
}

// handleRebalanceAbort serves DELETE /admin/rebalance: this node asks no
// more (its running calls answer 503 at once); moves done stay done.
func (n *Node) handleRebalanceAbort(w http.ResponseWriter, _ *http.Request) {
	repl := n.replication()
	if n.noReplication(w, repl) {
		return
	}
	repl.abortRebalance()
	writeJSON(w, http.StatusOK, map[string]any{"node_id": n.cfg.ID, "rebalancing": false})
}
