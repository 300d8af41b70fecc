package tenantdns

import (
	"context"
	"testing"

	"github.com/miekg/dns"
)

// BenchmarkAnswerHotTenant: the packet handler's cost for a tenant whose
// route is cached (no Postgres), as a resolver hammering one name sees it.
func BenchmarkAnswerHotTenant(b *testing.B) {
	f := newFixture(b)
	resp := f.responder(b, testConfig())
	m := question("fleet."+zone+".", dns.TypeA)
	m.SetEdns0(1232, false)
	wire, err := m.Pack()
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, 512)
	if out := resp.Answer(context.Background(), wire, false, buf); len(out) == 0 {
		b.Fatal("no answer")
	}
	b.ReportAllocs()
	for b.Loop() {
		resp.Answer(context.Background(), wire, false, buf)
	}
}
