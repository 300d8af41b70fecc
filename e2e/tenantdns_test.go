package e2e

import (
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"berth.dev/e2e/internal/stack"
)

// A device that dials its tenant's endpoint lands on the host of its
// tenant's leader: the node registers -public-host, the gateway's DNS
// (-dns-listen) answers <slug>.<domain> (the credential's endpoint) with
// it, and the gateway on that host hands the device's socket to the node.
// An unknown slug is NXDOMAIN.
func TestTenantEndpointDNSReachesTheLeader(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dnsAddr := stack.FreeAddr(t)
	s := stack.New(t, bins, stack.Options{
		NodeArgs: []string{"-handoff-listen", filepath.Join(dir, "node.sock"), "-public-host", "127.0.0.1"},
		GatewayArgs: [][]string{{"-handoff-dir", dir, "-dns-listen", dnsAddr, "-dns-zone", "mqtt.localhost",
			"-dns-ns", "ns1.example.net", "-dns-fallback", "192.0.2.1"}},
	})
	a := s.Signup(t)
	c := s.CreateCredential(t, a, []string{"#"}, []string{"#"}, nil)
	gw := s.Gateways[0]

	rcode, answers := queryA(t, dnsAddr, c.Endpoint)
	if rcode != dnsmessage.RCodeSuccess || len(answers) != 1 || answers[0] != netip.MustParseAddr("127.0.0.1") {
		t.Fatalf("%s: %v %v, want the node's public host 127.0.0.1", c.Endpoint, rcode, answers)
	}
	if rcode, _ := queryA(t, dnsAddr, "no-such-tenant.mqtt.localhost"); rcode != dnsmessage.RCodeNameError {
		t.Fatalf("unknown slug: %v, want NXDOMAIN", rcode)
	}

	_, port, _ := net.SplitHostPort(gw.MQTT)
	dev := mustConnectV5(t, net.JoinHostPort(answers[0].String(), port), c, "by-name")
	waitFor(t, 10*time.Second, "the device dialled by name handed off", func() bool {
		return gatewayCounter(t, gw, "berth_gateway_handoffs_total", `result="taken"`) == 1
	})
	dev.subscribe(t, "by-name/#")
	if rc := dev.publishCode(t, "by-name/1", "hello", false); rc != 0 {
		t.Fatalf("publish: PUBACK %#x", rc)
	}
	dev.expect(t, "by-name/1=hello")
}

// queryA asks the DNS server at addr for name's A records over UDP and
// returns the response code and the addresses answered.
func queryA(t *testing.T, addr, name string) (dnsmessage.RCode, []netip.Addr) {
	t.Helper()
	q, err := dnsmessage.NewName(name + ".")
	if err != nil {
		t.Fatal(err)
	}
	msg := dnsmessage.Message{Header: dnsmessage.Header{ID: 0x2a}, Questions: []dnsmessage.Question{{Name: q, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}}}
	req, err := msg.Pack()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	buf := make([]byte, 1232)
	for try := 0; ; try++ { // UDP: ask again if an answer was lost
		if _, err := conn.Write(req); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(time.Second))
		n, err := conn.Read(buf)
		if err != nil {
			if try < 4 {
				continue
			}
			t.Fatalf("query %s: %v", name, err)
		}
		var resp dnsmessage.Message
		if err := resp.Unpack(buf[:n]); err != nil || resp.ID != msg.ID || !resp.Authoritative {
			t.Fatalf("query %s: answer %+v (%v), want an authoritative answer to it", name, resp.Header, err)
		}
		var out []netip.Addr
		for _, r := range resp.Answers {
			if a, ok := r.Body.(*dnsmessage.AResource); ok {
				out = append(out, netip.AddrFrom4(a.A))
			}
		}
		return resp.RCode, out
	}
}
