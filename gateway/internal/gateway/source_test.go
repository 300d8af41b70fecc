package gateway

import (
	"net/netip"
	"testing"
	"time"
)

// TestPerIPRateBySource: the per-IP connect rate counts a source as the
// pending cap and the kernel SYN filter do: an IPv6 host rotating its
// addresses inside one /64 spends one bucket, another /64 has its own,
// and each IPv4 address (mapped or not) is its own source.
func TestPerIPRateBySource(t *testing.T) {
	a := newAdmission(&Config{PerIPRate: 0.001, PerIPBurst: 2, AcceptRate: 1, AcceptBurst: 1})
	now := time.Now()
	steps := []struct {
		addr string
		want bool
	}{
		{"2001:db8:1:2::1", true},
		{"2001:db8:1:2:ffff:ffff:ffff:fffe", true}, // the /64's burst of 2 is spent
		{"2001:db8:1:2::3", false},
		{"2001:db8:1:2:aaaa::1", false},
		{"2001:db8:1:3::1", true}, // the next /64
		{"fe80::1%eth0", true},
		{"fe80::2%eth1", true}, // one /64, whatever the zone
		{"fe80::3", false},
		{"192.0.2.1", true},
		{"::ffff:192.0.2.1", true}, // the same IPv4 source
		{"192.0.2.1", false},
		{"192.0.2.2", true}, // IPv4 addresses are apart
	}
	for _, s := range steps {
		if got, _ := a.allowIP(netip.MustParseAddr(s.addr), now); got != s.want {
			t.Errorf("allowIP(%s) = %v, want %v", s.addr, got, s.want)
		}
	}
	if got, _ := a.allowIP(netip.Addr{}, now); !got {
		t.Error("a connection without an IP address was limited")
	}
	if n := len(a.ips); n != 5 {
		t.Errorf("%d buckets, want 5 (two /64s, fe80::/64, two IPv4 addresses)", n)
	}
}

// TestPerIPRateAllocs pins the per-accept cost of the per-IP rate: a
// known source's check allocates nothing.
func TestPerIPRateAllocs(t *testing.T) {
	a := newAdmission(&Config{PerIPRate: 1e9, PerIPBurst: 1e9, AcceptRate: 1, AcceptBurst: 1})
	ip6, ip4 := netip.MustParseAddr("2001:db8:1:2::1"), netip.MustParseAddr("192.0.2.1")
	now := time.Now()
	a.allowIP(ip6, now)
	a.allowIP(ip4, now)
	if n := testing.AllocsPerRun(1000, func() { a.allowIP(ip6, now); a.allowIP(ip4, now) }); n != 0 {
		t.Fatalf("%v allocations per check, want 0", n)
	}
}
