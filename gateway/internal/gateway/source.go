package gateway

import (
	"net"
	"net/netip"
)

// A source is what the per-source limits count: the per-IP connect rate
// (ratelimit.go), the cap of pending connections (pending.go) and the
// kernel SYN filter (package synfilter, which builds the same key in its
// eBPF program). It is an IPv4 address, or the /64 prefix of an IPv6
// address: one host usually holds a whole /64 and may pick any address in
// it, so a count per IPv6 address would be no limit at all.

// sourceOf is the source of addr; invalid when addr is not an IP address.
func sourceOf(addr net.Addr) netip.Prefix { return sourceKey(addrPort(addr).Addr()) }

// sourceKey is the source of ip: the IPv4 address (/32, IPv4-mapped IPv6
// included) or the IPv6 /64, without a zone; invalid when ip is.
func sourceKey(ip netip.Addr) netip.Prefix {
	if !ip.IsValid() {
		return netip.Prefix{}
	}
	ip = ip.Unmap()
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, _ := ip.WithZone("").Prefix(bits)
	return p
}
