package e2e

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"berth.dev/e2e/internal/stack"
)

// faultCycles is how many times TestFaultNodeSIGKILLUnderQoS1Load kills
// the node: 10 in `make test`, BERTH_FAULT_CYCLES when set (`make fault`
// runs 50).
func faultCycles(t *testing.T) int {
	t.Helper()
	v := os.Getenv("BERTH_FAULT_CYCLES")
	if v == "" {
		return 10
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("BERTH_FAULT_CYCLES=%q: want a positive number", v)
	}
	return n
}

// SIGKILL of the broker node under QoS 1 load, repeated: publishers
// (pipelined) and a persistent subscriber all go through the gateway; the
// node is killed and restarted as the same node (data directory, ports)
// again and again while they run, and every message a publisher got a
// PUBACK for reaches the subscriber in the end. Each cycle's recovery is
// the time from the kill to the first PUBACK after the restart.
func TestFaultNodeSIGKILLUnderQoS1Load(t *testing.T) {
	t.Parallel()
	s := stack.New(t, bins, stack.Options{OpenPlans: "free,pro"})
	a := s.Signup(t)
	roomForLoad(t, s, a)
	c := s.CreateCredential(t, a, []string{"fault/#"}, []string{"fault/#"}, nil)

	l := newFaultLoad(t, []string{s.Gateways[0].MQTT}, c, "fault/node")
	l.Subscribe("fault-sub")
	for i := range 2 {
		l.Publish(fmt.Sprintf("fault-pub%d", i), 4)
	}
	cycles := faultCycles(t)
	var recoveries []time.Duration
	var worst time.Duration
	for cycle := range cycles {
		l.WaitAcked(l.Acked()+300, 30*time.Second) // load is flowing
		before := l.Acked()
		killed := time.Now()
		s.Node.Kill()
		s.RestartNode(t)
		back := l.WaitAcked(l.Acked(), 30*time.Second)
		rec := back.Sub(killed)
		recoveries = append(recoveries, rec)
		worst = max(worst, rec)
		t.Logf("cycle %d: SIGKILL after %d acks in all, first PUBACK %v after the kill", cycle+1, before, rec.Round(time.Millisecond))
	}
	r := l.Settle(30 * time.Second)
	logFault(t, fmt.Sprintf("node SIGKILL x%d under QoS 1 load (2 publishers x 4 pipelined, 1 persistent subscriber, via gateway)", cycles),
		r, worst, fmt.Sprintf(" (worst of %v)", roundAll(recoveries)))
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
