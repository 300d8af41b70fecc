package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// `broker rebalance` asks a replicating node, through its admin API, to
// move the cluster's replicas and leaderships to their target spread
// (POST /admin/rebalance, docs/replication.md "Rebalance") and waits for
// the answer: what an operator runs after a node joined (the new -peers
// list rolled through every node), from the node image, which holds only
// this binary. The node token comes from BERTH_NODE_TOKEN (never a flag:
// flags show in process lists).
//
//	broker rebalance [-admin 127.0.0.1:7880] [-timeout 5m]
//
// Exit status, as berthctl's: 0 the cluster is balanced; 1 it is not at the
// timeout, or the node could not be asked (unreachable, wrong token, not
// replicating, draining); 2 usage.

// Exit statuses of broker rebalance.
const (
	rebalanceExitBalanced = adminExitDone
	rebalanceExitFailed   = adminExitFailed
	rebalanceExitUsage    = adminExitUsage
)

// rebalanceMaxTimeout is the node's bound on ?timeout= (node.rebalanceMaxTimeout).
const rebalanceMaxTimeout = time.Hour

// rebalanceAnswer is the part of the node's answer broker rebalance reports.
type rebalanceAnswer struct {
	NodeID   string `json:"node_id"`
	Balanced bool   `json:"balanced"`
	Tenants  int    `json:"tenants"`
	Nodes    []struct {
		ID          string `json:"id"`
		Replicas    int    `json:"replicas"`
		Leaderships int    `json:"leaderships"`
		Alive       bool   `json:"alive"`
		Following   bool   `json:"following"`
		Work        bool   `json:"work"`
	} `json:"nodes"`
	LeadershipsMoved int64  `json:"leaderships_moved"`
	ReplicasMoved    int64  `json:"replicas_moved"`
	TookMS           int64  `json:"took_ms"`
	Error            string `json:"error"`
}

const rebalanceUsage = `Usage: broker rebalance [-admin 127.0.0.1:7880] [-timeout 5m]

Moves the cluster's replicas and leaderships to their target spread (POST
/admin/rebalance on any replicating node): each tenant's replicas on the
nodes rendezvous hashing ranks first for it, its leadership on the first
of them. Run it after a node joined (every node restarted with the new
-peers list); again after a timeout, it resumes. The node token is read
from BERTH_NODE_TOKEN. Flags can also be set with BERTH_REBALANCE_<FLAG>.
Exit status: 0 balanced, 1 not balanced in time (or the node refused, or
could not be reached), 2 usage.

  BERTH_NODE_TOKEN=… broker rebalance -admin 127.0.0.1:7880 -timeout 10m

Flags:
`

// runRebalance runs broker rebalance with args (after "rebalance") and
// returns the exit status.
func runRebalance(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c := newAdminCall("broker rebalance", rebalanceUsage, stderr, "a node's admin listener (host:port); any replicating node that does not drain",
		5*time.Minute, rebalanceMaxTimeout, "how long the cluster may take to reach its target spread")
	token, code, ok := c.parse(args, getenv, "BERTH_REBALANCE_", nil)
	if !ok {
		return code
	}

	var ans rebalanceAnswer
	status, err := c.post(ctx, token, "/admin/rebalance", nil, &ans)
	switch {
	case err == nil && status == http.StatusOK && ans.Balanced:
		fmt.Fprintf(stdout, "cluster balanced (asked %s): %d tenants; this node's leaders moved %d leadership(s) and %d replica(s) in %d ms\n",
			ans.NodeID, ans.Tenants, ans.LeadershipsMoved, ans.ReplicasMoved, ans.TookMS)
		writeShares(stdout, ans)
		return rebalanceExitBalanced
	case err == nil && status == http.StatusServiceUnavailable && ans.NodeID != "":
		var moving, down []string
		for _, n := range ans.Nodes {
			switch {
			case !n.Alive:
				down = append(down, n.ID)
			case n.Work || !n.Following:
				moving = append(moving, n.ID)
			}
		}
		fmt.Fprintf(stderr, "broker rebalance: the cluster is not balanced after %v (asked %s; still moving: %s; down: %s); run it again, it resumes\n",
			*c.timeout, ans.NodeID, joinOrNone(moving), joinOrNone(down))
		writeShares(stderr, ans)
		return rebalanceExitFailed
	default:
		return c.failed(err, status, ans.Error)
	}
}

// writeShares writes each node's target share, one line per node.
func writeShares(w io.Writer, ans rebalanceAnswer) {
	for _, n := range ans.Nodes {
		note := ""
		switch {
		case !n.Alive:
			note = " (down)"
		case n.Work:
			note = " (moving)"
		}
		fmt.Fprintf(w, "  %s: target %d replicas, %d leaderships%s\n", n.ID, n.Replicas, n.Leaderships, note)
	}
}

func joinOrNone(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	return strings.Join(ids, ", ")
}
