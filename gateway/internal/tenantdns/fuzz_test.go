package tenantdns

import (
	"context"
	"testing"

	"github.com/miekg/dns"
	"golang.org/x/net/dns/dnsmessage"
)

// FuzzServeDNS feeds the packet handler arbitrary bytes, as UDP or TCP,
// against a real route table. It must not panic, and whatever it answers
// must be a well-formed response to that query: the query's id, QR set,
// readable by both dnsmessage and miekg/dns, at most 512 bytes over UDP
// without an OPT in the response (one is sent only when the query had
// one) and at most 1232 with one.
func FuzzServeDNS(f *testing.F) {
	seed := func(m *dns.Msg) {
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false)
		f.Add(b, true)
	}
	for _, q := range []struct {
		name  string
		qtype uint16
	}{
		{"fleet." + zone + ".", dns.TypeA}, {"FLEET." + zone + ".", dns.TypeAAAA}, {"lonely." + zone + ".", dns.TypeANY},
		{"nosuch." + zone + ".", dns.TypeA}, {"a.b." + zone + ".", dns.TypeA}, {zone + ".", dns.TypeNS},
		{zone + ".", dns.TypeSOA}, {"example.org.", dns.TypeA},
	} {
		m := question(q.name, q.qtype)
		seed(m)
		m.SetEdns0(4096, false)
		seed(m)
	}
	notify := question("fleet."+zone+".", dns.TypeA)
	notify.Opcode = dns.OpcodeNotify
	seed(notify)
	f.Add([]byte{0x12, 0x34, 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0}, false)
	f.Add([]byte{1, 2, 3}, false)

	fx := newFixture(f)
	resp := fx.responder(f, testConfig())
	f.Fuzz(func(t *testing.T, msg []byte, tcp bool) {
		out := resp.Answer(context.Background(), msg, tcp, make([]byte, 0, 512))
		if out == nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(out)
		if err != nil || !h.Response {
			t.Fatalf("response header %+v, %v", h, err)
		}
		if id := uint16(msg[0])<<8 | uint16(msg[1]); h.ID != id {
			t.Fatalf("response id %d, query's %d", h.ID, id)
		}
		var m dns.Msg
		if err := m.Unpack(out); err != nil {
			t.Fatalf("miekg/dns cannot read the response: %v (% x)", err, out)
		}
		if !tcp {
			if limit := 512; m.IsEdns0() != nil {
				limit = 1232
				if len(out) > limit {
					t.Fatalf("UDP response %d bytes with EDNS", len(out))
				}
			} else if len(out) > limit {
				t.Fatalf("UDP response %d bytes without EDNS", len(out))
			}
		}
	})
}
