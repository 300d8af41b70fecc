package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"berth.dev/services/internal/nodeclient"
)

// runNode is the operator's group: commands sent to a broker node's admin
// API with the node token (not the public API and its keys).
func runNode(ctx context.Context, e *env, args []string) error {
	return subcommand(ctx, e, "node", args, "", map[string]func(context.Context, *env, []string) error{
		"drain":     nodeDrain,
		"rebalance": nodeRebalance,
	})
}

// errNotDrained: the node answered, but still leads tenants at its deadline.
var errNotDrained = errors.New("the node still leads tenants; run drain again (it resumes) or give a longer --timeout")

// errNotBalanced: the node answered, but the cluster was not at its target
// spread by the deadline.
var errNotBalanced = errors.New("the cluster is not balanced yet; run rebalance again (it resumes) or give a longer --timeout")

// nodeRefusedError: the node refused the token (exit 3).
type nodeRefusedError struct{ addr string }

func (n *nodeRefusedError) Error() string {
	return fmt.Sprintf("the node at %s refused the node token; give the node's -node-token with --token or BERTH_NODE_TOKEN", n.addr)
}

// nodeCall is a node subcommand that asks one node's admin API and waits
// for its report R: NODE-ADMIN-ADDR, --token (BERTH_NODE_TOKEN),
// --timeout, --json; a refused token is a nodeRefusedError, a report not
// done (done false) is notDone once printed. For people, text writes the
// report with its state: doneWord ("drained"), or "NOT " before it.
type nodeCall[R any] struct {
	name, synopsis, example string
	timeout                 time.Duration
	timeoutHelp             string
	call                    func(nc *nodeclient.Client, ctx context.Context, addr string, timeout time.Duration) (R, error)
	text                    func(w io.Writer, state string, rep R)
	done                    func(rep R) bool
	doneWord                string
	notDone                 error
}

func (c nodeCall[R]) run(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, c.name, c.synopsis, c.example).withJSON()
	token := f.String("token", "", "the node token (env BERTH_NODE_TOKEN)")
	timeout := f.Duration("timeout", c.timeout, c.timeoutHelp)
	pos, err := f.parse(args, 1, 1)
	if err != nil {
		return err
	}
	if *token == "" {
		*token = e.getenv("BERTH_NODE_TOKEN")
	}
	if *token == "" {
		return usagef("%s: the node token is required (--token or BERTH_NODE_TOKEN)", c.name)
	}
	nc := nodeclient.New(&http.Client{Timeout: *timeout + 15*time.Second}, *token)
	rep, err := c.call(nc, ctx, pos[0], *timeout)
	var se *nodeclient.StatusError
	if errors.As(err, &se) && se.Status == http.StatusUnauthorized {
		return &nodeRefusedError{addr: pos[0]}
	}
	if err != nil {
		return err
	}
	done, state := c.done(rep), c.doneWord
	if !done {
		state = "NOT " + state
	}
	if *f.json {
		b, _ := json.MarshalIndent(rep, "", "  ")
		fmt.Fprintln(e.stdout, string(b))
	} else {
		c.text(e.stdout, state, rep)
	}
	if !done {
		return c.notDone
	}
	return nil
}

// nodeDrain asks one node to hand its leaderships over (docs/replication.md,
// "Drain").
func nodeDrain(ctx context.Context, e *env, args []string) error {
	return nodeCall[nodeclient.DrainReport]{
		name: "node drain", synopsis: "NODE-ADMIN-ADDR [--token T] [--timeout 60s] [--json]",
		example:     "  BERTH_NODE_TOKEN=... berthctl node drain 10.0.0.5:9101 --timeout 2m",
		timeout:     time.Minute,
		timeoutHelp: "how long the node may take to hand its tenants over (at most 10m)",
		call:        (*nodeclient.Client).Drain,
		done:        func(rep nodeclient.DrainReport) bool { return rep.Drained },
		doneWord:    "drained",
		notDone:     errNotDrained,
		text: func(w io.Writer, state string, rep nodeclient.DrainReport) {
			fmt.Fprintf(w, "node %s %s: %d tenant leadership(s) moved in %d ms", rep.NodeID, state, rep.Moved, rep.TookMS)
			if len(rep.Remaining) > 0 {
				fmt.Fprintf(w, "; still led here: %s", strings.Join(rep.Remaining, ", "))
			}
			fmt.Fprintln(w)
		},
	}.run(ctx, e, args)
}

// nodeRebalance asks one node to move the cluster's replicas and
// leaderships to their target spread (docs/replication.md, "Rebalance").
func nodeRebalance(ctx context.Context, e *env, args []string) error {
	return nodeCall[nodeclient.RebalanceReport]{
		name: "node rebalance", synopsis: "NODE-ADMIN-ADDR [--token T] [--timeout 5m] [--json]",
		example: "  # after a node joined (every node restarted with the new -peers list):\n" +
			"  BERTH_NODE_TOKEN=... berthctl node rebalance 10.0.0.5:9101 --timeout 10m",
		timeout:     5 * time.Minute,
		timeoutHelp: "how long the cluster may take to reach its target spread (at most 1h)",
		call:        (*nodeclient.Client).Rebalance,
		done:        func(rep nodeclient.RebalanceReport) bool { return rep.Balanced },
		doneWord:    "balanced",
		notDone:     errNotBalanced,
		text: func(w io.Writer, state string, rep nodeclient.RebalanceReport) {
			fmt.Fprintf(w, "cluster %s (asked %s): %d tenants; this node's leaders moved %d leadership(s) and %d replica(s) in %d ms\n",
				state, rep.NodeID, rep.Tenants, rep.LeadershipsMoved, rep.ReplicasMoved, rep.TookMS)
			for _, n := range rep.Nodes {
				fmt.Fprintf(w, "  %-20s target %d replicas, %d leaderships%s\n", n.ID, n.Replicas, n.Leaderships, shareNote(n))
			}
		},
	}.run(ctx, e, args)
}

// shareNote marks a node of a rebalance's report that is down or still
// moving groups.
func shareNote(n nodeclient.RebalanceNode) string {
	switch {
	case !n.Alive:
		return "  (down)"
	case n.Work:
		return "  (moving)"
	}
	return ""
}
