package tenantdns

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Config configures the responder. It is off unless Listen is set.
type Config struct {
	Listen string // UDP and TCP address; empty: off
	// Zone is the tenants' domain, the API's -domain: <slug>.<Zone> is a
	// tenant endpoint. Empty takes the gateway's -tenant-domain.
	Zone     string
	TTL      time.Duration // of every record; the SOA's negative TTL is min(TTL, 60 s)
	NS       string        // comma-separated names of the zone's responders (apex NS, SOA MNAME)
	Fallback string        // IP or name answered when the leader's node has no public host
	// ACMECNAME, when set, is answered as a CNAME for _acme-challenge.<Zone>
	// (any type): the DNS-01 challenge of the wildcard certificate
	// *.<Zone> is then solved in the zone it names (CNAME delegation).
	ACMECNAME string
}

// DefaultConfig: off, TTL 5 s.
func DefaultConfig() Config { return Config{TTL: 5 * time.Second} }

// RegisterFlags binds the -dns-* flags (environment BERTH_DNS_*).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "dns-listen", c.Listen, "authoritative DNS for the tenant endpoints <slug>.<zone>, UDP and TCP on this address, e.g. :53; each answers its tenant's leader's host (the node's -public-host); empty disables")
	fs.StringVar(&c.Zone, "dns-zone", c.Zone, "with -dns-listen: the zone served, the API's -domain (default -tenant-domain)")
	fs.DurationVar(&c.TTL, "dns-ttl", c.TTL, "with -dns-listen: TTL of the answers (cached NXDOMAINs: at most 60s): how long a resolver may keep a leader's host after it moved")
	fs.StringVar(&c.NS, "dns-ns", c.NS, "with -dns-listen: comma-separated host names of the zone's name servers (the names its delegation's NS records give), answered at the apex; outside the zone, which answers only tenant names")
	fs.StringVar(&c.Fallback, "dns-fallback", c.Fallback, "with -dns-listen: IP or host name answered for a tenant whose leader's node has no -public-host (or that has no node yet): the load balancer in front of the gateways; outside the zone")
	fs.StringVar(&c.ACMECNAME, "dns-acme-cname", c.ACMECNAME, "with -dns-listen: host name, outside the zone, answered as a CNAME for _acme-challenge.<zone>, so that the DNS-01 challenge of the wildcard certificate *.<zone> is solved in the zone it names (e.g. cert-manager's CNAME delegation); empty: NXDOMAIN")
}

// Validate checks c; tenantDomain is the gateway's -tenant-domain, taken
// as the zone when Zone is empty.
func (c *Config) Validate(tenantDomain string) error {
	if c.Listen == "" {
		return nil
	}
	if c.Zone == "" {
		c.Zone = tenantDomain
	}
	var errs []error
	if c.Zone == "" {
		errs = append(errs, errors.New("-dns-listen needs -dns-zone (or -tenant-domain)"))
	} else if !validHostName(c.Zone) {
		errs = append(errs, fmt.Errorf("-dns-zone %q is not a domain name", c.Zone))
	}
	if c.TTL < time.Second || c.TTL > 24*time.Hour {
		errs = append(errs, fmt.Errorf("-dns-ttl %v: want 1s to 24h", c.TTL))
	}
	ns := c.nameServers()
	if len(ns) == 0 {
		errs = append(errs, errors.New("-dns-listen needs -dns-ns"))
	}
	// The zone answers only <slug>.<zone>: a name server, fallback or
	// ACME target inside it would be a tenant's name (or none), and a
	// name server there would need glue the responder does not serve.
	inZone := func(flag, h string) {
		if c.Zone != "" && inside(h, c.Zone) {
			errs = append(errs, fmt.Errorf("%s %q lies inside the zone %s, which answers only tenant names: use a name outside it", flag, h, c.Zone))
		}
	}
	for _, n := range ns {
		if !validHostName(n) {
			errs = append(errs, fmt.Errorf("-dns-ns %q is not a host name", n))
		}
		inZone("-dns-ns", n)
	}
	if _, err := netip.ParseAddr(c.Fallback); err != nil {
		if !validHostName(c.Fallback) {
			errs = append(errs, fmt.Errorf("-dns-listen needs -dns-fallback, an IP or a host name (got %q)", c.Fallback))
		}
		inZone("-dns-fallback", c.Fallback)
	}
	if c.ACMECNAME != "" {
		if !validHostName(c.ACMECNAME) {
			errs = append(errs, fmt.Errorf("-dns-acme-cname %q is not a host name", c.ACMECNAME))
		}
		inZone("-dns-acme-cname", c.ACMECNAME)
	}
	return errors.Join(errs...)
}

// inside tells whether host name h is zone or a name under it.
func inside(h, zone string) bool {
	h, zone = canonical(h), canonical(zone)
	return h == zone || strings.HasSuffix(h, "."+zone)
}

func (c *Config) nameServers() []string {
	var ns []string
	for n := range strings.SplitSeq(c.NS, ",") {
		if n = strings.TrimSpace(n); n != "" {
			ns = append(ns, n)
		}
	}
	return ns
}

// validHostName tells whether h is a DNS host name: labels of letters,
// digits and hyphens, 1 to 63 long, not starting or ending with a hyphen,
// at most 253 in all; a trailing dot allowed.
func validHostName(h string) bool {
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if !validLabel(label) {
			return false
		}
	}
	return true
}

func validLabel(l string) bool {
	if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for i := 0; i < len(l); i++ {
		b := l[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '-') {
			return false
		}
	}
	return true
}

// canonical is h in lower case with one trailing dot, as names are compared.
func canonical(h string) string { return strings.ToLower(strings.TrimSuffix(h, ".")) + "." }
