package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"berth.dev/broker/packet"
	"berth.dev/broker/proxyproto"
	"berth.dev/testenv"
)

// The balancer of these tests is 127.0.0.2 (any 127.0.0.0/8 address is
// loopback on Linux); devices behind it have documentation addresses.
const balancerIP = "127.0.0.2"

func balancerConfig(c *Config) { c.ProxyProtocolFrom = balancerIP + "/32" }

// proxyV1 and proxyV2 are the headers a balancer writes for device.
func proxyV1(device netip.AddrPort) []byte {
	return fmt.Appendf(nil, "PROXY TCP4 %s 10.0.0.5 %d 1883\r\n", device.Addr(), device.Port())
}

func proxyV2(device netip.AddrPort) []byte {
	h := proxyproto.Header{Command: proxyproto.CommandProxy, Source: device, Dest: netip.MustParseAddrPort("10.0.0.5:1883")}
	b, err := h.Append(nil)
	if err != nil {
		panic(err)
	}
	return b
}

var proxyVersions = []struct {
	name   string
	header func(netip.AddrPort) []byte
}{{"v1", proxyV1}, {"v2", proxyV2}}

// viaBalancer connects to addr from the balancer and writes header.
func viaBalancer(t *testing.T, addr string, header []byte) net.Conn {
	t.Helper()
	c := dialFrom(t, balancerIP, addr)
	if _, err := c.Write(header); err != nil {
		t.Fatal(err)
	}
	return c
}

// resetAfterHeader asserts that the gateway reset c unanswered, as it
// resets a connection refused at accept.
func resetAfterHeader(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 16)); n != 0 || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read %d bytes, %v: want the connection reset unread", n, err)
	}
}

// closedUnanswered asserts that the gateway closes c without writing a
// byte (a reset when it left bytes unread).
func closedUnanswered(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 16)); n != 0 || !(errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
		t.Fatalf("read %d bytes, %v: want the connection closed unanswered", n, err)
	}
}

// relayedFrom asserts that the node's next connection is credential
// id's, and that the gateway told it the device's address.
func relayedFrom(t *testing.T, e *testEnv, id string, device netip.AddrPort) {
	t.Helper()
	nc := e.node.next(t)
	if nc.err != nil {
		t.Fatalf("node refused the connection: %v", nc.err)
	}
	if nc.info.CredentialID != id || nc.header.Source != device {
		t.Fatalf("the node got credential %q from %v, want %q from %v", nc.info.CredentialID, nc.header.Source, id, device)
	}
}

// TestBalancerDevicesLimitedApart: behind one balancer address, the
// per-IP rate and the pending cap count each device that the PROXY
// header (version 1 or 2) names: a device over its limit is reset while
// another device, through the same balancer, connects; and the node is
// told the device's address, not the balancer's.
func TestBalancerDevicesLimitedApart(t *testing.T) {
	for _, lim := range []struct {
		scope  string
		config func(*Config)
	}{
		{"ip", func(c *Config) { c.PerIPRate, c.PerIPBurst = 0.001, 2 }},
		{"pending", func(c *Config) { c.MaxPendingPerIP, c.ConnectTimeout = 2, 30*time.Second }},
	} {
		t.Run(lim.scope, func(t *testing.T) {
			e := newEnv(t, envOptions{config: func(c *Config) { balancerConfig(c); lim.config(c) }})
			id, tok := e.credential(t, tenantAcme, nil)
			for i, v := range proxyVersions {
				t.Run(v.name, func(t *testing.T) {
					busy := netip.AddrPortFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(10 + i)}), 40000)
					for range 2 {
						heldOpen(t, viaBalancer(t, e.addr(KindTCP), v.header(busy)))
					}
					resetAfterHeader(t, viaBalancer(t, e.addr(KindTCP), v.header(busy)))

					other := netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(10 + i)}), 50000+uint16(i))
					c := viaBalancer(t, e.addr(KindTCP), v.header(other))
					if _, rc, err := connect5Conn(t, c, id, tok, nil); err != nil || rc != 0 {
						t.Fatalf("another device through the balancer: %#x %v", byte(rc), err)
					}
					relayedFrom(t, e, id, other)
				})
			}
			want := fmt.Sprintf(`berth_gateway_rate_limited_total{scope=%q} %d`, lim.scope, len(proxyVersions))
			waitUntil(t, func() bool { return strings.Contains(scrape(t, e), want) })
		})
	}
}

// TestBalancerAllTransports: the device's address reaches the node on
// every listener: the header comes before TLS and before the WebSocket
// upgrade.
func TestBalancerAllTransports(t *testing.T) {
	cert := newTestCert(t)
	e := newEnv(t, envOptions{config: func(c *Config) { balancerConfig(c); cert.config(c) }})
	id, tok := e.credential(t, tenantAcme, nil)
	conf := &tls.Config{RootCAs: cert.roots, ServerName: "acme.mqtt.test"}
	wsDial := func(scheme, addr string, device netip.AddrPort) net.Conn {
		t.Helper()
		tr := &http.Transport{TLSClientConfig: conf, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return viaBalancer(t, addr, proxyV2(device)), nil
		}}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, _, err := websocket.Dial(ctx, scheme+"://"+addr+"/mqtt", &websocket.DialOptions{
			HTTPClient: &http.Client{Transport: tr}, Subprotocols: []string{"mqtt"},
		})
		if err != nil {
			t.Fatalf("%s dial: %v", scheme, err)
		}
		return websocket.NetConn(context.Background(), c, websocket.MessageBinary)
	}
	for i, tc := range []struct {
		kind string
		dial func(device netip.AddrPort) net.Conn
	}{
		{KindTCP, func(d netip.AddrPort) net.Conn { return viaBalancer(t, e.addr(KindTCP), proxyV1(d)) }},
		{KindTLS, func(d netip.AddrPort) net.Conn { return tls.Client(viaBalancer(t, e.addr(KindTLS), proxyV2(d)), conf) }},
		{KindWS, func(d netip.AddrPort) net.Conn { return wsDial("ws", e.addr(KindWS), d) }},
		{KindWSS, func(d netip.AddrPort) net.Conn { return wsDial("wss", e.addr(KindWSS), d) }},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			device := netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(1 + i)}), 61000+uint16(i))
			if _, rc, err := connect5Conn(t, tc.dial(device), id, tok, nil); err != nil || rc != 0 {
				t.Fatalf("connect: %#x %v", byte(rc), err)
			}
			relayedFrom(t, e, id, device)
		})
	}
}

// TestProxyHeaderFromElsewhereNotHonoured: a source not in
// -proxy-protocol-from that sends a PROXY header (to pass as another
// address) has it read as MQTT and is refused before anything reaches a
// node; its plain MQTT connections are served as ever.
func TestProxyHeaderFromElsewhereNotHonoured(t *testing.T) {
	e := newEnv(t, envOptions{config: balancerConfig})
	id, tok := e.credential(t, tenantAcme, nil)
	connect := mustConnect(t, packet.Version311, packet.Connect{
		CleanStart: true, KeepAlive: 30, ClientID: []byte("spoof"),
		UsernameFlag: true, Username: []byte(id), PasswordFlag: true, Password: []byte(tok),
	})
	spoofed := netip.MustParseAddrPort("203.0.113.99:40000")
	for _, v := range proxyVersions {
		c := dialFrom(t, "127.0.0.1", e.addr(KindTCP))
		if _, err := c.Write(append(v.header(spoofed), connect...)); err != nil {
			t.Fatal(err)
		}
		closedUnanswered(t, c)
	}
	waitUntil(t, func() bool {
		return strings.Contains(scrape(t, e), `berth_gateway_refusals_total{reason="malformed",tenant_id=""} 2`)
	})
	if _, rc, err := connect5(t, e.addr(KindTCP), id, tok); err != nil || rc != 0 {
		t.Fatalf("plain MQTT from 127.0.0.1: %#x %v", byte(rc), err)
	}
	relayed(t, e, id, packet.Version5, "dev-5") // from the loopback address it came from
}

// TestBalancerWithoutHeaderClosed: a balancer's connection that sends
// no header, half of one, or MQTT straight away is closed (after
// -proxy-protocol-timeout when it stalls), counted by reason, and
// reaches no node.
func TestBalancerWithoutHeaderClosed(t *testing.T) {
	const timeout = 300 * time.Millisecond
	e := newEnv(t, envOptions{config: func(c *Config) { balancerConfig(c); c.ProxyProtocolTimeout = timeout }})
	for _, tc := range []struct {
		name string
		send []byte
	}{
		{"silent", nil},
		{"half a v1 header", []byte("PROXY TCP4 203.0.113.")},
		{"half a v2 header", proxyV2(netip.MustParseAddrPort("203.0.113.1:1"))[:20]},
		{"no header", noCredentialsConnect(t)},
		{"a header for UDP", []byte("PROXY UDP4 203.0.113.1 10.0.0.5 1 2\r\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			closedUnanswered(t, viaBalancer(t, e.addr(KindTCP), tc.send))
			t.Logf("closed after %v", time.Since(start))
		})
	}
	waitUntil(t, func() bool {
		m := scrape(t, e)
		return strings.Contains(m, `berth_gateway_proxy_header_refused_total{reason="timeout"} 3`) &&
			strings.Contains(m, `berth_gateway_proxy_header_refused_total{reason="invalid"} 2`)
	})
	select {
	case nc := <-e.node.conns:
		t.Fatalf("a node saw a connection: %+v", nc)
	default:
	}
}

func TestParseTrusted(t *testing.T) {
	b, err := parseTrusted(" 10.0.0.0/8, 192.168.1.5 ,2001:db8::/32,::ffff:172.16.0.0/108,")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"10.1.2.3:1", true}, {"192.168.1.5:1", true}, {"192.168.1.6:1", false},
		{"[2001:db8::1]:1", true}, {"[2001:db9::1]:1", false}, {"172.16.9.9:1", true}, {"[::ffff:10.0.0.1]:1", true},
	} {
		if got := b.has(net.TCPAddrFromAddrPort(netip.MustParseAddrPort(tc.addr))); got != tc.want {
			t.Errorf("%s: trusted %v, want %v", tc.addr, got, tc.want)
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "balancer", "fe80::1%eth0", "::ffff:0.0.0.0/64"} {
		if _, err := parseTrusted(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if b, err := parseTrusted(""); err != nil || b.has(&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1)}) {
		t.Fatalf("empty: %v %v", b, err)
	}
}

// TestSYNFilterOffWithProxyProtocol: with -proxy-protocol-from every SYN
// comes from a balancer, so the kernel filter (per source) stays off and
// says why, whatever the privileges.
func TestSYNFilterOffWithProxyProtocol(t *testing.T) {
	logs := &testenv.LogBuffer{}
	e := newEnv(t, envOptions{
		logger: slog.New(slog.NewJSONHandler(logs, nil)),
		config: func(c *Config) { balancerConfig(c); c.SYNFilter = true },
	})
	off := logs.Records(t, "syn filter off")
	if len(off) != 1 || !strings.Contains(fmt.Sprint(off[0]["reason"]), "proxy-protocol-from") || e.gw.syn != nil {
		t.Fatalf("startup log %v (filter loaded: %v), want one \"syn filter off\" line naming -proxy-protocol-from", off, e.gw.syn != nil)
	}
}
