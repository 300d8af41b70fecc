package gateway

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"berth.dev/broker/proxyproto"
)

// proxyHeader6 is a balancer's header (version v) for an IPv6 device.
func proxyHeader6(t *testing.T, v int, device netip.AddrPort) []byte {
	t.Helper()
	dest := netip.MustParseAddrPort("[2001:db8::5]:1883")
	if v == 1 {
		return fmt.Appendf(nil, "PROXY TCP6 %s %s %d %d\r\n", device.Addr(), dest.Addr(), device.Port(), dest.Port())
	}
	h := proxyproto.Header{Command: proxyproto.CommandProxy, Source: device, Dest: dest}
	b, err := h.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBalancerIPv6DevicesBySlash64: the per-IP rate counts an IPv6 device
// named by a PROXY header by its /64, as the pending cap and the kernel
// SYN filter do: a second address of the /64 is reset once the /64's
// burst is spent, while a device of another /64 connects.
func TestBalancerIPv6DevicesBySlash64(t *testing.T) {
	e := newEnv(t, envOptions{config: func(c *Config) { balancerConfig(c); c.PerIPRate, c.PerIPBurst = 0.001, 1 }})
	id, tok := e.credential(t, tenantAcme, nil)
	for _, v := range []int{1, 2} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			dev := func(s string) netip.AddrPort {
				return netip.MustParseAddrPort(fmt.Sprintf("[2001:db8:%d:%s]:40000", v, s))
			}
			heldOpen(t, viaBalancer(t, e.addr(KindTCP), proxyHeader6(t, v, dev("2::1"))))
			resetAfterHeader(t, viaBalancer(t, e.addr(KindTCP), proxyHeader6(t, v, dev("2:ffff:ffff:ffff:fffe"))))

			other := dev("3::1")
			c := viaBalancer(t, e.addr(KindTCP), proxyHeader6(t, v, other))
			if _, rc, err := connect5Conn(t, c, id, tok, nil); err != nil || rc != 0 {
				t.Fatalf("a device of another /64: %#x %v", byte(rc), err)
			}
			relayedFrom(t, e, id, other)
		})
	}
	waitUntil(t, func() bool { return strings.Contains(scrape(t, e), `berth_gateway_rate_limited_total{scope="ip"} 2`) })
}

// TestBalancerHeaderWaitsCapped: at most -proxy-protocol-max-waiting
// balancer connections, all listeners together, may wait for their PROXY
// header; the next is reset at accept (long before the header timeout)
// and counted, while devices that do not come through the balancer are
// served. A header read, a bad one, or a close frees a place.
func TestBalancerHeaderWaitsCapped(t *testing.T) {
	const max = 8
	e := newEnv(t, envOptions{config: func(c *Config) {
		balancerConfig(c)
		c.ProxyProtocolMaxWaiting = max
		c.ProxyProtocolTimeout, c.ConnectTimeout = 30*time.Second, 30*time.Second
	}})
	id, tok := e.credential(t, tenantAcme, nil)
	waiting := func(n int) {
		t.Helper()
		waitUntil(t, func() bool { return e.gw.waits.n.Load() == int64(n) })
	}
	// Silent connections from the balancer, half on the TCP listener and
	// half on the WebSocket one: one count.
	silent := make([]net.Conn, max)
	for i := range silent {
		addr := e.addr(KindTCP)
		if i%2 == 1 {
			addr = e.addr(KindWS)
		}
		silent[i] = dialFrom(t, balancerIP, addr)
	}
	waiting(max)
	heldOpen(t, silent[max-1])
	start := time.Now()
	resetAtAccept(t, balancerIP, e.addr(KindTCP))
	resetAtAccept(t, balancerIP, e.addr(KindWS))
	t.Logf("over the cap: reset after %v (header timeout 30 s)", time.Since(start))
	m := scrape(t, e)
	for _, want := range []string{
		`berth_gateway_rate_limited_total{scope="proxy_header"} 2`,
		fmt.Sprintf("berth_gateway_proxy_header_waiting %d", max),
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if _, rc, err := connect5(t, e.addr(KindTCP), id, tok); err != nil || rc != 0 {
		t.Fatalf("a device not behind the balancer, at the cap: %#x %v", byte(rc), err)
	}
	<-e.node.conns

	// A header arrives: that device connects, and one place is free.
	device := netip.MustParseAddrPort("203.0.113.7:40000")
	if _, err := silent[0].Write(proxyV2(device)); err != nil {
		t.Fatal(err)
	}
	if _, rc, err := connect5Conn(t, silent[0], id, tok, nil); err != nil || rc != 0 {
		t.Fatalf("connect after the header: %#x %v", byte(rc), err)
	}
	relayedFrom(t, e, id, device)
	waiting(max - 1)
	silent[0] = dialFrom(t, balancerIP, e.addr(KindTCP))
	heldOpen(t, silent[0])
	waiting(max)
	resetAtAccept(t, balancerIP, e.addr(KindTCP))

	// A bad header gives its place back too.
	if _, err := silent[2].Write([]byte("PROXY NONSENSE\r\n")); err != nil {
		t.Fatal(err)
	}
	closedUnanswered(t, silent[2])
	waiting(max - 1)
	silent[2] = dialFrom(t, balancerIP, e.addr(KindTCP))
	heldOpen(t, silent[2])
	waiting(max)

	// And so does a close by the balancer.
	for _, c := range silent {
		c.Close()
	}
	waiting(0)
	waitUntil(t, func() bool {
		m := scrape(t, e)
		return strings.Contains(m, "berth_gateway_proxy_header_waiting 0") &&
			strings.Contains(m, `berth_gateway_rate_limited_total{scope="proxy_header"} 3`)
	})
}
