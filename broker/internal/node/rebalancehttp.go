package node

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"
)

// The asking node's side of a rebalance (rebalance.go): POST and DELETE
// /admin/rebalance, the wait until every node follows with no work left,
// and the report.

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
	timeout, ok := waitTimeout(w, r, rebalanceDefaultTimeout, rebalanceMaxTimeout, "5m")
	if !ok {
		return
	}
	if repl.draining.Load() {
		writeJSON(w, http.StatusConflict, map[string]string{"error": "this node drains: end the drain (DELETE /admin/drain) or ask another node"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	rep := repl.rebalance(ctx)
	writeOutcome(w, rep.Balanced, rep)
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
