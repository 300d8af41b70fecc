package e2e

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"berth.dev/e2e/internal/stack"
)

// The connect flood: floodRate attempts per second for floodFor, spread
// over floodSources addresses, each a TCP connect and an MQTT 5 CONNECT
// whose password is a JWT the gateway would have to verify. It runs as a
// process (cmd/connflood) in a network namespace and a CPU budget of its
// own (fault_floodns_test.go), so that what it costs the measured clients
// is the gateway's and the kernel's work, not the flooder's. The
// gateway's defaults (20 connects/s and a burst of 40 per IP, 2,000/s and
// a burst of 4,000 in all) refuse nearly all of them before reading a
// byte: with its kernel SYN filter (-syn-filter, the default) a source's
// SYNs over the per-IP rate are dropped before a SYN-ACK; without it
// (BERTH_FLOOD_SYN_FILTER=off, to compare) they are accepted and reset.
const (
	floodRate    = 10_000
	floodFor     = 3 * time.Second
	floodSources = 20
	// A dropped SYN holds its worker for floodDialTimeout: at 10,000/s
	// and 200 ms, some 2,000 wait at once.
	floodWorkers     = 4096
	floodDialTimeout = 200 * time.Millisecond
	// The gateway's default per-IP limit, for the bound on what may reach
	// authentication.
	floodPerIPRate, floodPerIPBurst = 20, 40
)

// TestFaultConnectFlood measures established clients' QoS 1 round trip
// without and during a connect flood against the gateway (and the
// gateway's CPU time in both phases), and checks that the flood is
// refused before TLS/JWT work (dropped in the kernel by the SYN filter, or
// with BERTH_FLOOD_SYN_FILTER=off reset at accept; the CONNECT refusals
// grow only by the few the per-IP limits let through) and that the
// established clients lose nothing (each message arrives exactly once, in
// order; latency reported, not asserted).
func TestFaultConnectFlood(t *testing.T) {
	filter := os.Getenv("BERTH_FLOOD_SYN_FILTER") != "off"
	fnet := newFloodNet(t)
	cg := newCPUCgroup(t, floodCPU)
	// The stack raises the per-IP limits for tests that all connect from
	// 127.0.0.1; this one runs the gateway's defaults.
	s := stack.New(t, bins, stack.Options{GatewayIP: fnet.hostIP, GatewayArgs: [][]string{{
		"-per-ip-rate", fmt.Sprint(floodPerIPRate), "-per-ip-burst", fmt.Sprint(floodPerIPBurst),
		"-syn-filter=" + strconv.FormatBool(filter)}}})
	g := s.Gateways[0]
	a := s.Signup(t)
	c := s.CreateCredential(t, a, []string{"#"}, []string{"#"}, nil)
	probe := newLatencyProbe(t, g.MQTT, c, 3)
	const every = 60 * time.Millisecond // 3 × 16.7/s = 50/s, under the free plan's message rate

	cpu0 := processCPU(g.Pid())
	alone := probe.run(t, "alone", floodFor, every)
	cpuAlone := processCPU(g.Pid()) - cpu0

	limited0 := gatewayCounter(t, g, "berth_gateway_rate_limited_total", "")
	authRefused0 := gatewayCounter(t, g, "berth_gateway_refusals_total", "")
	synDropped0 := gatewayCounter(t, g, "berth_gateway_syn_dropped_total", "")
	cpu0 = processCPU(g.Pid())
	wait := startFlood(t, bins.ConnFlood, fnet, cg, g.MQTT)
	under := probe.run(t, "flood", floodFor, every)
	fc := wait()
	cpuFlood := processCPU(g.Pid()) - cpu0
	limited := gatewayCounter(t, g, "berth_gateway_rate_limited_total", "") - limited0
	authRefused := gatewayCounter(t, g, "berth_gateway_refusals_total", "") - authRefused0
	synDropped := gatewayCounter(t, g, "berth_gateway_syn_dropped_total", "") - synDropped0

	attempts, refused, connacked, dialErr, dropped, took := fc.attempts, fc.refused, fc.connacked, fc.dialErr, fc.dropped, fc.took
	t.Logf("FAULT connect flood (SYN filter %v): %d attempts in %v (%.0f/s) from %d sources in namespace %s (flooder's own process, CPU budget %.1f cores, used %v): %d unanswered (SYN dropped), %d refused at accept, %d reached authentication, %d connects failed; gateway counted %d SYNs dropped in the kernel, %d rate-limited at accept, %d CONNECT refusals",
		filter, attempts, took.Round(time.Millisecond), float64(attempts)/took.Seconds(), floodSources, fnet.ns, floodCPU, fc.cpu, dropped, refused, connacked, dialErr, synDropped, limited, authRefused)
	t.Logf("FAULT connect flood: gateway CPU %v alone, %v during the flood (%.0f µs per attempt over the quiet rate)",
		cpuAlone, cpuFlood, float64((cpuFlood-cpuAlone).Microseconds())/float64(max(attempts, 1)))
	t.Logf("FAULT connect flood: established clients' QoS 1 round trip p50 %v → %v, p99 %v → %v (ratio %.2f; the issue's bar is 2, reported, not asserted), samples %d, %d, 0 lost",
		alone.p50, under.p50, alone.p99, under.p99, float64(under.p99)/float64(max(alone.p99, 1)), alone.n, under.n)

	// The flooder's cgroup gets at most one core, and less on a machine
	// busy with other work: it must flood, not necessarily at floodRate.
	if attempts < floodRate*int64(floodFor/time.Second)/8 {
		t.Fatalf("the flood made only %d attempts", attempts)
	}
	// What may pass the per-IP limits: each source's burst plus its rate
	// over the flood (and the probe's phase after it). All the rest must
	// be refused before a byte is read, whatever rate the flooder reached.
	bound := int64(floodSources * (floodPerIPBurst + floodPerIPRate*int(took.Seconds()+2)))
	if dropped+refused < attempts-dialErr-bound {
		t.Errorf("only %d of %d attempts dropped or refused at accept (at most %d may pass the per-IP limits)", dropped+refused, attempts-dialErr, bound)
	}
	if filter {
		// The kernel refused the flood: the filter dropped every SYN over
		// the per-IP limits, so accept saw no more than they allow.
		if synDropped < attempts-dialErr-bound {
			t.Errorf("the SYN filter dropped %d of %d attempts, want all but the %d the per-IP limits allow (is it attached?)", synDropped, attempts-dialErr, bound)
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
	if under.n == 0 || alone.n == 0 {
		t.Fatalf("no latency samples: alone %d, flood %d", alone.n, under.n)
	}
}
