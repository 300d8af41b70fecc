package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// `broker drain` asks a replicating node, through its admin API, to hand
// the leadership of every tenant it leads to another node (POST
// /admin/drain, docs/replication.md "Drain"), and waits for the answer. It
// is the node's preStop hook in the Helm chart: the node image holds only
// this binary. The node token comes from BERTH_NODE_TOKEN (never a flag:
// flags show in process lists).
//
//	broker drain [-admin 127.0.0.1:7880] [-timeout 50s]
//
// Exit status: 0 the node leads nothing; 1 it still leads tenants at the
// timeout, or the node could not be asked (unreachable, wrong token, not
// replicating); 2 usage.

// Exit statuses of broker drain.
const (
	drainExitDrained = adminExitDone
	drainExitFailed  = adminExitFailed
	drainExitUsage   = adminExitUsage
)

// drainMaxTimeout is the node's bound on ?timeout= (node.drainMaxTimeout).
const drainMaxTimeout = 10 * time.Minute

// drainAnswer is the part of the node's answer broker drain reports.
type drainAnswer struct {
	NodeID        string   `json:"node_id"`
	Drained       bool     `json:"drained"`
	Moved         int      `json:"moved"`
	Remaining     []string `json:"remaining"`
	ReplicasMoved int      `json:"replicas_moved"`
	Voting        int      `json:"voting"`
	TookMS        int64    `json:"took_ms"`
	Error         string   `json:"error"`
}

const drainUsage = `Usage: broker drain [-admin 127.0.0.1:7880] [-timeout 50s] [-replicas move|keep]

Moves the leadership of every tenant a replicating node leads to other
nodes (POST /admin/drain) and waits until it leads nothing; with
-replicas move (the default) its replicas move to other nodes too, so
that it can leave for good; -replicas keep, for a restart that keeps the
node's disk, moves leaderships only. The node token
is read from BERTH_NODE_TOKEN. Flags can also be set with BERTH_DRAIN_<FLAG>.
Exit status: 0 drained, 1 not drained in time (or the node refused), 2 usage.

Flags:
`

// runDrain runs broker drain with args (after "drain") and returns the
// exit status.
func runDrain(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c := newAdminCall("broker drain", drainUsage, stderr, "the node's admin listener (host:port)",
		50*time.Second, drainMaxTimeout, "how long the node may take to hand its leaderships over")
	replicas := c.fs.String("replicas", "move", "move: the node's replicas move to other nodes too (it leaves for good); keep: leaderships only (a restart that keeps its disk, the chart's preStop)")
	token, code, ok := c.parse(args, getenv, "BERTH_DRAIN_", func() string {
		if *replicas != "move" && *replicas != "keep" {
			return fmt.Sprintf("-replicas %q: want move or keep", *replicas)
		}
		return ""
	})
	if !ok {
		return code
	}

	var ans drainAnswer
	status, err := c.post(ctx, token, "/admin/drain", url.Values{"replicas": {*replicas}}, &ans)
	switch {
	case err == nil && status == http.StatusOK && ans.Drained:
		fmt.Fprintf(stdout, "node %s drained: leads no tenant (%d leaderships and %d replicas moved, %d ms)\n", ans.NodeID, ans.Moved, ans.ReplicasMoved, ans.TookMS)
		return drainExitDrained
	case err == nil && status == http.StatusServiceUnavailable:
		fmt.Fprintf(stderr, "broker drain: node %s still leads %d tenant(s) and votes in %d after %v (%d moved)\n", ans.NodeID, len(ans.Remaining), ans.Voting, *c.timeout, ans.Moved)
		return drainExitFailed
	default:
		return c.failed(err, status, ans.Error)
	}
}
