package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// runner repl is make bench-repl's measuring half (docs/replication.md,
// "R3 against R1"): bench/repl.sh starts three replicating node processes
// behind a gateway and makes two tenants, one whose group has one voter
// (R1, the free plan) and one with three (R3, pro); this runs the same
// loadtest scenarios against both through the gateway in alternating
// rounds (each scenario R1 then R3, every round), sums the CPU time of the
// node processes around each run, and writes <date>-repl.md and .json:
//
//	runner repl -bin DIR -addr GATEWAY -pids P1,P2,P3 [-rounds 5] [-quick]
//
// Each tenant's credential comes by environment (never argv):
// BERTH_REPL_R1_USER/PASS and BERTH_REPL_R3_USER/PASS, empty for an
// anonymous broker.

// replTargets are the two tenants, in the order every scenario runs them.
var replTargets = []string{"r1", "r3"}

// replConfig is runner repl's flags; config carries what runScenario uses
// (bin, scenarioTimeout) and the output directory.
type replConfig struct {
	config
	addr     string
	pids     []int
	rounds   int
	dur      time.Duration
	idle     time.Duration // window for the nodes' idle CPU before round 1
	pubs     int
	inflight int
	rate     int
	fsync    string
	notes    map[string]string // per target: what it is (plan, voters, leader)
}

func parseRepl(args []string) (replConfig, error) {
	c := replConfig{notes: map[string]string{}}
	fs := flag.NewFlagSet("runner repl", flag.ContinueOnError)
	fs.StringVar(&c.bin, "bin", "", "directory with loadtest (and broker, whose version is recorded)")
	fs.StringVar(&c.out, "out", "bench/results", "directory for <date>-repl.md and <date>-repl.json")
	fs.StringVar(&c.addr, "addr", "", "MQTT `host:port` both tenants are reached at (the gateway)")
	pids := fs.String("pids", "", "comma-separated PIDs of the node processes whose CPU time is summed")
	fs.IntVar(&c.rounds, "rounds", 5, "rounds; each runs every scenario against R1, then R3")
	fs.DurationVar(&c.dur, "duration", 5*time.Second, "publishing time of each run")
	quick := fs.Bool("quick", false, "2 rounds of 1 s runs (a smoke test, not a measurement)")
	fs.IntVar(&c.pubs, "pubs", 10, "ingest: publishers")
	fs.IntVar(&c.inflight, "inflight", 100, "ingest: QoS 1 messages in flight per publisher")
	fs.IntVar(&c.rate, "rate", 1000, "latency: messages a second from its one publisher")
	fs.StringVar(&c.fsync, "fsync", "", "the nodes' -fsync policy, recorded in the results")
	for _, t := range replTargets {
		fs.Func(t+"-note", "what "+strings.ToUpper(t)+" is (plan, voters, leader), for the results", func(v string) error {
			c.notes[t] = v
			return nil
		})
	}
	fs.DurationVar(&c.scenarioTimeout, "scenario-timeout", 2*time.Minute, "kill a run that takes longer")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if *quick {
		c.rounds, c.dur = 2, time.Second
	}
	c.idle = min(2*time.Second, c.dur)
	switch {
	case c.bin == "":
		return c, errors.New("-bin is required")
	case c.addr == "":
		return c, errors.New("-addr is required")
	case c.rounds < 1 || c.rounds > 50:
		return c, fmt.Errorf("-rounds %d: want 1..50", c.rounds)
	case c.dur < 100*time.Millisecond || c.dur > 2*time.Minute:
		return c, fmt.Errorf("-duration %v: want 100ms..2m", c.dur)
	case c.pubs < 1 || c.pubs > 1000 || c.inflight < 1 || c.inflight > 65535:
		return c, fmt.Errorf("-pubs %d -inflight %d: want 1..1000 and 1..65535", c.pubs, c.inflight)
	case c.rate < 1 || c.rate > 100_000:
		return c, fmt.Errorf("-rate %d: want 1..100000", c.rate)
	}
	for f := range strings.SplitSeq(*pids, ",") {
		pid, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || pid < 1 {
			return c, fmt.Errorf("-pids: %q is not a process id", f)
		}
		c.pids = append(c.pids, pid)
	}
	return c, nil
}

// replScenarios are the two measurements: QoS 1 ingest as fast as the
// tenant takes it, and publish→delivery latency at a fixed rate.
func replScenarios(c replConfig) []scenario {
	d := c.dur.String()
	nodeCPU := func(r *run) (float64, bool) {
		if !ok(r) || r.Report.Acked == 0 || r.Crashed {
			return 0, false
		}
		return r.cpu() / float64(r.Report.Acked) * 1e6, true
	}
	return []scenario{
		{
			id:    "ingest-q1-64",
			title: fmt.Sprintf("QoS 1 ingest, 64 B, %d publishers × %d in flight", c.pubs, c.inflight),
			args: []string{"-mode", "pub", "-pubs", fmt.Sprint(c.pubs), "-qos", "1", "-payload", "64",
				"-inflight", fmt.Sprint(c.inflight), "-duration", d},
			metrics: []metric{
				{"accepted", true, "msg/s", accepted},
				{"node CPU per million", false, "s", nodeCPU},
				{"PUBACK p50", false, "µs", lat(p50, true)},
				{"PUBACK p99", false, "µs", lat(p99, true)},
			},
		},
		{
			id:    "latency-q1-1k",
			title: fmt.Sprintf("QoS 1 latency, 64 B, 1 publisher at %s msg/s, 1 subscriber (QoS 1)", thousands(c.rate)),
			args: []string{"-mode", "pubsub", "-pubs", "1", "-subs", "1", "-qos", "1", "-payload", "64",
				"-rate", fmt.Sprint(c.rate), "-duration", d},
			metrics: []metric{
				{"e2e p50", false, "µs", lat(p50, false)},
				{"e2e p99", false, "µs", lat(p99, false)},
				{"PUBACK p50", false, "µs", lat(p50, true)},
				{"PUBACK p99", false, "µs", lat(p99, true)},
			},
		},
	}
}

// replResults is everything one make bench-repl run produced.
type replResults struct {
	Started  string            `json:"started"`
	Finished string            `json:"finished"`
	Machine  machine           `json:"machine"`
	Addr     string            `json:"addr"`
	PIDs     []int             `json:"node_pids"`
	Fsync    string            `json:"fsync,omitempty"`
	Notes    map[string]string `json:"targets"`
	Rounds   int               `json:"rounds"`
	// IdleNodeCPU is the node processes' CPU seconds per second, together,
	// before the first round: the floor every run's node CPU includes.
	IdleNodeCPU float64    `json:"idle_node_cpu_per_sec"`
	Runs        []*replRun `json:"runs"`
	Summary     []replRow  `json:"summary"`
}

// replRun is one scenario against one target in one round. Run.Before
// and Run.After hold the node processes' CPU seconds summed (RSS is not
// kept).
type replRun struct {
	Round  int    `json:"round"`
	Target string `json:"target"`
	Run    *run   `json:"run"`
	// NodeCPU is each node process's CPU seconds during the run, in the
	// order of -pids.
	NodeCPU []float64 `json:"node_cpu_seconds"`
}

func runRepl(args []string) error {
	cfg, err := parseRepl(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	started := time.Now().UTC()
	res := &replResults{
		Started: started.Format(time.RFC3339), Machine: describeMachine(cfg.config), Addr: cfg.addr,
		PIDs: cfg.pids, Fsync: cfg.fsync, Notes: cfg.notes, Rounds: cfg.rounds,
	}
	// Only Berth runs here: the peers' versions describeMachine found are
	// not part of this run.
	res.Machine.Versions = map[string]string{"berth": res.Machine.Versions["berth"]}

	before, err := nodeCPU(cfg.pids)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(cfg.idle): // a measurement window, not a wait for a condition
	}
	after, err := nodeCPU(cfg.pids)
	if err != nil {
		return err
	}
	res.IdleNodeCPU = (sum(after) - sum(before)) / cfg.idle.Seconds()
	fmt.Fprintf(os.Stderr, "repl: node CPU while idle %.3f s/s over %v\n", res.IdleNodeCPU, cfg.idle)

	scs := replScenarios(cfg)
	total := cfg.rounds * len(scs) * len(replTargets)
	for round := 1; round <= cfg.rounds; round++ {
		for _, s := range scs {
			for _, target := range replTargets {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				rr := replRunOnce(ctx, cfg, s, target)
				rr.Round = round
				res.Runs = append(res.Runs, rr)
				fmt.Fprintf(os.Stderr, "[%2d/%d] round %d %-14s %s %s\n", len(res.Runs), total, round, s.id,
					strings.ToUpper(target), summary(s, rr.Run))
			}
		}
	}
	res.Machine.LoadEnd = loadavg()
	res.Finished = time.Now().UTC().Format(time.RFC3339)
	res.Summary = summarize(res, scs)
	return writeRepl(cfg.out, started, res, scs)
}

// replRunOnce runs s against target, with the node processes' CPU read
// just before and just after the load tool.
func replRunOnce(ctx context.Context, cfg replConfig, s scenario, target string) *replRun {
	up := strings.ToUpper(target)
	env := []string{"BERTH_LOADTEST_USER=" + os.Getenv("BERTH_REPL_"+up+"_USER"),
		"BERTH_LOADTEST_PASS=" + os.Getenv("BERTH_REPL_"+up+"_PASS")}
	rr := &replRun{Target: target}
	before, berr := nodeCPU(cfg.pids)
	r := runScenario(ctx, cfg.config, s, nil, cfg.addr, env)
	after, aerr := nodeCPU(cfg.pids)
	r.Broker = target
	rr.Run = r
	if err := errors.Join(berr, aerr); err != nil {
		r.Crashed = true // a node process is gone: a finding, noted
		r.Error = strings.TrimSpace(r.Error + " " + err.Error())
		return rr
	}
	r.Before, r.After = usage{CPUSeconds: sum(before)}, usage{CPUSeconds: sum(after)}
	for i := range before {
		rr.NodeCPU = append(rr.NodeCPU, after[i]-before[i])
	}
	return rr
}

// nodeCPU reads each process's CPU seconds.
func nodeCPU(pids []int) ([]float64, error) {
	out := make([]float64, len(pids))
	for i, pid := range pids {
		u, err := readUsage(pid)
		if err != nil {
			return nil, fmt.Errorf("node process %d: %w", pid, err)
		}
		out[i] = u.CPUSeconds
	}
	return out, nil
}

func sum(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s
}

// writeRepl writes <date>-repl.md and <date>-repl.json into dir.
func writeRepl(dir string, started time.Time, res *replResults, scs []scenario) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	stem := filepath.Join(dir, started.Format("2006-01-02-1504")+"-repl")
	var md strings.Builder
	writeReplTable(&md, res, scs)
	if err := os.WriteFile(stem+".md", []byte(md.String()), 0o644); err != nil {
		return err
	}
	if err := writeJSON(stem+".json", res); err != nil {
		return err
	}
	fmt.Print(md.String())
	fmt.Fprintf(os.Stderr, "wrote %s.md and %s.json\n", stem, stem)
	return nil
}
