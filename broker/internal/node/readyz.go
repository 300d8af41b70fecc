package node

import (
	"fmt"
	"net/http"
	"slices"

	"berth.dev/broker/internal/replica"
)

// Readiness (GET /readyz on the admin listener, no token: a Kubernetes
// probe). /healthz says the process is up; /readyz says the node may take
// its share of the work. A node without -peers is ready once its admin
// listener answers and until it shuts down. A replicating node is ready
// when, for every tenant group it holds a replica of, it knows who leads
// and is caught up with that leader:
//
//   - it leads the group; or the current term's leader has sent it an
//     append or a snapshot (which carry the leader's commit index); or the
//     group is quiesced here (the leader quiesces only followers holding
//     its whole log); and
//   - it has applied all but at most readyMaxLag of the entries it knows
//     to be committed (replica.Progress); and
//   - it votes in the group: a node that lost its disk joins again as a
//     learner under a new raft id (identity.go) and is not ready until
//     its leader has promoted it, so stopping another node meanwhile
//     cannot cost a tenant its quorum.
//
// So a node restarted on its volume is not ready while it replays its raft
// log, while it has not heard from the leaders, while a snapshot is
// streamed to it and while it applies what it missed. The StatefulSet's
// rolling update waits for it before it stops the next node, so no tenant
// is left with only one up-to-date replica. The answer holds counts only,
// never a tenant id.

// readyMaxLag is how many committed entries a replica may have yet to
// apply and still count as caught up: a follower under load is always a
// few entries behind its leader's commit index (each entry is a batch of
// messages), which must not make it flap.
const readyMaxLag = 64

// readyReport is the answer of GET /readyz.
type readyReport struct {
	Ready  bool   `json:"ready"`
	NodeID string `json:"node_id"`
	Reason string `json:"reason,omitempty"`
	// With replication: the tenant groups this node holds a replica of,
	// those not caught up (no leader known, not heard from it, or behind),
	// and the largest number of entries one of them has yet to apply.
	Groups      int    `json:"groups"`
	NotCaughtUp int    `json:"not_caught_up"`
	MaxLag      uint64 `json:"max_lag"`
	// NotVoting counts the groups (among NotCaughtUp) in whose
	// configuration this node is not a voter yet.
	NotVoting int `json:"not_voting"`
}

// caughtUp reports whether a replica counts as caught up (see above).
func caughtUp(p replica.Progress) bool {
	return !p.Stopped && p.Confirmed && p.Lag() <= readyMaxLag
}

// readiness counts the groups held here, those not caught up, and among
// them those this node does not vote in.
func (r *replicas) readiness() (groups, behind, notVoting int, maxLag uint64) {
	list := r.groupList(nil)
	for _, rg := range list {
		p := rg.g.Progress()
		maxLag = max(maxLag, p.Lag())
		m := rg.g.Members()
		switch {
		case len(m.Voters) > 0 && !slices.Contains(m.Voters, r.self) && !slices.Contains(m.Learners, r.self):
			// removed from the group (a drain moved its replica): not
			// this node's to catch up
		case !slices.Contains(m.Voters, r.self):
			notVoting++
			behind++
		case !caughtUp(p):
			behind++
		}
	}
	return len(list), behind, notVoting, maxLag
}

// handleReadyz serves GET /readyz: 200 when ready, 503 with the reason
// and the counts otherwise.
func (n *Node) handleReadyz(w http.ResponseWriter, _ *http.Request) {
	n.mu.Lock()
	closing, repl := n.closing, n.repl
	n.mu.Unlock()
	rep := readyReport{NodeID: n.cfg.ID}
	switch {
	case closing:
		rep.Reason = "shutting down"
	case len(n.cfg.Peers) > 0 && repl == nil:
		rep.Reason = "starting: replication is not up yet"
	case repl != nil:
		rep.Groups, rep.NotCaughtUp, rep.NotVoting, rep.MaxLag = repl.readiness()
		if rep.NotCaughtUp > 0 {
			rep.Reason = fmt.Sprintf("%d of %d tenant groups not caught up with their leader", rep.NotCaughtUp, rep.Groups)
		}
	}
	rep.Ready = rep.Reason == ""
	status := http.StatusOK
	if !rep.Ready {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, rep)
}
