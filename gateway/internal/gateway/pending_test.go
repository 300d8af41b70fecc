package gateway

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/broker/packet"
)

func TestPendingSource(t *testing.T) {
	tcp := func(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }
	tests := []struct {
		name string
		addr net.Addr
		want string
	}{
		{"IPv4: the address", tcp("192.0.2.7:4000"), "192.0.2.7/32"},
		{"IPv4-mapped IPv6 is IPv4", tcp("[::ffff:192.0.2.7]:4000"), "192.0.2.7/32"},
		{"IPv6: the /64", tcp("[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:4000"), "2001:db8:1:2::/64"},
		{"IPv6 with a zone: the /64, no zone", tcp("[fe80::1%eth0]:4000"), "fe80::/64"},
		{"not IP: no source", &net.UnixAddr{Name: "/tmp/x", Net: "unix"}, "invalid Prefix"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := sourceOf(tc.addr).String(); got != tc.want {
				t.Fatalf("sourceOf(%v) = %s, want %s", tc.addr, got, tc.want)
			}
		})
	}
	// Two addresses of one /64 share a count; the next /64 does not.
	p := newPendingIPs(1, prometheus.NewGauge(prometheus.GaugeOpts{Name: "pending"}))
	a, _, ok := p.acquire(tcp("[2001:db8:1:2::1]:1"))
	if !ok {
		t.Fatal("first connection of 2001:db8:1:2::/64 refused")
	}
	if _, _, ok := p.acquire(tcp("[2001:db8:1:2::ffff]:2")); ok {
		t.Fatal("second connection of the same /64 admitted over a cap of 1")
	}
	if _, _, ok := p.acquire(tcp("[2001:db8:1:3::1]:3")); !ok {
		t.Fatal("a connection of another /64 refused")
	}
	a.release()
	a.release() // idempotent: must not free a slot it does not hold
	if _, _, ok := p.acquire(tcp("[2001:db8:1:2::2]:4")); !ok {
		t.Fatal("the /64's slot was not freed by release")
	}
	if _, _, ok := p.acquire(tcp("[2001:db8:1:2::3]:5")); ok {
		t.Fatal("a double release freed two slots")
	}
}

// dialFrom opens a TCP connection to addr from the local IP from (any
// 127.0.0.0/8 address is loopback on Linux).
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// heldOpen asserts that the gateway keeps c open, waiting for a CONNECT.
func heldOpen(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := c.Read(make([]byte, 1)); !isTimeout(err) {
		t.Fatalf("%v, want the connection held open", err)
	}
	c.SetReadDeadline(time.Time{})
}

func TestPendingPerIPCap(t *testing.T) {
	const max = 40
	e := newEnv(t, envOptions{config: func(c *Config) {
		c.MaxPendingPerIP = max
		c.ConnectTimeout = 30 * time.Second
		c.PerIPRate, c.PerIPBurst = 1e6, 1e6
	}})
	gw := e.addr(KindTCP)
	lo1 := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}
	pendingIs := func(n int) {
		t.Helper()
		waitUntil(t, func() bool { return e.gw.pend.pending(lo1) == n })
	}
	fill := func() []net.Conn {
		t.Helper()
		cs := make([]net.Conn, max)
		for i := range cs {
			cs[i] = dialFrom(t, "127.0.0.1", gw)
		}
		pendingIs(max) // each admitted, none closed yet
		heldOpen(t, cs[max-1])
		return cs
	}
	closeAll := func(cs []net.Conn) {
		for _, c := range cs {
			c.Close()
		}
	}

	// max silent sockets from 127.0.0.1: the next is reset unread, on
	// the TCP and the WebSocket listener alike (one count per source).
	silent := fill()
	resetAtAccept(t, "127.0.0.1", gw)
	resetAtAccept(t, "127.0.0.1", e.addr(KindWS))
	waitUntil(t, func() bool {
		return strings.Contains(scrape(t, e), `berth_gateway_rate_limited_total{scope="pending"} 2`)
	})
	if m := scrape(t, e); !strings.Contains(m, fmt.Sprintf("berth_gateway_pending_connections %d", max)) {
		t.Errorf("metrics lack berth_gateway_pending_connections %d", max)
	}

	// Another source is unaffected: held open, and connects end to end.
	heldOpen(t, dialFrom(t, "127.0.0.2", gw))
	id, tok := e.credential(t, tenantAcme, nil)
	if _, rc, err := connect5Conn(t, dialFrom(t, "127.0.0.2", gw), id, tok, nil); err != nil || rc != 0 {
		t.Fatalf("connect from 127.0.0.2 while 127.0.0.1 is at its cap: rc %#x, %v", byte(rc), err)
	}
	relayed(t, e, id, packet.Version5, "dev-5")

	// Closed by the client: every slot comes back, and 127.0.0.1 is
	// admitted again.
	closeAll(silent)
	pendingIs(0)
	silent = fill()
	closeAll(silent)
	pendingIs(0)

	t.Run("refused CONNECTs give their slot back", func(t *testing.T) {
		for range max {
			_, rc, err := connect5Conn(t, dialFrom(t, "127.0.0.1", gw), "crd_x", "not-a-jwt", nil)
			if err == nil || rc != 0x86 {
				t.Fatalf("bad token: rc %#x, %v", byte(rc), err)
			}
		}
		pendingIs(0)
		closeAll(fill())
		pendingIs(0)
	})
	t.Run("relayed connections are not pending", func(t *testing.T) {
		for i := range max {
			c, err := net.Dial("tcp", gw)
			if err != nil {
				t.Fatal(err)
			}
			if _, rc, err := connect5Conn(t, c, id, tok, nil); err != nil || rc != 0 {
				t.Fatalf("connection %d: rc %#x, %v", i, byte(rc), err)
			}
			<-e.node.conns
		}
		pendingIs(0)
		// All 40 are live, yet 40 more may be pending.
		closeAll(fill())
		pendingIs(0)
	})
	t.Run("WebSocket: relayed or closed, the slot comes back", func(t *testing.T) {
		for range 3 {
			c, rc, err := connect311(t, "ws://"+e.addr(KindWS)+"/mqtt", id, tok, nil)
			if err != nil || rc != 0 {
				t.Fatalf("connect over WebSocket: rc %d, %v", rc, err)
			}
			<-e.node.conns
			pendingIs(0)
			c.Disconnect(0)
		}
		// An HTTP connection that never upgrades is pending until it closes.
		ws := make([]net.Conn, max)
		for i := range ws {
			ws[i] = dialFrom(t, "127.0.0.1", e.addr(KindWS))
			fmt.Fprintf(ws[i], "GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n")
		}
		pendingIs(max)
		resetAtAccept(t, "127.0.0.1", gw)
		closeAll(ws)
		pendingIs(0)
	})
}

func TestPendingSlotFreedAtConnectDeadline(t *testing.T) {
	const max = 20
	e := newEnv(t, envOptions{config: func(c *Config) {
		c.MaxPendingPerIP = max
		c.ConnectTimeout = 300 * time.Millisecond
		c.PerIPRate, c.PerIPBurst = 1e6, 1e6
	}})
	lo1 := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}
	for round := range 3 {
		cs := make([]net.Conn, max)
		for i := range cs {
			cs[i] = dialFrom(t, "127.0.0.1", e.addr(KindTCP))
		}
		// Each is closed at the CONNECT deadline, without a CONNACK, and
		// its slot is given back.
		for _, c := range cs {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if b, err := io.ReadAll(c); err != nil || len(b) != 0 {
				t.Fatalf("round %d: read % X, %v; want closed at the deadline, unanswered", round, b, err)
			}
		}
		waitUntil(t, func() bool { return e.gw.pend.pending(lo1) == 0 })
	}
	want := fmt.Sprintf(`berth_gateway_refusals_total{reason="connect_timeout",tenant_id=""} %d`, 3*max)
	waitUntil(t, func() bool { return strings.Contains(scrape(t, e), want) })
}
