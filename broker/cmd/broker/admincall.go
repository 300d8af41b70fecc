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

// Exit statuses of the subcommands that ask a node's admin API (broker
// drain, broker rebalance): done, not done (in time, refused, or the node
// unreachable), usage.
const (
	adminExitDone   = 0
	adminExitFailed = 1
	adminExitUsage  = 2
)

// adminCall is what broker drain and broker rebalance share: the flags
// -admin and -timeout on a flag set of their own, the node token from
// BERTH_NODE_TOKEN (never a flag: flags show in process lists), and one
// POST to the node's admin API whose answer is waited for.
type adminCall struct {
	name       string // "broker drain"
	fs         *flag.FlagSet
	admin      *string
	timeout    *time.Duration
	maxTimeout time.Duration // the node's bound on ?timeout=
	stderr     io.Writer
}

// newAdminCall makes the flag set of command name with -admin and
// -timeout; usage is the help text printed above the flags.
func newAdminCall(name, usage string, stderr io.Writer, adminHelp string, timeout, maxTimeout time.Duration, timeoutHelp string) *adminCall {
	c := &adminCall{name: name, fs: flag.NewFlagSet(name, flag.ContinueOnError), maxTimeout: maxTimeout, stderr: stderr}
	c.fs.SetOutput(stderr)
	c.admin = c.fs.String("admin", "127.0.0.1:7880", adminHelp)
	c.timeout = c.fs.Duration("timeout", timeout, timeoutHelp+", at most "+maxTimeout.String())
	c.fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		c.fs.PrintDefaults()
	}
	return c
}

// parse parses args, fills flags left unset from the environment
// variables named envPrefix+FLAG, checks them (check returns what is wrong
// with the command's own flags, "" when nothing) and reads the node
// token. ok false: the command exits with code (0 after -help).
func (c *adminCall) parse(args []string, getenv func(string) string, envPrefix string, check func() string) (token string, code int, ok bool) {
	if err := c.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return "", adminExitDone, false
		}
		return "", adminExitUsage, false
	}
	if _, err := (flagenv.Rule{Prefix: envPrefix}).Apply(c.fs, getenv); err != nil {
		fmt.Fprintln(c.stderr, c.name+":", err)
		return "", adminExitUsage, false
	}
	msg := ""
	switch _, _, err := net.SplitHostPort(*c.admin); {
	case c.fs.NArg() > 0:
		msg = fmt.Sprintf("unexpected argument %q", c.fs.Arg(0))
	case err != nil:
		msg = fmt.Sprintf("-admin %q: want host:port", *c.admin)
	case check != nil && check() != "":
		msg = check()
	case *c.timeout <= 0 || *c.timeout > c.maxTimeout:
		msg = fmt.Sprintf("-timeout %v: want a duration above 0 and at most %v", *c.timeout, c.maxTimeout)
	default:
		if token = getenv("BERTH_NODE_TOKEN"); token == "" {
			msg = "BERTH_NODE_TOKEN is not set (the node's admin token)"
		}
	}
	if msg != "" {
		fmt.Fprintln(c.stderr, c.name+":", msg)
		c.fs.Usage()
		return "", adminExitUsage, false
	}
	return token, 0, true
}

// post calls POST path?query (timeout= added) on the node's admin
// listener and decodes its JSON answer into ans; it returns the status.
// An answer that does not decode is an error only with a 200.
func (c *adminCall) post(ctx context.Context, token, path string, query url.Values, ans any) (int, error) {
	// The node answers at its timeout at the latest; allow for the trip.
	ctx, cancel := context.WithTimeout(ctx, *c.timeout+10*time.Second)
	defer cancel()
	if query == nil {
		query = url.Values{}
	}
	query.Set("timeout", c.timeout.String())
	u := url.URL{Scheme: "http", Host: *c.admin, Path: path, RawQuery: query.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("asking %s: %w", *c.admin, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(ans); err != nil && resp.StatusCode == http.StatusOK {
		return resp.StatusCode, fmt.Errorf("the node's answer: %w", err)
	}
	return resp.StatusCode, nil
}

// failed reports a call that did not get the node's answer (err) or that
// the node refused (status, msg: its "error", else the status text), and
// returns adminExitFailed.
func (c *adminCall) failed(err error, status int, msg string) int {
	if err != nil {
		fmt.Fprintln(c.stderr, c.name+":", err)
		return adminExitFailed
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	fmt.Fprintf(c.stderr, "%s: the node answered %d: %s\n", c.name, status, msg)
	return adminExitFailed
}
