package e2e

import (
	"fmt"
	"testing"
	"time"

	"berth.dev/e2e/internal/stack"
)

// SIGKILL of a gateway: its devices reconnect through the other one, and
// the connection-limit leases the dead gateway held in Redis are freed
// within their lease time (its heartbeat's TTL), so a tenant that was at
// its max_connections is not locked out by the dead gateway's counts.
//
// The tenant's limit is 4 and all 4 connections (a persistent
// subscriber, a publisher, two idle devices) are on gateway 0 when it is
// killed: until its leases lapse gateway 1 refuses them (CONNACK 0x97);
// then all 4 get in, and a fifth is still refused.
func TestFaultGatewaySIGKILLFreesLeases(t *testing.T) {
	t.Parallel()
	const leaseTTL = 3 * time.Second
	s := stack.New(t, bins, stack.Options{Gateways: 2, LeaseTTL: leaseTTL, OpenPlans: "free,pro"})
	a := s.Signup(t)
	roomForLoad(t, s, a)
	s.SetQuota(t, a, "max_connections", 4)
	c := s.CreateCredential(t, a, []string{"fault/#"}, []string{"fault/#"}, nil)
	gw0, gw1 := s.Gateways[0], s.Gateways[1]

	l := newFaultLoad(t, []string{gw0.MQTT, gw1.MQTT}, c, "fault/gw")
	l.Subscribe("gw-sub")
	l.Publish("gw-pub", 2)
	for i := range 2 {
		mustConnectV5(t, gw0.MQTT, c, fmt.Sprintf("gw-idle%d", i))
	}
	if _, rc := connectV5(t, gw1.MQTT, "", c, "gw-fifth"); rc != 0x97 {
		t.Fatalf("a fifth connection at the limit of 4: CONNACK %#x, want 0x97", rc)
	}
	l.WaitAcked(l.Acked()+100, 30*time.Second)

	killed := time.Now()
	gw0.Kill()
	// The idle devices come back through gateway 1, refused while the
	// dead gateway's leases still count.
	refusals := 0
	deadline := killed.Add(leaseTTL + 15*time.Second)
	for i := range 2 {
		for {
			if _, rc := connectV5(t, gw1.MQTT, "", c, fmt.Sprintf("gw-idle%d", i)); rc == 0 {
				break
			} else if rc != 0x97 {
				t.Fatalf("reconnect through gateway 1: CONNACK %#x, want 0 or 0x97 (limit)", rc)
			}
			refusals++
			if time.Now().After(deadline) {
				t.Fatalf("idle device %d still refused %v after the kill (lease TTL %v)", i, time.Since(killed), leaseTTL)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	leasesFreed := time.Since(killed)
	// The load's two devices are back too: the publisher's messages are
	// acknowledged again and reach the subscriber. Only then are all four
	// connections held, and a fifth must be refused.
	back := l.WaitAcked(l.Acked()+20, 30*time.Second)
	got := l.Received()
	waitFor(t, 30*time.Second, "the subscriber to receive a message after the publisher's return", func() bool { return l.Received() > got })
	if _, rc := connectV5(t, gw1.MQTT, "", c, "gw-fifth"); rc != 0x97 {
		t.Errorf("a fifth connection after the failover: CONNACK %#x, want 0x97 (the limit still holds)", rc)
	}
	l.WaitAcked(l.Acked()+100, 30*time.Second)
	r := l.Settle(30 * time.Second)
	logFault(t, "gateway SIGKILL (tenant at its limit of 4 connections, all on the killed gateway)", r, back.Sub(killed),
		fmt.Sprintf("; all 4 devices back through the other gateway after %v (lease TTL %v, %d refusals 0x97 meanwhile)",
			leasesFreed.Round(time.Millisecond), leaseTTL, refusals))
}
