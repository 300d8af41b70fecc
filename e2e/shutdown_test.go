package e2e

import (
	"sync"
	"syscall"
	"testing"
	"time"

	"berth.dev/e2e/internal/stack"
)

// Ctrl-C on `make run` sends every process SIGINT/SIGTERM at once. A
// connected MQTT 5 device must then hear why: DISCONNECT 0x8B (server
// shutting down), relayed by the gateway from the node, not a bare TCP
// close.
func TestShutdownSendsMQTT5Disconnect0x8B(t *testing.T) {
	t.Parallel()
	s := stack.New(t, bins, stack.Options{})
	a := s.Signup(t)
	c := s.CreateCredential(t, a, []string{"dev/#"}, []string{"dev/#"}, nil)
	cl := mustConnectV5(t, s.Gateways[0].MQTT, c, "shutdown-probe")
	cl.subscribe(t, "dev/#")

	var wg sync.WaitGroup
	for _, p := range []*stack.Proc{s.Node, s.Gateways[0].Proc} {
		wg.Add(1)
		go func() { defer wg.Done(); p.Signal(t, syscall.SIGTERM) }()
	}
	wg.Wait()
	start := time.Now()
	select {
	case rc := <-cl.disconnected:
		if rc != 0x8B {
			t.Fatalf("on shutdown the client got %#x (0xFF: the connection dropped without DISCONNECT), want 0x8B", rc)
		}
		t.Logf("DISCONNECT 0x8B %v after SIGTERM", time.Since(start))
	case <-time.After(20 * time.Second):
		t.Fatal("no DISCONNECT within 20 s of SIGTERM")
	}
	for _, p := range []*stack.Proc{s.Node, s.Gateways[0].Proc} {
		if err := p.Wait(20 * time.Second); err != nil {
			t.Errorf("%s after SIGTERM: %v", p.Name, err)
		}
	}
}
