package e2e

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"berth.dev/e2e/internal/stack"
	"berth.dev/testenv"
)

// Redis stopped under load, the documented fail mode
// (gateway/internal/connlimit/doc.go, "Redis unavailable: fail open"):
// connected devices keep publishing and receiving; a gateway with the
// default admits new connections without Redis, the node's own
// max_connections being the backstop (over it: 0x97); a gateway started
// with -limit-fail-closed refuses them with 0x88 (server unavailable).
// Once Redis is back (empty: it kept nothing) the fail-open gateway
// writes the connections it admitted meanwhile to it, so the global limit
// holds again at both gateways; recovery is the time from Redis's restart
// until the fail-closed gateway refuses over the limit (its over_limit
// refusals count up) instead of for want of Redis.
func TestFaultRedisStoppedFailsOpenWithNodeBackstop(t *testing.T) {
	t.Parallel()
	rs := testenv.NewRedisServer(t)
	s := stack.New(t, bins, stack.Options{Gateways: 2, RedisURL: rs.URL, GatewayArgs: [][]string{nil, {"-limit-fail-closed"}}, OpenPlans: "free,pro"})
	a := s.Signup(t)
	roomForLoad(t, s, a)
	s.SetQuota(t, a, "max_connections", 3)
	c := s.CreateCredential(t, a, []string{"fault/#"}, []string{"fault/#"}, nil)
	open, closed := s.Gateways[0], s.Gateways[1]

	l := newFaultLoad(t, []string{open.MQTT}, c, "fault/redis")
	l.Subscribe("redis-sub")
	l.Publish("redis-pub", 2)
	l.WaitAcked(l.Acked()+100, 30*time.Second)

	rs.Stop(t)
	stopped := time.Now()
	l.WaitAcked(l.Acked()+100, 30*time.Second) // connected devices carry on
	idle, rc := connectV5(t, open.MQTT, "", c, "redis-idle")
	if rc != 0 {
		t.Fatalf("fail-open gateway without Redis: CONNACK %#x, want 0 (admitted)", rc)
	}
	if _, rc := connectV5(t, open.MQTT, "", c, "redis-over"); rc != 0x97 {
		t.Errorf("fail-open gateway without Redis, 4th connection of a limit of 3: CONNACK %#x, want 0x97 from the node", rc)
	}
	if _, rc := connectV5(t, closed.MQTT, "", c, "redis-closed"); rc != 0x88 {
		t.Errorf("fail-closed gateway without Redis: CONNACK %#x, want 0x88", rc)
	}
	l.WaitAcked(l.Acked()+100, 30*time.Second)
	down := time.Since(stopped)

	rs.Start(t)
	restarted := time.Now()
	overLimit := func() int64 { return gatewayCounter(t, closed, "berth_gateway_refusals_total", `reason="over_limit"`) }
	before := overLimit()
	deadline := restarted.Add(30 * time.Second)
	for {
		_, rc := connectV5(t, closed.MQTT, "", c, "redis-probe")
		if rc == 0x97 && overLimit() > before {
			break
		}
		if rc == 0 {
			t.Fatalf("fail-closed gateway after Redis restart admitted a 4th connection of a limit of 3")
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after Redis restarted the fail-closed gateway still answers %#x, not 0x97 over the limit", rc)
		}
		time.Sleep(100 * time.Millisecond)
	}
	recovery := time.Since(restarted)
	// A slot freed at the fail-open gateway is free at the other one.
	_ = idle.Disconnect(&paho.Disconnect{})
	deadline = time.Now().Add(15 * time.Second)
	for {
		_, rc := connectV5(t, closed.MQTT, "", c, "redis-probe")
		if rc == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a release the fail-closed gateway still answers %#x", rc)
		}
		time.Sleep(100 * time.Millisecond)
	}
	r := l.Settle(30 * time.Second)
	logFault(t, "Redis SIGKILLed under load (fail-open and fail-closed gateways)", r, recovery,
		"; Redis down "+down.Round(time.Millisecond).String()+", recovery = restart to the global limit enforced again")
}

// gatewayCounter sums the samples of metric whose labels contain match
// on g's /metrics.
func gatewayCounter(t *testing.T, g *stack.Gateway, metric, match string) int64 {
	t.Helper()
	res, err := http.Get("http://" + g.Metrics + "/metrics")
	if err != nil {
		t.Fatalf("gateway metrics: %v", err)
	}
	defer res.Body.Close()
	return sumMetric(t, res.Body, metric, match)
}

// sumMetric sums the samples of metric (with labels containing match, or
// without labels when match is empty) in a Prometheus text exposition.
func sumMetric(t *testing.T, r io.Reader, metric, match string) int64 {
	t.Helper()
	var sum int64
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		labelled := strings.HasPrefix(line, metric+"{") && strings.Contains(line, match)
		if !labelled && !(match == "" && strings.HasPrefix(line, metric+" ")) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += int64(v)
	}
	return sum
}
