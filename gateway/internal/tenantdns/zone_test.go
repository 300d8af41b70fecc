package tenantdns

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestNegativeTTLCapped: with a long -dns-ttl, answers keep it but an
// NXDOMAIN or NODATA is cacheable for 60 s at most (the SOA's MINIMUM and
// its TTL in the authority section, RFC 2308 section 3), so a tenant
// created under a name probed before is reachable within a minute.
func TestNegativeTTLCapped(t *testing.T) {
	f := newFixture(t)
	cfg := testConfig()
	cfg.TTL = time.Hour
	addr := f.serve(t, cfg)

	if r := ask(t, "udp", addr, question("fleet."+zone+".", dns.TypeA)); len(r.Answer) != 1 || r.Answer[0].Header().Ttl != 3600 {
		t.Fatalf("fleet A: %v, want TTL 3600", r.Answer)
	}
	for _, q := range []*dns.Msg{question("nosuch."+zone+".", dns.TypeA), question("fleet."+zone+".", dns.TypeTXT)} {
		r := ask(t, "udp", addr, q)
		if len(r.Ns) != 1 {
			t.Fatalf("%s: authority %v, want the SOA", q.Question[0].String(), r.Ns)
		}
		soa, ok := r.Ns[0].(*dns.SOA)
		if !ok || soa.Minttl != 60 || soa.Hdr.Ttl != 60 {
			t.Fatalf("%s: authority %v, want the SOA with MINIMUM and TTL 60", q.Question[0].String(), r.Ns[0])
		}
	}
	r := ask(t, "udp", addr, question(zone+".", dns.TypeSOA))
	if len(r.Answer) != 1 || r.Answer[0].Header().Ttl != 3600 || r.Answer[0].(*dns.SOA).Minttl != 60 {
		t.Fatalf("apex SOA: %v, want TTL 3600 and MINIMUM 60", r.Answer)
	}
}

// TestACMEChallenge: with -dns-acme-cname, _acme-challenge.<zone> is a
// CNAME to it for any type (a DNS-01 solver's TXT query follows it);
// without, NXDOMAIN like any name that is no slug.
func TestACMEChallenge(t *testing.T) {
	f := newFixture(t)
	cfg := testConfig()
	cfg.ACMECNAME = "mqtt.acme.example.net"
	addr := f.serve(t, cfg)
	for _, qt := range []uint16{dns.TypeTXT, dns.TypeA, dns.TypeCNAME} {
		r := ask(t, "udp", addr, question("_ACME-challenge."+zone+".", qt))
		if got := answer(r); r.Rcode != dns.RcodeSuccess || !r.Authoritative || !slices.Equal(got, []string{"CNAME mqtt.acme.example.net."}) {
			t.Fatalf("%s: rcode %s AA %v %q", dns.TypeToString[qt], dns.RcodeToString[r.Rcode], r.Authoritative, got)
		}
	}
	if r := ask(t, "udp", addr, question("x._acme-challenge."+zone+".", dns.TypeTXT)); r.Rcode != dns.RcodeNameError {
		t.Fatalf("below the challenge name: %s, want NXDOMAIN", dns.RcodeToString[r.Rcode])
	}

	plain := f.serve(t, testConfig())
	if r := ask(t, "udp", plain, question("_acme-challenge."+zone+".", dns.TypeTXT)); r.Rcode != dns.RcodeNameError {
		t.Fatalf("without -dns-acme-cname: %s, want NXDOMAIN", dns.RcodeToString[r.Rcode])
	}
}

// TestValidate: the names the zone's delegation and answers point at must
// lie outside the zone, which answers only <slug>.<zone>: a name server
// there would be a tenant's name (and need glue the responder does not
// serve), as would the fallback or the ACME target.
func TestValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string // "" valid
	}{
		{"valid", func(*Config) {}, ""},
		{"fallback an IP", func(c *Config) { c.Fallback = "192.0.2.9" }, ""},
		{"ACME target outside", func(c *Config) { c.ACMECNAME = "acme.example.net." }, ""},
		{"a name server in the zone", func(c *Config) { c.NS = "ns1.example.com,NS2." + strings.ToUpper(zone) + "." }, `-dns-ns "NS2.MQTT.EXAMPLE.COM." lies inside the zone`},
		{"the apex as name server", func(c *Config) { c.NS = zone }, `-dns-ns "mqtt.example.com" lies inside the zone`},
		{"fallback in the zone", func(c *Config) { c.Fallback = "lb." + zone }, `-dns-fallback "lb.mqtt.example.com" lies inside the zone`},
		{"ACME target in the zone", func(c *Config) { c.ACMECNAME = "acme." + zone }, `-dns-acme-cname "acme.mqtt.example.com" lies inside the zone`},
		{"ACME target no host name", func(c *Config) { c.ACMECNAME = "acme_x.example.net" }, `-dns-acme-cname "acme_x.example.net" is not a host name`},
		{"a suffix is not the zone", func(c *Config) { c.NS = "ns1.x" + zone }, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig()
			c.edit(&cfg)
			err := cfg.Validate("")
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("Validate: %v, want %q", err, c.want)
			}
		})
	}
}
