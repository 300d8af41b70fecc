package node

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// Drain (docs/replication.md, "Drain"): POST /admin/drain makes this node
// hand the leadership of every tenant group it leads to another live voter
// (raft's leadership transfer), at most drainPerSecond groups a second, and
// keeps doing so for any group that elects it again, until DELETE
// /admin/drain or a restart. A tenant handed over stops being served here
// the moment its group has another leader: its clients get DISCONNECT 0x9C
// (use another server; 3.1.1 clients are closed) and reconnect through the
// gateway, which routes them to the new leader.
//
// The node also announces that it drains (replica.Host.SetDraining): the
// leader of every group it is a voter of, on another node, replaces its
// replica by one on the next node by rank that does not drain (learner,
// then promoted with the drained voter removed in one joint change;
// membership.go, at most maxMoves in flight per leader). A group with no
// such node (every node holds one of its replicas already) keeps its
// replica here ("kept"): the drained node can then be stopped without any
// tenant losing its quorum, one node at a time. DELETE /admin/drain ends
// the drain: no move starts any more, a learner not yet promoted is
// removed, moves done stay done.

const (
	drainPerSecond      = 100 // leadership transfers started per second at most
	drainDefaultTimeout = time.Minute
	drainMaxTimeout     = 10 * time.Minute
	// handOffEvery is how often one group's transfer is asked again while
	// this node still leads it (raft gives a transfer an election timeout).
	handOffEvery = time.Second
)

// drainReport is the answer of POST /admin/drain.
type drainReport struct {
	NodeID    string   `json:"node_id"`
	Drained   bool     `json:"drained"`
	Moved     int      `json:"moved"`     // groups led here when the drain began and not any more
	Remaining []string `json:"remaining"` // tenant ids still led here at the deadline
	// Replicas moved: groups this node voted in when the drain began and
	// not any more. Voting: groups it still votes in that another node
	// can take (none when drained); Kept: those no node can take.
	ReplicasMoved int   `json:"replicas_moved"`
	Voting        int   `json:"voting"`
	Kept          int   `json:"kept"`
	TookMS        int64 `json:"took_ms"`
}

// handOff asks rg's group to transfer its leadership to a live voter other
// than this node (spread over the voters by tenant); false when no voter
// is alive or the last ask is recent. Called from leadLoop.
func (r *replicas) handOff(rg *replGroup, now time.Time) bool {
	if now.Sub(rg.handOffAt) < handOffEvery {
		return false
	}
	var live []uint64
	for _, v := range rg.g.Members().Voters {
		if v != r.self && r.host.Alive(v) {
			live = append(live, v)
		}
	}
	if len(live) == 0 {
		return false
	}
	rg.handOffAt = now
	to := live[int(rg.g.ID()%uint64(len(live)))]
	if err := rg.g.TransferLeadership(to); err != nil {
		return false
	}
	r.n.log.Info("drain: handing the tenant's leadership over", "tenant_id", rg.id, "to", to)
	return true
}

// ledHere lists the tenants whose group this node leads or serves.
func (r *replicas) ledHere() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for id, rg := range r.groups {
		if rg.g.Leader() == r.self || rg.state.Load() != following {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// votingHere lists the tenants whose group has this node as a voter:
// movable, those a node that does not drain and holds no replica of it
// could take, or with a voter more than their factor; kept, the others.
func (r *replicas) votingHere() (movable, kept []string) {
	for _, rg := range r.groupList(nil) {
		voters := rg.g.Members().Voters
		if !slices.Contains(voters, r.self) {
			continue
		}
		// A voter too many (this node added a replacement while it led
		// the group) is removed by the next leader (membership.go): it
		// moves, the drain waits for it.
		spare := len(voters) > r.factor(rg.id)
		for _, m := range r.wanted(rg.id) {
			if id, ok := r.raftOf(m); !ok || !slices.Contains(voters, id) {
				spare = true
			}
		}
		if spare {
			movable = append(movable, rg.id)
		} else {
			kept = append(kept, rg.id)
		}
	}
	slices.Sort(movable)
	slices.Sort(kept)
	return movable, kept
}

// soleVoterHere reports whether this node is the only voter of tenant
// id's group.
func (r *replicas) soleVoterHere(id string) bool {
	r.mu.Lock()
	rg := r.groups[id]
	r.mu.Unlock()
	if rg == nil {
		return false
	}
	voters := rg.g.Members().Voters
	return len(voters) == 1 && voters[0] == r.self
}

// drain sets the node draining and waits until it leads no group and,
// when moveReplicas, votes in none that another node can take, or ctx.
func (r *replicas) drain(ctx context.Context, moveReplicas bool) drainReport {
	start := time.Now()
	before := r.ledHere()
	votedBefore, keptBefore := r.votingHere()
	votedBefore = append(votedBefore, keptBefore...)
	r.draining.Store(true)
	r.movingOff.Store(moveReplicas) // the last call says
	r.host.SetDraining(moveReplicas)
	r.n.log.Info("drain: started", "led", len(before), "voting", len(votedBefore))
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	rep := drainReport{NodeID: r.n.cfg.ID}
	var voting, kept, sole []string // sole: led here with no other voter (keep)
	for {
		rep.Remaining = r.ledHere()
		voting, kept = r.votingHere()
		if !moveReplicas {
			voting, kept = nil, append(voting, kept...)
			// A group whose only voter is this node (a free tenant's) has
			// no one to hand its leadership to without moving its replica:
			// a restart that keeps the disk takes it down for the restart.
			sole = sole[:0]
			for _, id := range rep.Remaining {
				if r.soleVoterHere(id) {
					sole = append(sole, id)
				}
			}
			rep.Remaining = slices.DeleteFunc(rep.Remaining, r.soleVoterHere)
		}
		if len(rep.Remaining) == 0 && len(voting) == 0 {
			break
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
			continue
		}
		break
	}
	for _, id := range before {
		if !slices.Contains(rep.Remaining, id) && !slices.Contains(sole, id) {
			rep.Moved++
		}
	}
	for _, id := range votedBefore {
		if !slices.Contains(voting, id) && !slices.Contains(kept, id) {
			rep.ReplicasMoved++
		}
	}
	rep.Voting, rep.Kept = len(voting), len(kept)
	if rep.Remaining == nil {
		rep.Remaining = []string{}
	}
	rep.Drained = len(rep.Remaining) == 0 && len(voting) == 0
	rep.TookMS = time.Since(start).Milliseconds()
	r.n.log.Info("drain: done", "moved", rep.Moved, "remaining", len(rep.Remaining), "replicas_moved", rep.ReplicasMoved,
		"voting", rep.Voting, "kept", rep.Kept, "took", time.Since(start).Round(time.Millisecond))
	return rep
}

// replication is the node's replication, nil while Start has not brought
// it up (the admin listener serves before) or without Config.Peers.
func (n *Node) replication() *replicas {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.repl
}

// noReplication answers a drain request the node cannot serve: 409 when it
// does not replicate, 503 (Retry-After) while replication is starting. It
// reports false when there is nothing to answer.
func (n *Node) noReplication(w http.ResponseWriter, repl *replicas) bool {
	switch {
	case repl != nil:
		return false
	case len(n.cfg.Peers) > 0:
		w.Header().Set("Retry-After", strconv.Itoa(int(handOffEvery.Seconds())))
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "starting: replication is not up yet"})
	default:
		writeJSON(w, http.StatusConflict, map[string]string{"error": "this node does not replicate (no -peers): its tenants cannot move to another node"})
	}
	return true
}

// waitTimeout reads the ?timeout= of a call that waits (drain,
// rebalance): def when there is none; false, with 400 written, when it is
// not a duration above 0 and at most max (example: one for the message).
func waitTimeout(w http.ResponseWriter, r *http.Request, def, max time.Duration, example string) (time.Duration, bool) {
	s := r.URL.Query().Get("timeout")
	if s == "" {
		return def, true
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > max {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "timeout: a duration such as " + example + ", at most " + max.String()})
		return 0, false
	}
	return d, true
}

// handleDrain serves POST /admin/drain[?timeout=60s][&replicas=keep]:
// with replicas=keep only the leaderships move (a restart, the preStop
// hook: the node comes back with its disk).
func (n *Node) handleDrain(w http.ResponseWriter, r *http.Request) {
	repl := n.replication()
	if n.noReplication(w, repl) {
		return
	}
	timeout, ok := waitTimeout(w, r, drainDefaultTimeout, drainMaxTimeout, "30s")
	if !ok {
		return
	}
	moveReplicas := true
	switch r.URL.Query().Get("replicas") {
	case "", "move":
	case "keep": // a restart: the node comes back with its disk, its replicas stay
		moveReplicas = false
	default:
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "replicas: move (the default) or keep"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	rep := repl.drain(ctx, moveReplicas)
	writeOutcome(w, rep.Drained, rep)
}

// writeOutcome answers a call that waits for the cluster (drain,
// rebalance): 200 with rep when done, else 503 with Retry-After.
func writeOutcome(w http.ResponseWriter, done bool, rep any) {
	status := http.StatusOK
	if !done {
		status = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", strconv.Itoa(int(handOffEvery.Seconds())))
	}
	writeJSON(w, status, rep)
}

// handleUndrain serves DELETE /admin/drain: the node may lead again (the
// groups elect it as they will; nothing is moved back).
func (n *Node) handleUndrain(w http.ResponseWriter, _ *http.Request) {
	repl := n.replication()
	if n.noReplication(w, repl) {
		return
	}
	repl.draining.Store(false)
	repl.movingOff.Store(false)
	repl.host.SetDraining(false)
	n.log.Info("drain: ended")
	writeJSON(w, http.StatusOK, map[string]any{"node_id": n.cfg.ID, "draining": false})
}
