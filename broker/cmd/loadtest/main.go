// Command loadtest loads an MQTT broker and reports what it sustained:
// connections held (-mode conn), messages accepted (-mode pub), deliveries
// and end-to-end latency (-mode pubsub). It is built on Berth's own codec;
// the work is done by berth.dev/broker/internal/loadgen.
//
//	loadtest -addr 127.0.0.1:1883 -mode conn -levels 1000,10000 -hold 3s -dial-concurrency 200
//	loadtest -addr 127.0.0.1:1883 -mode pub -pubs 10 -qos 0 -payload 64 -duration 10s
//	loadtest -addr 127.0.0.1:1883 -mode pubsub -subs 10 -pubs 10 -qos 1 -rate 100 -duration 10s
//
// Progress goes to stderr once a second; the summary goes to stdout, as
// JSON with -json. Exit status: 0 pass, 1 the run failed its checks (loss
// at QoS 1 or 2, connection failures above -max-conn-fail, dropped
// connections), 2 bad flags or the run could not start. Targets outside
// loopback are refused unless -allow-remote is given.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"berth.dev/broker/internal/loadgen"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, asJSON, quiet, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var progress io.Writer = stderr
	if quiet {
		progress = nil
	}
	rep, err := loadgen.Run(ctx, cfg, progress)
	if err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return 2
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintln(stderr, "loadtest:", err)
			return 2
		}
	} else {
		rep.WriteText(stdout)
	}
	if !rep.OK() {
		return 1
	}
	return 0
}

// parseFlags fills a loadgen.Config from flags, with BERTH_LOADTEST_USER
// and BERTH_LOADTEST_PASS filling -user and -pass when unset.
func parseFlags(args []string, stderr io.Writer) (cfg loadgen.Config, asJSON, quiet bool, err error) {
	cfg = loadgen.Defaults()
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	mode := string(cfg.Mode)
	levels := joinInts(cfg.Levels)
	qos := uint(cfg.QoS)
	fs.StringVar(&cfg.Addr, "addr", cfg.Addr, "broker `host:port`")
	fs.StringVar(&cfg.User, "user", "", "CONNECT user name (env BERTH_LOADTEST_USER)")
	fs.StringVar(&cfg.Pass, "pass", "", "CONNECT password (env BERTH_LOADTEST_PASS)")
	fs.StringVar(&mode, "mode", mode, "conn, pub or pubsub")
	fs.BoolVar(&cfg.V5, "v5", false, "speak MQTT 5.0 instead of 3.1.1")
	fs.BoolVar(&cfg.TLS, "tls", false, "connect with TLS")
	fs.BoolVar(&cfg.TLSInsecure, "tls-insecure", false, "skip TLS certificate verification")
	fs.StringVar(&cfg.CAFile, "cacert", "", "PEM file with the CA to trust for -tls")
	fs.BoolVar(&cfg.WS, "ws", false, "MQTT over WebSocket (subprotocol mqtt)")
	fs.StringVar(&cfg.WSPath, "ws-path", cfg.WSPath, "WebSocket request path")
	fs.BoolVar(&cfg.AllowRemote, "allow-remote", false, "allow a target outside loopback")
	fs.StringVar(&levels, "levels", levels, "conn: comma-separated connection counts, increasing")
	fs.DurationVar(&cfg.Hold, "hold", cfg.Hold, "conn: how long to hold each level before the PINGREQ check")
	fs.IntVar(&cfg.DialConcurrency, "dial-concurrency", cfg.DialConcurrency, "conn: dials in flight at once")
	fs.Func("source-addrs", "conn: comma-separated local `addresses` to dial from in turn, e.g. 127.0.0.2,127.0.0.3 (each has its own ephemeral ports)", func(v string) error {
		cfg.SourceAddrs = cfg.SourceAddrs[:0]
		for f := range strings.SplitSeq(v, ",") {
			a, err := netip.ParseAddr(strings.TrimSpace(f))
			if err != nil {
				return err
			}
			cfg.SourceAddrs = append(cfg.SourceAddrs, a)
		}
		return nil
	})
	fs.IntVar(&cfg.RSSPid, "rss-pid", 0, "conn: `pid` of the broker (on this machine) whose VmRSS is read at the end of each hold, before the PINGREQ check (held_rss_kib)")
	fs.Float64Var(&cfg.MaxConnFailPct, "max-conn-fail", cfg.MaxConnFailPct, "conn: failures per level, in percent, above which the run fails")
	fs.IntVar(&cfg.Pubs, "pubs", cfg.Pubs, "publishers")
	fs.IntVar(&cfg.Subs, "subs", cfg.Subs, "subscribers (-1: pub mode 1 at QoS 0 and 0 otherwise, pubsub 1)")
	fs.UintVar(&qos, "qos", qos, "QoS of publishes and subscriptions: 0, 1 or 2")
	fs.IntVar(&cfg.Payload, "payload", cfg.Payload, "payload size in bytes (at least 16)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long publishers publish")
	fs.IntVar(&cfg.Rate, "rate", cfg.Rate, "messages/s per publisher (0: as fast as possible)")
	fs.IntVar(&cfg.Count, "count", cfg.Count, "messages per publisher (0: until -duration)")
	fs.IntVar(&cfg.Topics, "topics", cfg.Topics, "topics; publisher i and subscriber j use topic i (j) mod topics")
	fs.StringVar(&cfg.TopicPrefix, "topic-prefix", "", "topic prefix (default berth-load/<run id>)")
	fs.IntVar(&cfg.Inflight, "inflight", cfg.Inflight, "QoS 1/2 messages in flight per publisher (capped by the server's Receive Maximum)")
	fs.DurationVar(&cfg.ConnectTimeout, "connect-timeout", cfg.ConnectTimeout, "dial plus CONNACK timeout")
	fs.DurationVar(&cfg.Drain, "drain", cfg.Drain, "how long to wait for acks and deliveries after publishing stops")
	fs.StringVar(&cfg.ClientPrefix, "client-prefix", cfg.ClientPrefix, "client identifier prefix")
	fs.BoolVar(&asJSON, "json", false, "print the summary as JSON on stdout")
	fs.BoolVar(&quiet, "quiet", false, "no progress lines on stderr")
	if err = fs.Parse(args); err != nil {
		return cfg, false, false, err
	}
	// The environment fills unset credentials; it is read after parsing so
	// -h never prints a password as a default.
	cfg.User = cmp.Or(cfg.User, os.Getenv("BERTH_LOADTEST_USER"))
	cfg.Pass = cmp.Or(cfg.Pass, os.Getenv("BERTH_LOADTEST_PASS"))
	if fs.NArg() > 0 {
		return cfg, false, false, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	cfg.Mode = loadgen.Mode(mode)
	if qos > 2 {
		return cfg, false, false, fmt.Errorf("-qos %d: must be 0, 1 or 2", qos)
	}
	cfg.QoS = byte(qos)
	if cfg.Levels, err = parseInts(levels); err != nil {
		return cfg, false, false, fmt.Errorf("-levels: %w", err)
	}
	return cfg, asJSON, quiet, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
