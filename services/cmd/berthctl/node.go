package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

func nodeDrain(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "node drain", "NODE-ADMIN-ADDR [--token T] [--timeout 60s] [--json]",
		"  BERTH_NODE_TOKEN=... berthctl node drain 10.0.0.5:9101 --timeout 2m").withJSON()
	token := f.String("token", "", "the node token (env BERTH_NODE_TOKEN)")
	timeout := f.Duration("timeout", time.Minute, "how long the node may take to hand its tenants over (at most 10m)")
	pos, err := f.parse(args, 1, 1)
	if err != nil {
		return err
	}
	if *token == "" {
		*token = e.getenv("BERTH_NODE_TOKEN")
	}
	if *token == "" {
		return usagef("node drain: the node token is required (--token or BERTH_NODE_TOKEN)")
	}
	nc := nodeclient.New(&http.Client{Timeout: *timeout + 15*time.Second}, *token)
	rep, err := nc.Drain(ctx, pos[0], *timeout)
	var se *nodeclient.StatusError
	if errors.As(err, &se) && se.Status == http.StatusUnauthorized {
		return &nodeRefusedError{addr: pos[0]}
	}
	if err != nil {
		return err
	}
	if *f.json {
		b, _ := json.MarshalIndent(rep, "", "  ")
		fmt.Fprintln(e.stdout, string(b))
	} else {
		state := "drained"
		if !rep.Drained {
			state = "NOT drained"
		}
		fmt.Fprintf(e.stdout, "node %s %s: %d tenant leadership(s) moved in %d ms", rep.NodeID, state, rep.Moved, rep.TookMS)
		if len(rep.Remaining) > 0 {
			fmt.Fprintf(e.stdout, "; still led here: %s", strings.Join(rep.Remaining, ", "))
		}
		fmt.Fprintln(e.stdout)
	}
	if !rep.Drained {
		return errNotDrained
	}
	return nil
}

// nodeRefusedError: the node refused the token (exit 3).
type nodeRefusedError struct{ addr string }

func (n *nodeRefusedError) Error() string {
	return fmt.Sprintf("the node at %s refused the node token; give the node's -node-token with --token or BERTH_NODE_TOKEN", n.addr)
}

// errNotBalanced: the node answered, but the cluster was not at its target
// spread by the deadline.
var errNotBalanced = errors.New("the cluster is not balanced yet; run rebalance again (it resumes) or give a longer --timeout")

// nodeRebalance asks one node to move the cluster's replicas and
// leaderships to their target spread (docs/replication.md, "Rebalance").
func nodeRebalance(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "node rebalance", "NODE-ADMIN-ADDR [--token T] [--timeout 5m] [--json]",
		"  # after a node joined (every node restarted with the new -peers list):\n"+
			"  BERTH_NODE_TOKEN=... berthctl node rebalance 10.0.0.5:9101 --timeout 10m").withJSON()
	token := f.String("token", "", "the node token (env BERTH_NODE_TOKEN)")
	timeout := f.Duration("timeout", 5*time.Minute, "how long the cluster may take to reach its target spread (at most 1h)")
	pos, err := f.parse(args, 1, 1)
	if err != nil {
		return err
	}
	if *token == "" {
		*token = e.getenv("BERTH_NODE_TOKEN")
	}
	if *token == "" {
		return usagef("node rebalance: the node token is required (--token or BERTH_NODE_TOKEN)")
	}
	nc := nodeclient.New(&http.Client{Timeout: *timeout + 15*time.Second}, *token)
	rep, err := nc.Rebalance(ctx, pos[0], *timeout)
	var se *nodeclient.StatusError
	if errors.As(err, &se) && se.Status == http.StatusUnauthorized {
		return &nodeRefusedError{addr: pos[0]}
	}
	if err != nil {
		return err
	}
	if *f.json {
		b, _ := json.MarshalIndent(rep, "", "  ")
		fmt.Fprintln(e.stdout, string(b))
	} else {
		state := "balanced"
		if !rep.Balanced {
			state = "NOT balanced"
		}
		fmt.Fprintf(e.stdout, "cluster %s (asked %s): %d tenants; this node's leaders moved %d leadership(s) and %d replica(s) in %d ms\n",
			state, rep.NodeID, rep.Tenants, rep.LeadershipsMoved, rep.ReplicasMoved, rep.TookMS)
		for _, n := range rep.Nodes {
			note := ""
			switch {
			case !n.Alive:
				note = "  (down)"
			case n.Work:
				note = "  (moving)"
			}
			fmt.Fprintf(e.stdout, "  %-20s target %d replicas, %d leaderships%s\n", n.ID, n.Replicas, n.Leaderships, note)
		}
	}
	if !rep.Balanced {
		return errNotBalanced
	}
	return nil
}
