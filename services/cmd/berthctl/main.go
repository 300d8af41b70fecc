// Command berthctl is the Berth command line: sign up, log in, manage
// tenants, credentials, quotas, topic rules and sessions, read usage, and
// publish or subscribe over MQTT. `berthctl help` lists the commands; every
// command takes -h. Exit codes: 0 ok, 1 an error from the API or the network,
// 2 a usage error, 3 not logged in or refused credentials (HTTP 401),
// 4 not found (HTTP 404).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"

	"berth.dev/services/apiclient"
)

// Exit codes, documented in the usage text.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitAuth     = 3
	exitNotFound = 4
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv})
	stop()
	os.Exit(code)
}

// env is what a run sees of the outside world.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
}

func (e *env) envOr(k, d string) string {
	if v := e.getenv(k); v != "" {
		return v
	}
	return d
}

// command is one subcommand (or group of them).
type command struct {
	name, summary string
	run           func(ctx context.Context, e *env, args []string) error
}

func commands() []command {
	return []command{
		{"signup", "create an account (and its first tenant), then log in", runSignup},
		{"login", "log in and store an API key in the config file", runLogin},
		{"logout", "revoke the stored API key and forget it", runLogout},
		{"tenants", "list, create or choose tenants", runTenants},
		{"credentials", "list, create, token, revoke device credentials", runCredentials},
		{"quotas", "show or change the tenant's quotas", runQuotas},
		{"topics", "list, create or delete topic rules", runTopics},
		{"sessions", "list MQTT sessions or kick one", runSessions},
		{"retained", "list retained messages", runRetained},
		{"usage", "messages, bytes and connection time per step", runUsage},
		{"latency", "delivery, ack or connect latency percentiles", runLatency},
		{"traces", "list traces or show one as a waterfall", runTraces},
		{"invoices", "list the account's invoices or show one's lines", runInvoices},
		{"pub", "publish MQTT messages to the tenant", runPub},
		{"sub", "subscribe over MQTT and print what arrives", runSub},
		{"node", "operator: drain a broker node (hand its tenants to other nodes), rebalance the cluster", runNode},
		{"demo", "make (once) a demo account and device credential, print them as shell variables", runDemo},
		{"completion", "print a shell completion script (bash, zsh or fish)", runCompletion},
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `berthctl: the Berth command line.

Usage: berthctl COMMAND [flags] [arguments]

Commands:
`)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	fmt.Fprintf(tw, "  help\tthis text; help COMMAND shows a command's flags\n")
	tw.Flush()
	fmt.Fprint(w, `
Common flags: --api URL (env BERTH_API_URL, default the API you logged in to,
else http://127.0.0.1:8080), --tenant ID|SLUG (env BERTH_TENANT, default the
one chosen at login), --json (listings: the API's JSON, for scripts).
The config file is $XDG_CONFIG_HOME/berth/config.json (~/.config/berth/...);
BERTH_API_KEY overrides its key.

Example:
  berthctl signup --email me@example.com --password 'correct horse battery'
  berthctl credentials create sensor --pub 'sensors/#' --sub 'sensors/#'
  berthctl sub -t 'sensors/#' &
  berthctl pub -t sensors/1 -m '{"t":21.5}'

Exit codes: 0 ok, 1 error from the API or the network, 2 usage error,
3 not logged in or credentials refused (HTTP 401), 4 not found (HTTP 404).
`)
}

// run executes args and returns the exit code.
func run(ctx context.Context, args []string, e *env) int {
	if len(args) == 0 {
		usage(e.stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "help", "-h", "--help", "-help":
		if len(args) > 1 && name == "help" {
			return run(ctx, []string{args[1], "-h"}, e)
		}
		usage(e.stdout)
		return exitOK
	}
	for _, c := range commands() {
		if c.name == name {
			return exitCode(e, c.run(ctx, e, args[1:]))
		}
	}
	fmt.Fprintf(e.stderr, "berthctl: unknown command %q (berthctl help lists them)\n", name)
	return exitUsage
}

// usageError is a bad command line.
type usageError struct{ msg string }

func (u *usageError) Error() string { return u.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// errNotLoggedIn: no key in the config file or the environment.
var errNotLoggedIn = errors.New("not logged in: run berthctl login (or berthctl signup), or set BERTH_API_KEY")

// notFoundError is a name the CLI looked for and did not find.
type notFoundError struct{ what string }

func (n *notFoundError) Error() string { return n.what + " not found" }

func exitCode(e *env, err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	var ue *usageError
	var ae *apiclient.Error
	var nf *notFoundError
	var re *refusedError
	var ue2 *url.Error
	var op *net.OpError
	switch {
	case errors.As(err, &ue2) && errors.As(err, &op) && op.Op == "dial":
		// The API is not where berthctl looked: say where it looked and how to point it elsewhere.
		base := ue2.URL
		if u, perr := url.Parse(ue2.URL); perr == nil {
			base = u.Scheme + "://" + u.Host
		}
		fmt.Fprintf(e.stderr, "berthctl: cannot reach the API at %s (%v); is it running (make run)? Give its address with --api URL or BERTH_API_URL\n", base, op.Err)
		return exitError
	case errors.As(err, &re), errors.As(err, new(*nodeRefusedError)):
		fmt.Fprintln(e.stderr, "berthctl:", err)
		return exitAuth
	case errors.As(err, &ue):
		if ue.msg != "" {
			fmt.Fprintln(e.stderr, "berthctl:", ue.msg)
		}
		return exitUsage
	case errors.Is(err, errNotLoggedIn):
		fmt.Fprintln(e.stderr, "berthctl:", err)
		return exitAuth
	case errors.As(err, &nf):
		fmt.Fprintln(e.stderr, "berthctl:", err)
		return exitNotFound
	case errors.As(err, &ae):
		fmt.Fprintln(e.stderr, "berthctl:", err)
		switch ae.Status {
		case 401:
			return exitAuth
		case 404:
			return exitNotFound
		}
		return exitError
	}
	fmt.Fprintln(e.stderr, "berthctl:", err)
	return exitError
}

// subcommand dispatches a group's first argument to subs; def runs when
// there is none or it is a flag.
func subcommand(ctx context.Context, e *env, group string, args []string, def string, subs map[string]func(context.Context, *env, []string) error) error {
	name := def
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	} else if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") && def == "" {
		return groupHelp(e, group, subs)
	}
	if name == "" {
		_ = groupHelp(e, group, subs)
		return &usageError{}
	}
	f, ok := subs[name]
	if !ok {
		return usagef("%s: unknown subcommand %q (berthctl %s -h)", group, name, group)
	}
	return f(ctx, e, args)
}

func groupHelp(e *env, group string, subs map[string]func(context.Context, *env, []string) error) error {
	names := make([]string, 0, len(subs))
	for n := range subs {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(e.stderr, "Usage: berthctl %s {%s} [flags]; berthctl %s SUBCOMMAND -h for its flags\n", group, strings.Join(names, "|"), group)
	return flag.ErrHelp
}
