package httpapi

import (
	"net/http/httptest"
	"net/netip"
	"testing"
)

func TestClientAddr(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	for _, c := range []struct {
		name, peer string
		xff        []string
		trusted    []netip.Prefix
		want       string
	}{
		{"no proxies: the peer", "203.0.113.9:5000", []string{"198.51.100.1"}, nil, "203.0.113.9"},
		{"untrusted peer: header ignored", "203.0.113.9:5000", []string{"198.51.100.1"}, trusted, "203.0.113.9"},
		{"trusted peer: its client", "10.0.0.2:5000", []string{"198.51.100.1"}, trusted, "198.51.100.1"},
		{"forged left part skipped", "10.0.0.2:5000", []string{"1.2.3.4, 198.51.100.1"}, trusted, "198.51.100.1"},
		{"trusted hops skipped", "10.0.0.2:5000", []string{"1.2.3.4, 198.51.100.1, 10.9.9.9"}, trusted, "198.51.100.1"},
		{"several header lines", "10.0.0.2:5000", []string{"1.2.3.4", "198.51.100.1, 10.9.9.9"}, trusted, "198.51.100.1"},
		{"all trusted: the left-most", "10.0.0.2:5000", []string{"10.1.1.1, 10.2.2.2"}, trusted, "10.1.1.1"},
		{"no header: the proxy", "10.0.0.2:5000", nil, trusted, "10.0.0.2"},
		{"garbage stops the walk", "10.0.0.2:5000", []string{"198.51.100.1, nonsense"}, trusted, "10.0.0.2"},
		{"IPv6 peer and client", "[fd00::1]:5000", []string{"[2001:db8::7]"}, trusted, "2001:db8::7"},
		{"IPv4-mapped peer", "[::ffff:10.0.0.2]:5000", []string{"198.51.100.1:4711"}, trusted, "198.51.100.1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/v1/login", nil)
			r.RemoteAddr = c.peer
			for _, v := range c.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if got := clientAddr(r, c.trusted); got != c.want {
				t.Fatalf("clientAddr = %q, want %q", got, c.want)
			}
		})
	}
}
