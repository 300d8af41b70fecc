package gateway

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// pendingIPs caps the unauthenticated connections of each source: a
// connection is pending from accept until its CONNECT is verified and
// written to the tenant's node (or until it closes, whichever is first).
// Sources are those of source.go: an IPv4 address or an IPv6 /64.
// Entries go when their count reaches zero, so the table is never larger
// than the number of pending connections.
type pendingIPs struct {
	max   int
	gauge prometheus.Gauge // pending connections, all sources

	mu sync.Mutex
	n  map[netip.Prefix]int
}

func newPendingIPs(max int, gauge prometheus.Gauge) *pendingIPs {
	return &pendingIPs{max: max, gauge: gauge, n: map[netip.Prefix]int{}}
}

// acquire counts a new pending connection from addr. It returns false
// (and counts nothing) when addr's source already has max pending. A
// connection whose address is not IP is not capped (a nil slot).
func (p *pendingIPs) acquire(addr net.Addr) (*pendingSlot, netip.Prefix, bool) {
	src := sourceOf(addr)
	if !src.IsValid() {
		return nil, src, true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n[src] >= p.max {
		return nil, src, false
	}
	p.n[src]++
	p.gauge.Inc()
	return &pendingSlot{p: p, src: src}, src, true
}

// pending returns how many connections of addr's source are pending.
func (p *pendingIPs) pending(addr net.Addr) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[sourceOf(addr)]
}

// pendingSlot is one pending connection's place in its source's count.
type pendingSlot struct {
	p        *pendingIPs
	src      netip.Prefix
	released atomic.Bool
}

// release gives the slot back. It is idempotent and safe on a nil slot, so
// every path (proxied, refused, timed out, closed) may call it.
func (s *pendingSlot) release() {
	if s == nil || !s.released.CompareAndSwap(false, true) {
		return
	}
	p := s.p
	p.mu.Lock()
	if p.n[s.src] <= 1 {
		delete(p.n, s.src)
	} else {
		p.n[s.src]--
	}
	p.mu.Unlock()
	p.gauge.Dec()
}

// pendingConn is a connection handed to http.Server (WebSocket listeners)
// that gives its pending slot back when it closes; serveWS gives it back
// sooner, once the CONNECT is relayed. (TCP and TLS connections are not
// wrapped: the relay needs the bare *net.TCPConn to splice.)
type pendingConn struct {
	net.Conn
	slot *pendingSlot
}

func (c *pendingConn) Close() error {
	c.slot.release()
	return c.Conn.Close()
}

// pendingSlotOf finds the pending slot of a connection accepted by a
// limitedListener: c itself, or the connection under its TLS layer.
func pendingSlotOf(c net.Conn) *pendingSlot {
	for {
		switch v := c.(type) {
		case *pendingConn:
			return v.slot
		case interface{ NetConn() net.Conn }: // *tls.Conn
			c = v.NetConn()
		default:
			return nil
		}
	}
}
