package tenantdns

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestAnswers: every kind of name and query a resolver may send, over UDP
// and TCP, answered as RFC 1035, 2308 and 6891 say (package comment).
func TestAnswers(t *testing.T) {
	f := newFixture(t)
	addr := f.serve(t, testConfig())
	const (
		nx      = dns.RcodeNameError
		ok      = dns.RcodeSuccess
		refused = dns.RcodeRefused
	)
	for _, tc := range []struct {
		name      string
		network   string
		qname     string
		qtype     uint16
		qclass    uint16 // 0: IN
		rcode     int
		aa        bool
		answer    []string
		soaInAuth bool
	}{
		{"case does not matter", "udp", "FLEET.Mqtt.EXAMPLE.com.", dns.TypeA, 0, ok, true, []string{"A 192.0.2.1"}, false},
		{"over TCP", "tcp", "fleet." + zone + ".", dns.TypeA, 0, ok, true, []string{"A 192.0.2.1"}, false},
		{"ANY", "tcp", "fleet." + zone + ".", dns.TypeANY, 0, ok, true, []string{"A 192.0.2.1"}, false},
		{"other types: NODATA", "udp", "fleet." + zone + ".", dns.TypeTXT, 0, ok, true, nil, true},
		{"a tenant without a node: the fallback", "udp", "lonely." + zone + ".", dns.TypeA, 0, ok, true, []string{"CNAME lb.example.com."}, false},
		{"unknown slug", "udp", "nosuch." + zone + ".", dns.TypeA, 0, nx, true, nil, true},
		{"deeper name", "udp", "a.fleet." + zone + ".", dns.TypeA, 0, nx, true, nil, true},
		{"not a slug", "udp", "bad_slug." + zone + ".", dns.TypeA, 0, nx, true, nil, true},
		{"outside the zone", "udp", "fleet.example.org.", dns.TypeA, 0, refused, false, nil, false},
		{"a suffix that is not the zone", "udp", "fleetmqtt.example.com.", dns.TypeA, 0, refused, false, nil, false},
		{"class CHAOS", "udp", "fleet." + zone + ".", dns.TypeTXT, dns.ClassCHAOS, refused, false, nil, false},
		{"zone transfer", "tcp", zone + ".", dns.TypeAXFR, 0, refused, true, nil, false},
		{"apex SOA", "udp", zone + ".", dns.TypeSOA, 0, ok, true, []string{"SOA ns1.example.com. hostmaster.mqtt.example.com."}, false},
		{"apex NS", "udp", "MQTT.example.com.", dns.TypeNS, 0, ok, true, []string{"NS ns1.example.com.", "NS ns2.example.com."}, false},
		{"apex A: NODATA", "udp", zone + ".", dns.TypeA, 0, ok, true, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := question(tc.qname, tc.qtype)
			if tc.qclass != 0 {
				m.Question[0].Qclass = tc.qclass
			}
			r := ask(t, tc.network, addr, m)
			if r.Rcode != tc.rcode || r.Authoritative != tc.aa || !slices.Equal(answer(r), tc.answer) || soaAuthority(r) != tc.soaInAuth {
				t.Fatalf("rcode %s AA %v answer %q authority %v; want %s AA %v %q SOA %v",
					dns.RcodeToString[r.Rcode], r.Authoritative, answer(r), r.Ns, dns.RcodeToString[tc.rcode], tc.aa, tc.answer, tc.soaInAuth)
			}
			if len(r.Question) != 1 || r.Question[0].Name != tc.qname { // echoed as asked (0x20 case randomization)
				t.Fatalf("question %v, want %s", r.Question, tc.qname)
			}
			if r.IsEdns0() != nil {
				t.Fatal("OPT in a response to a query without one")
			}
		})
	}

	t.Run("opcode not QUERY: NOTIMP", func(t *testing.T) {
		m := question("fleet."+zone+".", dns.TypeA)
		m.Opcode = dns.OpcodeNotify
		if r := ask(t, "udp", addr, m); r.Rcode != dns.RcodeNotImplemented || r.Opcode != dns.OpcodeNotify {
			t.Fatalf("rcode %s opcode %d", dns.RcodeToString[r.Rcode], r.Opcode)
		}
	})
	t.Run("two questions: FORMERR", func(t *testing.T) {
		m := question("fleet."+zone+".", dns.TypeA)
		m.Question = append(m.Question, m.Question[0])
		if r := ask(t, "udp", addr, m); r.Rcode != dns.RcodeFormatError {
			t.Fatalf("rcode %s", dns.RcodeToString[r.Rcode])
		}
	})
	t.Run("EDNS echoed", func(t *testing.T) {
		m := question("fleet."+zone+".", dns.TypeA)
		m.SetEdns0(4096, true)
		r := ask(t, "udp", addr, m)
		opt := r.IsEdns0()
		if r.Rcode != ok || opt == nil || opt.UDPSize() != 1232 || opt.Version() != 0 || opt.Do() || len(opt.Option) != 0 {
			t.Fatalf("rcode %s OPT %v", dns.RcodeToString[r.Rcode], opt)
		}
	})
	t.Run("EDNS version 1: BADVERS", func(t *testing.T) {
		m := question("fleet."+zone+".", dns.TypeA)
		m.SetEdns0(1232, false)
		m.IsEdns0().SetVersion(1)
		r := ask(t, "udp", addr, m)
		if r.Rcode != dns.RcodeBadVers || r.IsEdns0() == nil || len(r.Answer) != 0 {
			t.Fatalf("rcode %d OPT %v answer %q", r.Rcode, r.IsEdns0(), answer(r))
		}
	})
	t.Run("errors answer an OPT with one", func(t *testing.T) { // RFC 6891 section 7
		notimp := question("fleet."+zone+".", dns.TypeA)
		notimp.Opcode = dns.OpcodeNotify
		twoQ := question("fleet."+zone+".", dns.TypeA)
		twoQ.Question = append(twoQ.Question, twoQ.Question[0])
		for _, c := range []struct {
			m     *dns.Msg
			rcode int
		}{{notimp, dns.RcodeNotImplemented}, {twoQ, dns.RcodeFormatError}} {
			c.m.SetEdns0(1232, false)
			r := ask(t, "udp", addr, c.m)
			if opt := r.IsEdns0(); r.Rcode != c.rcode || opt == nil || opt.Version() != 0 || opt.ExtendedRcode() != 0 {
				t.Errorf("%s: rcode %s OPT %v, want %s with an OPT", dns.OpcodeToString[c.m.Opcode], dns.RcodeToString[r.Rcode], opt, dns.RcodeToString[c.rcode])
			}
		}
	})
	t.Run("two OPT records: FORMERR", func(t *testing.T) {
		m := question("fleet."+zone+".", dns.TypeA)
		m.SetEdns0(1232, false)
		m.Extra = append(m.Extra, m.Extra[0])
		if r := ask(t, "udp", addr, m); r.Rcode != dns.RcodeFormatError {
			t.Fatalf("rcode %s", dns.RcodeToString[r.Rcode])
		}
	})
	t.Run("raw packets", func(t *testing.T) {
		c, err := net.Dial("udp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		// Unreadable (5 bytes) and a response (QR set): no answer. Then a
		// header promising a question that is not there: FORMERR. The
		// first reply read must be that last one's.
		c.Write([]byte{1, 2, 3, 4, 5})
		c.Write([]byte{0x00, 0x07, 0x80, 0, 0, 1, 0, 0, 0, 0, 0, 0})
		c.Write([]byte{0x12, 0x34, 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0})
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		var r dns.Msg
		if err := r.Unpack(buf[:n]); err != nil || r.Id != 0x1234 || r.Rcode != dns.RcodeFormatError || !r.Response {
			t.Fatalf("reply %v: id %#x rcode %s", err, r.Id, dns.RcodeToString[r.Rcode])
		}
	})
	t.Run("several queries on one TCP connection", func(t *testing.T) {
		c, err := dns.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		for i, name := range []string{"fleet.", "nosuch.", "lonely."} {
			m := question(name+zone+".", dns.TypeA)
			m.Id = uint16(100 + i)
			if err := c.WriteMsg(m); err != nil {
				t.Fatal(err)
			}
			r, err := c.ReadMsg()
			if err != nil || r.Id != m.Id {
				t.Fatalf("query %d: %v, id %v", i, err, r)
			}
		}
	})
}

// TestTruncation: an answer over 512 bytes (many name servers) is sent
// over UDP as the question alone with TC set; with EDNS 1232 or over TCP it
// is whole.
func TestTruncation(t *testing.T) {
	f := newFixture(t)
	cfg := testConfig()
	var ns []string
	for i := range 12 {
		ns = append(ns, fmt.Sprintf("ns%02d-%s.example%02d.net", i, strings.Repeat("x", 40), i))
	}
	cfg.NS = strings.Join(ns, ",")
	addr := f.serve(t, cfg)

	plain := question(zone+".", dns.TypeNS)
	r := ask(t, "udp", addr, plain)
	if !r.Truncated || len(r.Answer) != 0 || len(r.Question) != 1 || r.Rcode != dns.RcodeSuccess {
		t.Fatalf("UDP without EDNS: TC %v, %d answers", r.Truncated, len(r.Answer))
	}
	resp := f.responder(t, cfg)
	wire, err := plain.Pack()
	if err != nil {
		t.Fatal(err)
	}
	if out := resp.Answer(context.Background(), wire, false, make([]byte, 0, 512)); len(out) > 512 {
		t.Fatalf("UDP answer %d bytes without EDNS", len(out))
	}
	if out := resp.Answer(context.Background(), wire, true, nil); len(out) <= 512 {
		t.Fatalf("the TCP answer is %d bytes: the test does not need truncation", len(out))
	} else {
		t.Logf("whole answer %d bytes", len(out))
	}

	edns := question(zone+".", dns.TypeNS)
	edns.SetEdns0(1232, false)
	if r := ask(t, "udp", addr, edns); r.Truncated || len(r.Answer) != 12 {
		t.Fatalf("UDP with EDNS 1232: TC %v, %d answers", r.Truncated, len(r.Answer))
	}
	if r := ask(t, "tcp", addr, plain); r.Truncated || len(r.Answer) != 12 {
		t.Fatalf("TCP: TC %v, %d answers", r.Truncated, len(r.Answer))
	}
}

// TestShutdown: Shutdown closes idle TCP connections and returns.
func TestShutdown(t *testing.T) {
	f := newFixture(t)
	cfg := testConfig()
	s, err := Listen(cfg.Listen, f.responder(t, cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil || n != 0 || isTimeout(err) {
		t.Fatalf("idle TCP connection after Shutdown: %d, %v", n, err)
	}
	if _, err := net.Dial("tcp", s.Addr()); err == nil {
		t.Fatal("still accepting TCP after Shutdown")
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
