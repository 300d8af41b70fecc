package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"berth.dev/testenv"
	"github.com/eclipse/paho.golang/paho"
)

// synDropWait is how long a dial waits for the SYN-ACK before it counts
// its SYN as dropped: loopback answers in microseconds, and a dropped SYN
// is retransmitted only after the kernel's 1 s RTO.
const synDropWait = 300 * time.Millisecond

// dialOrDropped connects from the local IP from to addr, or reports that
// the SYN went unanswered (dropped).
func dialOrDropped(t *testing.T, from, addr string) (c net.Conn, dropped bool) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: synDropWait}
	c, err := d.Dial("tcp", addr)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil, true
	}
	if err != nil {
		t.Fatalf("dial from %s: %v", from, err)
	}
	t.Cleanup(func() { c.Close() })
	return c, false
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the kernel SYN filter needs root (or CAP_BPF): run the gateway's tests as root")
	}
}

// TestSYNFilter: with -syn-filter, a source's connects over the per-IP
// burst are dropped in the kernel (the dial times out, nothing is
// accepted or reset, berth_gateway_syn_dropped_total grows), on the MQTT
// and the WebSocket listener alike; another source is not affected;
// after the bucket refills the source gets through again; and connections
// the gateway admitted carry MQTT whole (the filter is detached from them).
func TestSYNFilter(t *testing.T) {
	needRoot(t)
	const rate, burst = 1, 3 // one token a second: the burst's checks take well under that
	logs := &testenv.LogBuffer{}
	e := newEnv(t, envOptions{
		logger: slog.New(slog.NewJSONHandler(logs, nil)),
		config: func(c *Config) { c.SYNFilter, c.PerIPRate, c.PerIPBurst = true, rate, burst },
	})
	if na := logs.Records(t, "syn filter not attached; the per-IP limits apply at accept"); len(na) != 0 {
		t.Fatalf("the filter was not attached: %v", na)
	}
	if on := logs.Records(t, "syn filter on"); len(on) != 1 {
		t.Fatalf("startup log has %d \"syn filter on\" lines, want 1", len(on))
	}
	for _, kind := range []string{KindTCP, KindWS} {
		t.Run(kind, func(t *testing.T) {
			from := map[string]string{KindTCP: "127.0.0.2", KindWS: "127.0.0.4"}[kind]
			addr := e.addr(kind)
			for i := range burst {
				c, dropped := dialOrDropped(t, from, addr)
				if dropped {
					t.Fatalf("connect %d of a burst of %d was dropped", i+1, burst)
				}
				heldOpen(t, c)
			}
			before := synDropped(t, e)
			if _, dropped := dialOrDropped(t, from, addr); !dropped {
				t.Fatalf("connect %d from %s was answered, want its SYN dropped in the kernel", burst+1, from)
			}
			if got := synDropped(t, e); got != before+1 {
				t.Fatalf("berth_gateway_syn_dropped_total %d → %d, want one more", before, got)
			}
			if _, dropped := dialOrDropped(t, "127.0.0.3", addr); dropped {
				t.Fatal("another source's connect was dropped")
			}
			// One token comes back every 1/rate s: retry, bounded. (The
			// userspace limiter, at the same rate but a little later, may
			// still reset this one: the SYN-ACK is what counts here.)
			deadline := time.Now().Add(5 * time.Second)
			for {
				if _, dropped := dialOrDropped(t, from, addr); !dropped {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s still dropped 5 s after its burst", from)
				}
			}
		})
	}
	// An admitted connection relays MQTT both ways.
	id, tok := e.credential(t, tenantAcme, nil)
	cl, rc, err := connect5(t, e.addr(KindTCP), id, tok)
	if err != nil || rc != 0 {
		t.Fatalf("MQTT 5 connect through the filtered listener: rc %#x, %v", rc, err)
	}
	defer cl.Disconnect(&paho.Disconnect{})
	checkHeader(t, e.node.next(t), e, id)
}

// TestSYNFilterOffBehindLoadBalancer: behind a load balancer every source
// is the balancer, so the filter stays off (said at startup) and the
// per-IP limit refuses at accept with a reset, in userspace.
func TestSYNFilterOffBehindLoadBalancer(t *testing.T) {
	needRoot(t)
	logs := &testenv.LogBuffer{}
	e := newEnv(t, envOptions{
		logger: slog.New(slog.NewJSONHandler(logs, nil)),
		config: func(c *Config) {
			c.SYNFilter, c.BehindLoadBalancer, c.PerIPRate, c.PerIPBurst = true, true, 0.001, 2
		},
	})
	off := logs.Records(t, "syn filter off")
	if len(off) != 1 || !strings.Contains(fmt.Sprint(off[0]["reason"]), "behind-load-balancer") {
		t.Fatalf("startup log %v, want one \"syn filter off\" line naming -behind-load-balancer", off)
	}
	if on := logs.Records(t, "syn filter on"); len(on) != 0 {
		t.Fatalf("startup log says the filter is on: %v", on)
	}
	for range 2 {
		c, dropped := dialOrDropped(t, "127.0.0.2", e.addr(KindTCP))
		if dropped {
			t.Fatal("a connect within the burst was dropped")
		}
		heldOpen(t, c)
	}
	resetAtAccept(t, "127.0.0.2", e.addr(KindTCP)) // answered by the kernel, refused by the gateway
	waitUntil(t, func() bool { return strings.Contains(scrape(t, e), `berth_gateway_rate_limited_total{scope="ip"} 1`) })
	if n := synDropped(t, e); n != 0 {
		t.Fatalf("berth_gateway_syn_dropped_total %d with the filter off", n)
	}
}

// synDropped scrapes berth_gateway_syn_dropped_total.
func synDropped(t *testing.T, e *testEnv) int64 {
	t.Helper()
	for _, ln := range strings.Split(scrape(t, e), "\n") {
		if v, ok := strings.CutPrefix(ln, "berth_gateway_syn_dropped_total "); ok {
			var n int64
			if _, err := fmt.Sscan(v, &n); err != nil {
				t.Fatalf("%q: %v", ln, err)
			}
			return n
		}
	}
	t.Fatal("no berth_gateway_syn_dropped_total in /metrics")
	return 0
}
