package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"berth.dev/flagenv"
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
	drainExitDrained = 0
	drainExitFailed  = 1
	drainExitUsage   = 2
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

// runDrain runs broker drain with args (after "drain") and returns the
// exit status.
func runDrain(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("broker drain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	admin := fs.String("admin", "127.0.0.1:7880", "the node's admin listener (host:port)")
	timeout := fs.Duration("timeout", 50*time.Second, "how long the node may take to hand its leaderships over, at most "+drainMaxTimeout.String())
	replicas := fs.String("replicas", "move", "move: the node's replicas move to other nodes too (it leaves for good); keep: leaderships only (a restart that keeps its disk, the chart's preStop)")
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: broker drain [-admin 127.0.0.1:7880] [-timeout 50s] [-replicas move|keep]

Moves the leadership of every tenant a replicating node leads to other
nodes (POST /admin/drain) and waits until it leads nothing; with
-replicas move (the default) its replicas move to other nodes too, so
that it can leave for good; -replicas keep, for a restart that keeps the
node's disk, moves leaderships only. The node token
is read from BERTH_NODE_TOKEN. Flags can also be set with BERTH_DRAIN_<FLAG>.
Exit status: 0 drained, 1 not drained in time (or the node refused), 2 usage.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return drainExitDrained
		}
		return drainExitUsage
	}
	if _, err := (flagenv.Rule{Prefix: "BERTH_DRAIN_"}).Apply(fs, getenv); err != nil {
		fmt.Fprintln(stderr, "broker drain:", err)
		return drainExitUsage
	}
	usage := func(msg string) int {
		fmt.Fprintln(stderr, "broker drain:", msg)
		fs.Usage()
		return drainExitUsage
	}
	if fs.NArg() > 0 {
		return usage(fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	if _, _, err := net.SplitHostPort(*admin); err != nil {
		return usage(fmt.Sprintf("-admin %q: want host:port", *admin))
	}
	if *replicas != "move" && *replicas != "keep" {
		return usage(fmt.Sprintf("-replicas %q: want move or keep", *replicas))
	}
	if *timeout <= 0 || *timeout > drainMaxTimeout {
		return usage(fmt.Sprintf("-timeout %v: want a duration above 0 and at most %v", *timeout, drainMaxTimeout))
	}
	token := getenv("BERTH_NODE_TOKEN")
	if token == "" {
		return usage("BERTH_NODE_TOKEN is not set (the node's admin token)")
	}

	ans, status, err := postDrain(ctx, *admin, token, *timeout, *replicas)
	switch {
	case err != nil:
		fmt.Fprintln(stderr, "broker drain:", err)
		return drainExitFailed
	case status == http.StatusOK && ans.Drained:
		fmt.Fprintf(stdout, "node %s drained: leads no tenant (%d leaderships and %d replicas moved, %d ms)\n", ans.NodeID, ans.Moved, ans.ReplicasMoved, ans.TookMS)
		return drainExitDrained
	case status == http.StatusServiceUnavailable:
		fmt.Fprintf(stderr, "broker drain: node %s still leads %d tenant(s) and votes in %d after %v (%d moved)\n", ans.NodeID, len(ans.Remaining), ans.Voting, *timeout, ans.Moved)
		return drainExitFailed
	default:
		msg := ans.Error
		if msg == "" {
			msg = http.StatusText(status)
		}
		fmt.Fprintf(stderr, "broker drain: the node answered %d: %s\n", status, msg)
		return drainExitFailed
	}
}

// postDrain calls POST /admin/drain?timeout=&replicas= on the node's admin
// listener.
func postDrain(ctx context.Context, admin, token string, timeout time.Duration, replicas string) (drainAnswer, int, error) {
	// The node answers at its timeout at the latest; allow for the trip.
	ctx, cancel := context.WithTimeout(ctx, timeout+10*time.Second)
	defer cancel()
	u := url.URL{Scheme: "http", Host: admin, Path: "/admin/drain", RawQuery: url.Values{"timeout": {timeout.String()}, "replicas": {replicas}}.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), nil)
	if err != nil {
		return drainAnswer{}, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return drainAnswer{}, 0, fmt.Errorf("asking %s: %w", admin, err)
	}
	defer resp.Body.Close()
	var ans drainAnswer
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&ans); err != nil && resp.StatusCode == http.StatusOK {
		return ans, resp.StatusCode, fmt.Errorf("the node's answer: %w", err)
	}
	return ans, resp.StatusCode, nil
}
