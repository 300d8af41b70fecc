package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/redis/go-redis/v9"

	"berth.dev/e2e/internal/stack"
)

// The socket handoff when a process dies mid-way (bench/README.md,
// "Handing the device's socket to a co-located node", its failure cases;
// docs/contracts.md "Socket handoff"): with the real node and gateway
// binaries, SIGKILL of either.

// handoffStack is a stack of one node taking handoffs and one gateway
// handing them off, with a tenant and a credential for every device.
func handoffStack(t *testing.T, opts stack.Options) (*stack.Stack, stack.Account, stack.Credential) {
	t.Helper()
	dir := t.TempDir()
	opts.NodeArgs = []string{"-handoff-listen", filepath.Join(dir, "node.sock")}
	opts.GatewayArgs = [][]string{{"-handoff-dir", dir}}
	opts.OpenPlans = "free,pro"
	s := stack.New(t, bins, opts)
	if !strings.Contains(s.Gateways[0].Log(), "handoff: connected to a node") {
		t.Fatalf("the gateway is not connected to the node's handoff socket:\n%s", s.Gateways[0].Log())
	}
	a := s.Signup(t)
	roomForLoad(t, s, a) // the pro plan: 50 messages a second per device
	s.SetQuota(t, a, "max_connections", 40)
	return s, a, s.CreateCredential(t, a, []string{"#"}, []string{"#"}, nil)
}

// leaseCount is the tenant's connection count in Redis: the sum of every
// gateway's count in its lease hash (connlimit/doc.go), heartbeats aside.
func leaseCount(t *testing.T, s *stack.Stack, tenantID string) int64 {
	t.Helper()
	opt, err := redis.ParseURL(s.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := rdb.HGetAll(ctx, s.RedisPrefix+"leases:{"+tenantID+"}").Result()
	if err != nil {
		t.Fatalf("reading the leases of %s: %v", tenantID, err)
	}
	var n int64
	for k, v := range h {
		if strings.HasPrefix(k, "hb:") {
			continue
		}
		var c int64
		if _, err := fmt.Sscan(v, &c); err != nil {
			t.Fatalf("lease field %s = %q: %v", k, v, err)
		}
		n += c
	}
	return n
}

// handOffDevices connects n devices through the gateway and waits until
// it counts taken handoffs reach want.
func handOffDevices(t *testing.T, gw *stack.Gateway, c stack.Credential, prefix string, n int, want int64) []*v5 {
	t.Helper()
	devs := make([]*v5, n)
	for i := range devs {
		devs[i] = mustConnectV5(t, gw.MQTT, c, fmt.Sprintf("%s%d", prefix, i))
	}
	waitFor(t, 10*time.Second, fmt.Sprintf("%d handoffs counted as taken", want), func() bool {
		return gatewayCounter(t, gw, "berth_gateway_handoffs_total", `result="taken"`) == want
	})
	return devs
}

// SIGKILL of the node while 20 devices are handed off to it: every
// device's connection ends (the node held their only descriptors), the
// gateway releases their Redis leases (the tenant's count returns to 0),
// and once the node is back the devices reconnect, are handed off again
// and are served.
func TestSocketHandoffNodeKilled(t *testing.T) {
	t.Parallel()
	const n = 20
	s, a, c := handoffStack(t, stack.Options{})
	gw := s.Gateways[0]
	devs := handOffDevices(t, gw, c, "dev", n, n)
	if got := leaseCount(t, s, a.Tenant.ID); got != n {
		t.Fatalf("Redis counts %d connections of the tenant, want %d", got, n)
	}

	killed := time.Now()
	s.Node.Kill()
	for i, d := range devs {
		select {
		case <-d.disconnected:
		case <-time.After(10 * time.Second):
			t.Fatalf("device %d still connected 10 s after the node's SIGKILL", i)
		}
	}
	ended := time.Since(killed)
	waitFor(t, 10*time.Second, "the tenant's Redis count to return to 0", func() bool { return leaseCount(t, s, a.Tenant.ID) == 0 })
	t.Logf("after the node's SIGKILL: every device's connection ended within %v, the leases released within %v",
		ended.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))

	s.RestartNode(t)
	// The gateway redials the node's socket (with backoff while it was down).
	waitFor(t, 40*time.Second, "the gateway to reconnect to the restarted node's handoff socket", func() bool {
		return strings.Count(gw.Log(), "handoff: connected to a node") >= 2
	})
	devs = handOffDevices(t, gw, c, "dev", n, 2*n)
	if got := leaseCount(t, s, a.Tenant.ID); got != n {
		t.Fatalf("Redis counts %d connections after the reconnect, want %d", got, n)
	}
	devs[0].subscribe(t, "back/#")
	if rc := devs[n-1].publishCode(t, "back/1", "served again", false); rc != 0 {
		t.Fatalf("publish after the node's restart: PUBACK %#x", rc)
	}
	devs[0].expect(t, "back/1=served again")
}

// SIGKILL of the gateway while devices are handed off: the node serves
// them on, and they publish and receive through the gap without an
// interruption (every message acknowledged and delivered). The dead
// gateway's leases lapse; the gateway, restarted with the same id,
// adopts the devices from the node's hello (the Redis count equals the
// live devices again), and a device that leaves afterwards releases its
// lease.
func TestSocketHandoffGatewayKilled(t *testing.T) {
	t.Parallel()
	const n = 10
	s, a, c := handoffStack(t, stack.Options{LeaseTTL: 2 * time.Second})
	gw := s.Gateways[0]
	devs := handOffDevices(t, gw, c, "dev", n, n)
	pub, sub := devs[0], devs[1]
	sub.subscribe(t, "flow/#")
	if got := leaseCount(t, s, a.Tenant.ID); got != n {
		t.Fatalf("Redis counts %d connections of the tenant, want %d", got, n)
	}

	// A publisher at 50 messages a second from before the kill until
	// after the adoption; the subscriber counts what it receives.
	f := startFlow(pub, sub, "flow/", 20*time.Millisecond)
	waitFor(t, 10*time.Second, "messages to flow before the kill", func() bool { return f.flowing(t) && f.received.Load() >= 10 })

	gw.Kill()
	killedAt := f.acked.Load()
	// While no gateway runs, the dead one's counts stay until its lease
	// hash expires (3 × the lease TTL): messages flow all that time.
	waitFor(t, 30*time.Second, "the dead gateway's leases to lapse", func() bool {
		return f.flowing(t) && leaseCount(t, s, a.Tenant.ID) == 0
	})
	inGap := f.acked.Load() - killedAt

	gw.Restart(t)
	waitFor(t, 20*time.Second, "the restarted gateway to adopt the handed-off devices", func() bool {
		return f.flowing(t) && leaseCount(t, s, a.Tenant.ID) == n
	})
	if !strings.Contains(gw.Log(), fmt.Sprintf("adopted=%d", n)) {
		t.Fatalf("the restarted gateway did not adopt %d devices from the node's hello:\n%s", n, gw.Log())
	}
	after := f.acked.Load()
	waitFor(t, 10*time.Second, "messages to flow after the adoption", func() bool { return f.flowing(t) && f.acked.Load() >= after+10 })
	acked, received, err := f.stop(t)
	if err != nil {
		t.Fatalf("the flow through the gateway's death and restart: %v", err)
	}
	if inGap < 10 {
		t.Fatalf("only %d messages acknowledged while the gateway was dead", inGap)
	}
	if received != acked {
		t.Fatalf("the subscriber received %d of %d messages acknowledged", received, acked)
	}
	t.Logf("%d messages acknowledged and delivered, %d of them with no gateway running", acked, inGap)

	if err := devs[n-1].Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the adopted device's lease to be released", func() bool {
		return leaseCount(t, s, a.Tenant.ID) == n-1
	})
}

// flow publishes QoS 1 messages from pub, one every tick, and counts
// what sub receives of them.
type flow struct {
	acked, received atomic.Int64
	stopPub         chan struct{}
	stopRecv        chan struct{}
	pubDone         sync.WaitGroup
	recvDone        sync.WaitGroup
	mu              sync.Mutex
	err             error // the publisher's failure: it stopped
}

// flowing fails the test if the publisher has failed.
func (f *flow) flowing(t *testing.T) bool {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		t.Fatalf("the publisher stopped after %d messages acknowledged: %v", f.acked.Load(), f.err)
	}
	return true
}

func startFlow(pub, sub *v5, prefix string, tick time.Duration) *flow {
	f := &flow{stopPub: make(chan struct{}), stopRecv: make(chan struct{})}
	f.pubDone.Go(func() {
		tk := time.NewTicker(tick)
		defer tk.Stop()
		for i := 0; ; i++ {
			select {
			case <-f.stopPub:
				return
			case <-tk.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			pr, err := pub.Publish(ctx, pahoPublish(fmt.Sprintf("%s%d", prefix, i), "m"))
			cancel()
			if err != nil || pr == nil || pr.ReasonCode != 0 {
				f.mu.Lock()
				f.err = fmt.Errorf("publish %d: %+v %v", i, pr, err)
				f.mu.Unlock()
				return
			}
			f.acked.Add(1)
		}
	})
	f.recvDone.Go(func() {
		for {
			select {
			case <-f.stopRecv:
				return
			case m := <-sub.got:
				if strings.HasPrefix(m, prefix) {
					f.received.Add(1)
				}
			}
		}
	})
	return f
}

// stop ends the publisher, waits up to 10 s for the messages it had
// acknowledged to arrive, and returns the counts and the publisher's
// failure, if any.
func (f *flow) stop(t *testing.T) (acked, received int64, err error) {
	t.Helper()
	close(f.stopPub)
	f.pubDone.Wait()
	acked = f.acked.Load()
	deadline := time.Now().Add(10 * time.Second)
	for f.received.Load() < acked && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	close(f.stopRecv)
	f.recvDone.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	return acked, f.received.Load(), f.err
}
