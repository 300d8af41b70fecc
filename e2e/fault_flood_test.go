package e2e

import (
	"fmt"
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
// a burst of 4,000 in all) refuse nearly all of them at accept, before
// reading a byte.
const (
	floodRate    = 10_000
	floodFor     = 3 * time.Second
	floodSources = 20
	floodWorkers = 256
	// The gateway's default per-IP limit, for the bound on what may reach
	// authentication.
	floodPerIPRate, floodPerIPBurst = 20, 40
)

// TestFaultConnectFlood measures established clients' QoS 1 round trip
// without and during a connect flood against the gateway (and the
// gateway's CPU time in both phases), and checks that the flood is
// refused before TLS/JWT work (the rate-limit counter grows by
// the refused attempts, the CONNECT refusals only by the few the per-IP
// limits let through) and that the established clients lose nothing (each
// message arrives exactly once, in order; latency reported, not asserted).
func TestFaultConnectFlood(t *testing.T) {
	fnet := newFloodNet(t)
	cg := newCPUCgroup(t, floodCPU)
	// The stack raises the per-IP limits for tests that all connect from
	// 127.0.0.1; this one runs the gateway's defaults.
	s := stack.New(t, bins, stack.Options{GatewayIP: fnet.hostIP, GatewayArgs: [][]string{{
		"-per-ip-rate", fmt.Sprint(floodPerIPRate), "-per-ip-burst", fmt.Sprint(floodPerIPBurst)}}})
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
	cpu0 = processCPU(g.Pid())
	wait := startFlood(t, bins.ConnFlood, fnet, cg, g.MQTT)
	under := probe.run(t, "flood", floodFor, every)
	fc := wait()
	cpuFlood := processCPU(g.Pid()) - cpu0
	limited := gatewayCounter(t, g, "berth_gateway_rate_limited_total", "") - limited0
	authRefused := gatewayCounter(t, g, "berth_gateway_refusals_total", "") - authRefused0

	attempts, refused, connacked, dialErr, took := fc.attempts, fc.refused, fc.connacked, fc.dialErr, fc.took
	t.Logf("FAULT connect flood: %d attempts in %v (%.0f/s) from %d sources in namespace %s (flooder's own process, CPU budget %.1f cores, used %v): %d refused at accept, %d reached authentication, %d connects failed; gateway counted %d rate-limited, %d CONNECT refusals",
		attempts, took.Round(time.Millisecond), float64(attempts)/took.Seconds(), floodSources, fnet.ns, floodCPU, fc.cpu, refused, connacked, dialErr, limited, authRefused)
	t.Logf("FAULT connect flood: gateway CPU %v alone, %v during the flood (%.0f µs per attempt over the quiet rate)",
		cpuAlone, cpuFlood, float64((cpuFlood-cpuAlone).Microseconds())/float64(max(attempts, 1)))
	t.Logf("FAULT connect flood: established clients' QoS 1 round trip p50 %v → %v, p99 %v → %v (ratio %.2f; the issue's bar is 2, reported, not asserted), samples %d, %d, 0 lost",
		alone.p50, under.p50, alone.p99, under.p99, float64(under.p99)/float64(max(alone.p99, 1)), alone.n, under.n)

	// The flooder's cgroup gets at most one core, and less on a machine
	// busy with other work: it must flood, not necessarily at floodRate.
	if attempts < floodRate*int64(floodFor/time.Second)/8 {
		t.Fatalf("the flood made only %d attempts", attempts)
	}
	if limited < refused {
		t.Errorf("the gateway counted %d rate-limited connections, the flood saw %d refused at accept", limited, refused)
	}
	// What may reach authentication: each source's burst plus its rate
	// over the flood (and the probe's phase after it). All the rest must
	// be refused at accept, whatever rate the flooder reached.
	bound := int64(floodSources * (floodPerIPBurst + floodPerIPRate*int(took.Seconds()+2)))
	if refused < attempts-dialErr-bound {
		t.Errorf("only %d of %d connected attempts refused at accept (at most %d may pass the per-IP limits)", refused, attempts-dialErr, bound)
	}
	if authRefused > bound || connacked > bound {
		t.Errorf("%d CONNECTs reached authentication (gateway: %d refused), over the per-IP limits' %d", connacked, authRefused, bound)
	}
	if under.n == 0 || alone.n == 0 {
		t.Fatalf("no latency samples: alone %d, flood %d", alone.n, under.n)
	}
}
