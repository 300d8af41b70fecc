package webhook

import (
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"syscall"
)

// notPublic lists the ranges a delivery never dials unless AllowPrivate:
// Berth's own networks and everything not routed on the public Internet
// (IANA's special-purpose registries, RFC 6890 and its updates).
var notPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("10.0.0.0/8"),      // private
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT (RFC 6598)
	netip.MustParsePrefix("127.0.0.0/8"),     // loopback
	netip.MustParsePrefix("169.254.0.0/16"),  // link-local, cloud metadata
	netip.MustParsePrefix("172.16.0.0/12"),   // private
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("192.168.0.0/16"),  // private
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("224.0.0.0/4"),     // multicast
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, broadcast
	netip.MustParsePrefix("::/96"),           // unspecified, loopback, IPv4-compatible
	netip.MustParsePrefix("64:ff9b::/96"),    // NAT64: an IPv4 address behind
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("100::/64"),        // discard
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("2002::/16"),       // 6to4: an IPv4 address behind
	netip.MustParsePrefix("fc00::/7"),        // unique local
	netip.MustParsePrefix("fe80::/10"),       // link-local
	netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated, still routed by some)
	netip.MustParsePrefix("ff00::/8"),        // multicast
}

// Public tells whether a delivery may dial a: not in any range of
// notPublic, an IPv4-mapped IPv6 address (::ffff:10.0.0.1) judged as its
// IPv4 address, and never an address with a zone.
func Public(a netip.Addr) bool {
	if !a.IsValid() || a.Zone() != "" {
		return false
	}
	a = a.Unmap()
	for _, p := range notPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// accountError is what the account is shown of a failed attempt
// (last_error): a fixed phrase per kind of failure, never an address the
// endpoint resolved to or the resolver asked. The error itself is logged.
func accountError(err error) string {
	var dns *net.DNSError
	var cert *tls.CertificateVerificationError
	var ne net.Error
	switch {
	case errors.Is(err, ErrPrivateAddress):
		return "address not allowed"
	case errors.Is(err, errBadURL):
		return "invalid URL"
	case errors.As(err, &dns):
		if dns.IsNotFound {
			return "host not found"
		}
		return "DNS lookup failed"
	case errors.As(err, &ne) && ne.Timeout():
		return "timed out"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.As(err, &cert):
		return "TLS certificate not trusted"
	}
	return "request failed"
}
