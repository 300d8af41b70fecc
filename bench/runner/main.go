// Command runner is make bench's orchestrator: it runs the same loadtest
// scenarios against Berth's standalone broker, mosquitto, mochi-mqtt and NATS on
// loopback, one fresh broker process per scenario, reads each broker's CPU
// time and peak RSS from /proc, and writes one Markdown table with Berth's
// ratio over each peer plus the raw JSON beside it. bench/run.sh builds the
// binaries and calls it:
//
//	runner -bin DIR -out bench/results [-brokers berth,mosquitto,mochi] [-quick]
//
// DIR holds loadtest, broker (Berth) and mochi. -gateway HOST:PORT adds a
// column measured through a running gateway (full stack). `runner repl`
// is make bench-repl's R3-against-R1 rounds (repl.go).
package main

import (
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if err := runMain(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type config struct {
	bin, out        string
	brokers         []string
	quick           bool
	only            *regexp.Regexp
	gateway         string
	gwUser, gwPass  string
	berthFsync      string // non-empty: Berth runs with -data and -fsync berthFsync
	scenarioTimeout time.Duration
	conns           []int // held-connection scenarios; nil: the scale's
}

func parse(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("runner", flag.ContinueOnError)
	fs.StringVar(&c.bin, "bin", "", "directory with the loadtest, broker and mochi binaries")
	fs.StringVar(&c.out, "out", "bench/results", "directory for <date>.md and <date>.json")
	brokers := fs.String("brokers", "berth,mosquitto,mochi,nats", "brokers to run, comma-separated; ratios are the first over the others")
	fs.BoolVar(&c.quick, "quick", false, "1 s scenarios and 300 connections (a smoke test, not a measurement)")
	only := fs.String("only", "", "run only scenarios whose id matches this regular expression")
	fs.StringVar(&c.gateway, "gateway", "", "also run every scenario through a running gateway at HOST:PORT")
	fs.StringVar(&c.gwUser, "gateway-user", "", "MQTT user name for -gateway")
	fs.StringVar(&c.gwPass, "gateway-pass", "", "MQTT password for -gateway")
	fs.StringVar(&c.berthFsync, "berth-fsync", "", "run Berth with -data (a fresh directory per scenario) and this -fsync policy "+
		"(always, interval, never), as a node logs QoS 1/2; empty: in memory")
	fs.DurationVar(&c.scenarioTimeout, "scenario-timeout", 3*time.Minute, "kill a scenario that runs longer")
	fs.Func("conns", "held-connection scenarios to run, comma-separated counts (default 10000; -quick 300)", func(v string) error {
		c.conns = c.conns[:0]
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > 1_000_000 {
				return fmt.Errorf("%q: want counts 1..1000000", f)
			}
			c.conns = append(c.conns, n)
		}
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.bin == "" {
		return c, errors.New("-bin is required")
	}
	switch c.berthFsync {
	case "", "always", "interval", "never":
	default:
		return c, fmt.Errorf("-berth-fsync: %q (want always, interval or never)", c.berthFsync)
	}
	for b := range strings.SplitSeq(*brokers, ",") {
		b = strings.TrimSpace(b)
		if _, ok := kinds[b]; !ok {
			return c, fmt.Errorf("-brokers: unknown broker %q (want berth, mosquitto, mochi, nats)", b)
		}
		c.brokers = append(c.brokers, b)
	}
	if len(c.brokers) == 0 {
		return c, errors.New("-brokers: none given")
	}
	var err error
	if c.only, err = regexp.Compile(*only); err != nil {
		return c, fmt.Errorf("-only: %w", err)
	}
	return c, nil
}

func runMain(args []string) error {
	if len(args) > 0 && args[0] == "repl" {
		return runRepl(args[1:])
	}
	cfg, err := parse(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	sc := fullScale()
	if cfg.quick {
		sc = quickScale()
	}
	if cfg.conns != nil {
		sc.conns = cfg.conns
	}
	var scs []scenario
	for _, s := range scenarios(sc) {
		if cfg.only.MatchString(s.id) {
			scs = append(scs, s)
		}
	}
	started := time.Now().UTC()
	res := &results{
		Started: started.Format(time.RFC3339),
		Brokers: append([]string(nil), cfg.brokers...),
		Machine: describeMachine(cfg),
	}
	if cfg.gateway != "" {
		res.Brokers = append(res.Brokers, "gateway")
		res.Gateway = cfg.gateway
	}
	res.BerthFsync = cfg.berthFsync
	tmp, err := os.MkdirTemp("", "berth-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	total := len(scs) * len(res.Brokers)
	n := 0
	for _, s := range scs {
		for _, b := range res.Brokers {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			n++
			var r *run
			if b == "gateway" {
				// Credentials go by environment, not argv (visible in ps). A
				// gateway off loopback is refused by loadtest, as any target is.
				r = runScenario(ctx, cfg, s, nil, cfg.gateway,
					[]string{"BERTH_LOADTEST_USER=" + cfg.gwUser, "BERTH_LOADTEST_PASS=" + cfg.gwPass})
			} else {
				r = runAgainst(ctx, cfg, s, withFsync(kinds[b], cfg.berthFsync), tmp)
			}
			r.Broker = b
			res.Runs = append(res.Runs, r)
			fmt.Fprintf(os.Stderr, "[%2d/%d] %-14s %-10s %s\n", n, total, s.id, b, summary(s, r))
		}
	}
	res.Machine.LoadEnd = loadavg()
	res.Finished = time.Now().UTC().Format(time.RFC3339)
	return write(cfg.out, started, res, scs)
}

// runAgainst starts a fresh broker, runs one scenario and stops it.
func runAgainst(ctx context.Context, cfg config, s scenario, kind brokerKind, tmp string) *run {
	dir, err := os.MkdirTemp(tmp, kind.name+"-")
	if err != nil {
		return &run{Scenario: s.id, Error: err.Error()}
	}
	p, err := startBroker(kind, cfg.bin, dir)
	if err != nil {
		return &run{Scenario: s.id, Error: err.Error()}
	}
	r := runScenario(ctx, cfg, s, p, p.addr, nil)
	if !p.stop() {
		r.Crashed = true
	}
	return r
}

// runScenario runs loadtest once with env added to its environment; p
// (nil for an external target) is measured before and after.
func runScenario(ctx context.Context, cfg config, s scenario, p *process, addr string, env []string) *run {
	args := append([]string{"-addr", addr, "-json", "-quiet"}, s.args...)
	if s.rssPid && p != nil {
		args = append(args, "-rss-pid", strconv.Itoa(p.cmd.Process.Pid))
	}
	r := &run{Scenario: s.id, Args: redact(args)}
	if p != nil {
		r.Before, _ = readUsage(p.cmd.Process.Pid)
	}
	rctx, cancel := context.WithTimeout(ctx, cfg.scenarioTimeout)
	defer cancel()
	cmd := exec.CommandContext(rctx, filepath.Join(cfg.bin, "loadtest"), args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	r.Seconds = time.Since(start).Seconds()
	if ps := cmd.ProcessState; ps != nil {
		r.LoadtestCPU = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	if p != nil {
		if u, uerr := readUsage(p.cmd.Process.Pid); uerr == nil {
			r.After = u
		} else {
			r.Crashed = true
		}
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.ExitCode() == 1:
		r.Exit = 1 // completed, failed its checks: the report says why
	default:
		r.Exit = -1
		if ee != nil {
			r.Exit = ee.ExitCode()
		}
		r.Error = fmt.Sprintf("loadtest: %v: %s", err, strings.TrimSpace(lastLine(stderr.String())))
		return r
	}
	var rep loadReport
	if err := json.Unmarshal(out, &rep); err != nil {
		r.Error = fmt.Sprintf("loadtest output is not JSON: %v", err)
		return r
	}
	r.Report = &rep
	return r
}

// redact hides the value of -pass so results never hold a credential.
func redact(args []string) []string {
	out := append([]string(nil), args...)
	for i := 0; i+1 < len(out); i++ {
		if out[i] == "-pass" && out[i+1] != "" {
			out[i+1] = "REDACTED"
		}
	}
	return out
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// summary is the progress line for one run.
func summary(s scenario, r *run) string {
	if r.Error != "" && r.Report == nil {
		return "ERROR " + r.Error
	}
	var parts []string
	for _, m := range s.metrics {
		if v, ok := m.get(r); ok {
			parts = append(parts, fmt.Sprintf("%s %s %s", m.name, formatValue(v, m.unit), m.unit))
		}
	}
	if r.Exit != 0 {
		parts = append(parts, "FAILED CHECKS")
	}
	return fmt.Sprintf("%s (%.1fs; cpu: broker %.1fs, loadtest %.1fs)", strings.Join(parts, ", "), r.Seconds, r.cpu(), r.LoadtestCPU)
}

func write(dir string, started time.Time, res *results, scs []scenario) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	stem := filepath.Join(dir, started.Format("2006-01-02-1504"))
	var md strings.Builder
	writeTable(&md, res, scs)
	if err := os.WriteFile(stem+".md", []byte(md.String()), 0o644); err != nil {
		return err
	}
	js, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(stem+".json", append(js, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Print(md.String())
	fmt.Fprintf(os.Stderr, "wrote %s.md and %s.json\n", stem, stem)
	return nil
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func describeMachine(cfg config) machine {
	m := machine{CPUs: runtime.NumCPU(), LoadStart: loadavg(), Versions: map[string]string{}}
	if out, err := exec.Command("go", "version").Output(); err == nil {
		m.Go = strings.TrimSpace(string(out))
	} else {
		m.Go = runtime.Version()
	}
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil {
		m.OpenFilesMax = rl.Cur
	}
	if bi, err := buildinfo.ReadFile(filepath.Join(cfg.bin, "mochi")); err == nil {
		for _, d := range bi.Deps {
			if d.Path == "github.com/mochi-mqtt/server/v2" {
				m.Versions["mochi"] = d.Version
			}
		}
	}
	if bi, err := buildinfo.ReadFile(filepath.Join(cfg.bin, "broker")); err == nil {
		v := "devel"
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v = s.Value[:12]
			}
		}
		m.Versions["berth"] = v
	}
	// nats-server --version prints "nats-server: v2.9.10".
	if out, err := exec.Command(natsBin(), "--version").Output(); err == nil {
		if _, v, ok := strings.Cut(strings.TrimSpace(string(out)), ": "); ok {
			m.Versions["nats"] = v
		}
	}
	// mosquitto -h prints its version on the first line and exits 3.
	out, _ := exec.Command(mosquittoBin(), "-h").CombinedOutput()
	if line, _, _ := strings.Cut(string(out), "\n"); strings.HasPrefix(line, "mosquitto version ") {
		m.Versions["mosquitto"] = strings.TrimPrefix(line, "mosquitto version ")
	}
	return m
}
