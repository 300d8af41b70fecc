package httpapi

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// clientAddr is the address the login limiter keys on. From a peer that is
// not a trusted proxy it is the peer itself: X-Forwarded-For is anyone's
// to write. From a trusted proxy it is the right-most X-Forwarded-For
// address that is not itself a trusted proxy (each proxy appends the
// address it saw, so everything left of that may be forged); when every
// listed address is trusted, the left-most one; when the header is
// missing or unparseable at that point, the peer.
func clientAddr(r *http.Request, trusted []netip.Prefix) string {
	peer := peerAddr(r.RemoteAddr)
	if !peer.IsValid() {
		return r.RemoteAddr
	}
	if !inPrefixes(peer, trusted) {
		return peer.String()
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	var last netip.Addr
	for i := len(hops) - 1; i >= 0; i-- {
		h := strings.TrimSpace(hops[i])
		if h == "" {
			continue
		}
		a := peerAddr(h)
		if !a.IsValid() {
			break // a proxy wrote garbage: trust nothing further left
		}
		if !inPrefixes(a, trusted) {
			return a.String()
		}
		last = a
	}
	if last.IsValid() {
		return last.String()
	}
	return peer.String()
}

// peerAddr parses "ip", "[ip]", "ip:port" or "[ip]:port", unmapping
// IPv4-in-IPv6.
func peerAddr(s string) netip.Addr {
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		s = s[1 : len(s)-1]
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone("")
	}
	host, _, err := net.SplitHostPort(s)
	if err != nil {
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap().WithZone("")
}

func inPrefixes(a netip.Addr, ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
