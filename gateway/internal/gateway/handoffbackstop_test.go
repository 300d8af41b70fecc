package gateway

import (
	"context"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"berth.dev/gateway/internal/connlimit"
)

// The revocation backstop of handed-off and adopted devices
// (handoffbackstop.go), and a gateway restarted under its handoffs.

// revokeUntilClosed revokes credential id and waits until the device c
// (what) is closed: within revokeGrace and 5 s more.
func revokeUntilClosed(t *testing.T, e *testEnv, id string, c net.Conn, what string) {
	t.Helper()
	revoked := time.Now()
	e.revoke(t, id)
	c.SetDeadline(time.Now().Add(revokeGrace + 5*time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("the %s of a revoked credential is still connected: %v", what, err)
	}
	t.Logf("the %s was closed %v after its revocation (revokeGrace %v)", what, time.Since(revoked).Round(time.Millisecond), revokeGrace)
}

// restartHandoffGateway ends e's gateway as its process's exit would
// (its handoff connections and its counts: nothing counted in Redis is
// left) and starts another with the same id, config and Revoked set,
// whose limiter it returns; the new gateway has connected to ho (and read
// its hello) before it returns.
func restartHandoffGateway(t *testing.T, e *testEnv, ho *hoNode) (*Gateway, *connlimit.Limiter) {
	t.Helper()
	e.gw.ho.close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.gw.d.Limits.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return ho.gateways() == 0 })
	if n := leaseCount(t, e); n != 0 {
		t.Fatalf("Redis counts %d after the gateway's exit", n)
	}

	lim, err := connlimit.New(e.redis.Client, connlimit.Options{GatewayID: e.cfg.GatewayID, Prefix: e.redis.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	lim.Start(context.Background())
	t.Cleanup(func() { lim.Shutdown(context.Background()) })
	cfg := e.cfg
	cfg.ListenTCP, cfg.ListenWS, cfg.ListenTLS, cfg.ListenWSS, cfg.MetricsListen = "127.0.0.1:0", "", "", "", ""
	d := e.gw.d
	d.Limits, d.Registry = lim, nil
	gw2, err := New(cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	if err := gw2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw2.Shutdown(context.Background()) })
	waitUntil(t, func() bool { return gw2.ho.node(ho.id) != nil })
	return gw2, lim
}

// A device adopted by a restarted gateway keeps the revocation backstop:
// the node's credentials frame after its hello names the device's
// credential, and a revocation after the restart has the gateway ask a
// node that ignores revocations (this one) to close it.
func TestHandoffAdoptedKeepsBackstop(t *testing.T) {
	e, ho := newHandoffEnv(t, envOptions{})
	id, tok := e.credential(t, tenantAcme, nil)
	c := rawHandedOff(t, e, ho, id, tok)
	gw2, lim := restartHandoffGateway(t, e, ho)
	waitUntil(t, func() bool { return lim.Held(tenantAcme) == 1 })
	// The credentials frame follows the hello: it is read once the
	// reader runs, after the adoption.
	waitUntil(t, func() bool { return e.gw.d.Revoked.Watching() == 1 })
	revokeUntilClosed(t, e, id, c, "adopted device")
	waitUntil(t, func() bool { return lim.Held(tenantAcme) == 0 && leaseCount(t, e) == 0 })
	if gw2.ho.node(ho.id) == nil {
		t.Fatal("the node's connection ended: the close did not come from the backstop")
	}
}

// A handed-off device costs the gateway no goroutine: with 40 devices
// handed off (each watching its credential for the backstop) the
// goroutines running the gateway's own code are as many as with none.
func TestHandoffNoGoroutinePerDevice(t *testing.T) {
	const devices = 40
	e, ho := newHandoffEnv(t, envOptions{})
	id, tok := e.credential(t, tenantAcme, nil)
	before := gatewayGoroutines()
	for range devices {
		rawHandedOff(t, e, ho, id, tok)
	}
	waitUntil(t, func() bool { return e.gw.d.Limits.Held(tenantAcme) == devices })
	// Every device's connection goroutine has returned after its taken.
	var after int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if after = gatewayGoroutines(); after <= before+2 || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("goroutines in the gateway's code: %d with no device, %d with %d handed off", before, after, devices)
	if after > before+2 {
		t.Fatalf("%d goroutines in the gateway's code with %d devices handed off, %d with none", after, devices, before)
	}
	// The backstop still works for each of them (TestHandoffRevocationBackstop
	// times one): here the node ends them, and the registrations go.
	ho.stop()
	waitUntil(t, func() bool { return e.gw.d.Limits.Held(tenantAcme) == 0 && e.gw.d.Revoked.Watching() == 0 })
}

// gatewayGoroutines counts the goroutines with a frame in this package's
// own (non-test) code: the test's stand-in node and clients are not.
func gatewayGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, line := range strings.Split(g, "\n") {
			if strings.Contains(line, "/internal/gateway/") && !strings.Contains(line, "_test.go") && strings.HasPrefix(line, "\t") {
				count++
				break
			}
		}
	}
	return count
}
