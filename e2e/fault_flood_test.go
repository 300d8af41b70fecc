package e2e

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"berth.dev/e2e/internal/stack"
)

// The connect flood: floodRate attempts per second for a phase's length,
// spread over floodSources addresses, each a TCP connect and an MQTT 5
// CONNECT whose password is a JWT the gateway would have to verify. It
// runs as a process (cmd/connflood) in a network namespace and a CPU
// budget of its own (fault_floodns_test.go), so that what it costs the
// measured clients is the gateway's and the kernel's work, not the
// flooder's. The gateway's defaults (20 connects/s and a burst of 40 per
// IP, 2,000/s and a burst of 4,000 in all) refuse nearly all of them
// before reading a byte: with its kernel SYN filter (-syn-filter, the
// default) a source's SYNs over the per-IP rate are dropped before a
// SYN-ACK; without it (BERTH_FLOOD_SYN_FILTER=off, to compare) they are
// accepted and reset.
const (
	floodRate    = 10_000
	floodSources = 20
	// A dropped SYN holds its worker for floodDialTimeout: at 10,000/s
	// and 200 ms, some 2,000 wait at once.
	floodWorkers     = 4096
	floodDialTimeout = 200 * time.Millisecond
	// The gateway's default per-IP limit, for the bound on what may reach
	// authentication.
	floodPerIPRate, floodPerIPBurst = 20, 40
	// The probe: floodProbePubs publishers, one QoS 1 message each every
	// floodProbeEvery (400/s, on the pro plan's rates), so that a phase
	// of 3 s has some 1,200 samples and its p99 is not one stall.
	floodProbePubs  = 4
	floodProbeEvery = 10 * time.Millisecond
)

// floodPlan is the measurement's length, from the environment: make test
// runs one round of 3 s phases; make fault-flood more rounds, longer.
type floodPlan struct {
	rounds int           // BERTH_FLOOD_ROUNDS, default 1: alone, flood, alone, flood…
	phase  time.Duration // BERTH_FLOOD_FOR, default 3s: each phase's length
	// A second gateway to compare, measured in every round too, in
	// alternating order: compareBin (BERTH_FLOOD_COMPARE_GATEWAY) is
	// another build of it (say HEAD's, to compare with the work tree's),
	// compareArgs (BERTH_FLOOD_COMPARE_ARGS, space-separated) flags added
	// to its own (limits at most as loose as the defaults: the checks
	// assume the defaults). Either set: the second gateway runs.
	compareBin  string
	compareArgs []string
	filter      bool // BERTH_FLOOD_SYN_FILTER != off
}

func floodPlanFromEnv(t *testing.T) floodPlan {
	t.Helper()
	p := floodPlan{rounds: 1, phase: 3 * time.Second, compareBin: os.Getenv("BERTH_FLOOD_COMPARE_GATEWAY"),
		compareArgs: strings.Fields(os.Getenv("BERTH_FLOOD_COMPARE_ARGS")), filter: os.Getenv("BERTH_FLOOD_SYN_FILTER") != "off"}
	if v := os.Getenv("BERTH_FLOOD_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			t.Fatalf("BERTH_FLOOD_ROUNDS=%q: want 1..100", v)
		}
		p.rounds = n
	}
	if v := os.Getenv("BERTH_FLOOD_FOR"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second || d > time.Minute {
			t.Fatalf("BERTH_FLOOD_FOR=%q: want 1s..1m", v)
		}
		p.phase = d
	}
	return p
}

// floodTarget is one gateway build under the flood, with its own probe.
type floodTarget struct {
	name  string // "this" (the work tree's build, default flags) or "compare"
	g     *stack.Gateway
	probe *latencyProbe
	alone []time.Duration // every round's samples, for the pooled figures
	under []time.Duration
	ratio []float64 // per round: p99 under the flood / p99 alone
}

// TestFaultConnectFlood measures established clients' QoS 1 round trip
// without and during a connect flood against the gateway, in rounds of
// alone, flood (one in make test; make fault-flood runs more, and with
// BERTH_FLOOD_COMPARE_GATEWAY alternates another gateway build with this
// one), with where the CPU went in each phase; and checks that the flood
// is refused before TLS/JWT work (dropped in the kernel by the SYN
// filter, or with BERTH_FLOOD_SYN_FILTER=off reset at accept; the CONNECT
// refusals grow only by the few the per-IP limits let through) and that
// the established clients lose nothing (each message arrives exactly
// once, in order; latency reported, not asserted).
func TestFaultConnectFlood(t *testing.T) {
	plan := floodPlanFromEnv(t)
	compare := plan.compareBin != "" || len(plan.compareArgs) > 0
	floods := plan.rounds
	if compare {
		floods *= 2
	}
	fnet := newFloodNet(t, floods)
	cg := newCPUCgroup(t, floodCPU)
	bpfStats := enableBPFStats(t)
	// The stack raises the per-IP limits for tests that all connect from
	// 127.0.0.1; this one runs the gateway's defaults.
	gwArgs := []string{"-per-ip-rate", fmt.Sprint(floodPerIPRate), "-per-ip-burst", fmt.Sprint(floodPerIPBurst),
		"-syn-filter=" + strconv.FormatBool(plan.filter)}
	opts := stack.Options{GatewayIP: fnet.hostIP, OpenPlans: "free,pro", GatewayArgs: [][]string{gwArgs}}
	if compare {
		opts.Gateways, opts.GatewayBins = 2, []string{"", plan.compareBin}
		opts.GatewayArgs = append(opts.GatewayArgs, append(slices.Clone(gwArgs), plan.compareArgs...))
	}
	s := stack.New(t, bins, opts)
	targets := []*floodTarget{{name: "this", g: s.Gateways[0]}}
	if compare {
		targets = append(targets, &floodTarget{name: "compare", g: s.Gateways[1]})
	}
	for _, tg := range targets {
		// A tenant per probe: the probes' client ids are the same.
		a := s.Signup(t)
		roomForLoad(t, s, a) // the probe's 400 messages a second
		c := s.CreateCredential(t, a, []string{"#"}, []string{"#"}, nil)
		tg.probe = newLatencyProbe(t, tg.g.MQTT, c, floodProbePubs)
	}
	t.Logf("FAULT connect flood: %d round(s) of %v alone and %v under %d attempts/s, %d gateway(s) (compare: build %q, flags %q), SYN filter %v, BPF stats %v",
		plan.rounds, plan.phase, plan.phase, floodRate, len(targets), plan.compareBin, plan.compareArgs, plan.filter, bpfStats)

	flood := 0
	for r := range plan.rounds {
		order := slices.Clone(targets)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, tg := range order {
			// Each flood from sources of its own, as long as there are
			// sets left: a source in its cool-down would refuse a later
			// flood outright.
			floodRound(t, plan, s, fnet, cg, tg, r+1, fnet.sources[flood%len(fnet.sources)])
			flood++
		}
	}
	for _, tg := range targets {
		slices.Sort(tg.alone)
		slices.Sort(tg.under)
		a50, a99, u50, u99 := percentile(tg.alone, 0.5), percentile(tg.alone, 0.99), percentile(tg.under, 0.5), percentile(tg.under, 0.99)
		var ratios []string
		for _, x := range tg.ratio {
			ratios = append(ratios, fmt.Sprintf("%.2f", x))
		}
		t.Logf("FAULT connect flood, %s gateway, pooled over %d round(s): p50 %v → %v, p99 %v → %v (ratio %.2f; the issue's bar is 2, reported, not asserted), samples %d, %d; p99 ratio per round [%s]",
			tg.name, plan.rounds, a50, u50, a99, u99, float64(u99)/float64(max(a99, 1)), len(tg.alone), len(tg.under), strings.Join(ratios, " "))
	}
}

// floodRound is one round against tg: the probe alone for plan.phase,
// then under a flood of plan.phase, with the checks on what the flood
// reached.
func floodRound(t *testing.T, plan floodPlan, s *stack.Stack, fnet *floodNet, cg *cpuCgroup, tg *floodTarget, round int, sources []string) {
	t.Helper()
	g := tg.g
	procs := map[string]int{"gateway": g.Pid(), "node": s.Node.Pid(), "probe": os.Getpid()}
	s0 := snapSys(procs, g.Pid())
	alone := tg.probe.run(t, fmt.Sprintf("r%d-%s-alone", round, tg.name), plan.phase, floodProbeEvery)
	s1 := snapSys(procs, g.Pid())

	limited0 := gatewayCounter(t, g, "berth_gateway_rate_limited_total", "")
	authRefused0 := gatewayCounter(t, g, "berth_gateway_refusals_total", "")
	synDropped0 := gatewayCounter(t, g, "berth_gateway_syn_dropped_total", "")
	cooled0 := gatewayCounter(t, g, "berth_gateway_flood_cooldowns_total", "")
	hsWaits0 := gatewayCounter(t, g, "berth_gateway_handshake_waits_total", "")
	busy0 := gatewayCounter(t, g, "berth_gateway_refusals_total", `reason="server_busy"`)
	listenDrops0 := listenDrops()
	s2 := snapSys(procs, g.Pid())
	floodStart := time.Now()
	wait := startFlood(t, bins.ConnFlood, fnet, cg, g.MQTT, sources, plan.phase)
	under := tg.probe.run(t, fmt.Sprintf("r%d-%s-flood", round, tg.name), plan.phase, floodProbeEvery)
	s3 := snapSys(procs, g.Pid())
	fc := wait()
	limited := gatewayCounter(t, g, "berth_gateway_rate_limited_total", "") - limited0
	authRefused := gatewayCounter(t, g, "berth_gateway_refusals_total", "") - authRefused0
	synDropped := gatewayCounter(t, g, "berth_gateway_syn_dropped_total", "") - synDropped0
	cooled := gatewayCounter(t, g, "berth_gateway_flood_cooldowns_total", "") - cooled0
	hsWaits := gatewayCounter(t, g, "berth_gateway_handshake_waits_total", "") - hsWaits0
	busy := gatewayCounter(t, g, "berth_gateway_refusals_total", `reason="server_busy"`) - busy0
	listenDropped := listenDrops() - listenDrops0

	tg.alone = append(tg.alone, alone.lat...)
	tg.under = append(tg.under, under.lat...)
	ratio := float64(under.p99) / float64(max(alone.p99, 1))
	tg.ratio = append(tg.ratio, ratio)
	attempts, refused, connacked, dialErr, dropped, took := fc.attempts, fc.refused, fc.connacked, fc.dialErr, fc.dropped, fc.took
	t.Logf("round %d, %s gateway, alone: %s", round, tg.name, sysDelta(s0, s1))
	t.Logf("round %d, %s gateway, flood: %s", round, tg.name, sysDelta(s2, s3))
	t.Logf("round %d, %s gateway, flood: %d attempts in %v (%.0f/s) from %d sources (flooder CPU %v of a %.1f-core budget): %d unanswered (SYN dropped), %d refused at accept, %d reached authentication, %d connects failed; gateway counted %d SYNs dropped in the kernel, %d rate-limited at accept, %d CONNECT refusals, %d sources put in cool-down; the kernel's listen drops (accept queue full) %d",
		round, tg.name, attempts, took.Round(time.Millisecond), float64(attempts)/took.Seconds(), floodSources, fc.cpu.Round(time.Millisecond), floodCPU, dropped, refused, connacked, dialErr, synDropped, limited, authRefused, cooled, listenDropped)
	t.Logf("round %d, %s gateway, flood: %s", round, tg.name, slowWhen(under, floodStart, alone.p99))
	t.Logf("round %d, %s gateway, flood: %d CONNECTs waited for a handshake slot (-max-handshakes), %d refused busy", round, tg.name, hsWaits, busy)
	t.Logf("round %d, %s gateway: QoS 1 round trip p50 %v → %v, p99 %v → %v (ratio %.2f), samples %d, %d, 0 lost",
		round, tg.name, alone.p50, under.p50, alone.p99, under.p99, ratio, alone.n, under.n)

	// The flooder's cgroup gets at most one core, and less on a machine
	// busy with other work: it must flood, not necessarily at floodRate.
	if attempts < int64(float64(floodRate)*plan.phase.Seconds())/8 {
		t.Fatalf("the flood made only %d attempts", attempts)
	}
	// What may pass the per-IP limits: each source's burst plus its rate
	// over the flood (and the probe's phase after it). All the rest must
	// be refused before a byte is read, whatever rate the flooder reached.
	bound := int64(floodSources * (floodPerIPBurst + floodPerIPRate*int(took.Seconds()+2)))
	if dropped+refused < attempts-dialErr-bound {
		t.Errorf("only %d of %d attempts dropped or refused at accept (at most %d may pass the per-IP limits)", dropped+refused, attempts-dialErr, bound)
	}
	if plan.filter {
		// The kernel refused the flood: the filter dropped every SYN over
		// the per-IP limits, so accept saw no more than they allow. On a
		// machine short of CPU the gateway accepts late and the kernel
		// drops some handshakes itself (its accept queue full): those too
		// cost the gateway nothing.
		if synDropped+listenDropped < attempts-dialErr-bound {
			t.Errorf("the SYN filter dropped %d of %d attempts (and the listen queue %d), want all but the %d the per-IP limits allow (is it attached?)", synDropped, attempts-dialErr, listenDropped, bound)
		}
		if limited > bound {
			t.Errorf("%d connections were accepted and then refused by the userspace limits, over the %d the SYN filter lets through", limited, bound)
		}
	} else {
		if limited < refused {
			t.Errorf("the gateway counted %d rate-limited connections, the flood saw %d refused at accept", limited, refused)
		}
		if synDropped != 0 {
			t.Errorf("with -syn-filter=false the gateway counted %d SYNs dropped in the kernel", synDropped)
		}
	}
	if authRefused > bound || connacked > bound {
		t.Errorf("%d CONNECTs reached authentication (gateway: %d refused), over the per-IP limits' %d", connacked, authRefused, bound)
	}
	// This build's -flood-cooldown (default 30 s) refuses each source
	// once its refused CONNECTs outrun a quarter of its rate and burst.
	if tg.name == "this" && cooled < floodSources {
		t.Errorf("%d sources put in cool-down, want all %d: every CONNECT of theirs fails", cooled, floodSources)
	}
	if under.n == 0 || alone.n == 0 {
		t.Fatalf("no latency samples: alone %d, flood %d", alone.n, under.n)
	}
}
