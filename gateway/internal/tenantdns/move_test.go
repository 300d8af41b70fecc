package tenantdns

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestAnswerFollowsLeader: a replicated tenant's name answers its leader's
// public host, an IP as A or AAAA, a name as a CNAME, none as the
// fallback; when the leader moves (tenant_placement updated as the nodes
// do, its trigger NOTIFYing berth_placement) the answer follows within
// the TTL; a hot tenant's queries run no SQL.
func TestAnswerFollowsLeader(t *testing.T) {
	f := newFixture(t)
	addr := f.serve(t, testConfig())
	name := "fleet." + zone + "."

	r := ask(t, "udp", addr, question(name, dns.TypeA))
	if got := answer(r); r.Rcode != dns.RcodeSuccess || !r.Authoritative || !slices.Equal(got, []string{"A 192.0.2.1"}) || r.Answer[0].Header().Ttl != 5 {
		t.Fatalf("fleet A: rcode %d AA %v %q", r.Rcode, r.Authoritative, got)
	}
	before := f.sql.n.Load()
	for range 200 {
		if got := answer(ask(t, "udp", addr, question(name, dns.TypeA))); !slices.Equal(got, []string{"A 192.0.2.1"}) {
			t.Fatalf("fleet A: %q", got)
		}
	}
	if n := f.sql.n.Load() - before; n != 0 {
		t.Fatalf("200 queries for a hot tenant ran %d SQL statements, want 0", n)
	}

	move := func(leader string, epoch int) time.Time {
		exec(t, f.pool, `UPDATE tenant_placement SET leader = $1, epoch = $2 WHERE tenant_id = 'ten_fleet' AND epoch < $2`, leader, epoch)
		return time.Now()
	}
	// follows polls until the answer to qtype is want, within the TTL.
	follows := func(moved time.Time, qtype uint16, want ...string) {
		t.Helper()
		for {
			r := ask(t, "udp", addr, question(name, qtype))
			if got := answer(r); r.Rcode == dns.RcodeSuccess && slices.Equal(got, want) {
				t.Logf("answer %q %v after the placement's UPDATE", want, time.Since(moved).Round(time.Millisecond))
				return
			} else if time.Since(moved) > 5*time.Second {
				t.Fatalf("still %q (rcode %d) 5 s (the TTL) after the move, want %q", got, r.Rcode, want)
			}
			time.Sleep(5 * time.Millisecond) // polling with a deadline
		}
	}

	follows(move("node_b", 2), dns.TypeA, "CNAME node-b.hosts.example.net.")
	if got := answer(ask(t, "tcp", addr, question(name, dns.TypeAAAA))); !slices.Equal(got, []string{"CNAME node-b.hosts.example.net."}) {
		t.Fatalf("fleet AAAA on a named host: %q", got)
	}

	follows(move("node_c", 3), dns.TypeAAAA, "AAAA 2001:db8::c")
	if r := ask(t, "udp", addr, question(name, dns.TypeA)); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 || !soaAuthority(r) {
		t.Fatalf("fleet A on an IPv6-only host: want NODATA with the SOA, got rcode %d %q, authority %v", r.Rcode, answer(r), r.Ns)
	}

	follows(move("node_d", 4), dns.TypeA, "CNAME lb.example.com.") // no public host: the fallback

	follows(move("node_a", 5), dns.TypeA, "A 192.0.2.1")
	// The standard library's resolver, pointed at the responder, agrees.
	res := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ips, err := res.LookupNetIP(ctx, "ip4", "Fleet."+zone)
	if err != nil || !slices.Equal(ips, []netip.Addr{netip.MustParseAddr("192.0.2.1")}) {
		t.Fatalf("net.Resolver: %v, %v", ips, err)
	}
	if _, err := res.LookupNetIP(ctx, "ip4", "nosuch."+zone); err == nil {
		t.Fatal("net.Resolver found an unknown tenant")
	} else if de, ok := err.(*net.DNSError); !ok || !de.IsNotFound {
		t.Fatalf("net.Resolver on an unknown tenant: %v, want not found", err)
	}
}
