package gateway

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/gateway/internal/proxyheader"
)

// Devices behind a load balancer that speaks the PROXY protocol
// (-proxy-protocol-from). A connection from a listed balancer must start
// with a header (package proxyheader) naming the device; the global
// accept rate applies at accept, as to any connection, but the per-IP rate
// and the pending cap wait for the header and count the device, not the
// balancer. Until then the connection holds one of
// -proxy-protocol-max-waiting places (headerWaits), the balancers' own
// pending cap: over it, it is reset at accept. The device's address is then the one logged and the one
// signed into the node's PROXY header. A connection from anywhere else is
// served as before: a header it sends is read as MQTT (or TLS) and
// refused.

// balancers are the sources trusted to send a PROXY header.
type balancers []netip.Prefix

// parseTrusted parses -proxy-protocol-from: CIDRs or bare addresses,
// comma separated; empty is none.
func parseTrusted(s string) (balancers, error) {
	var b balancers
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			a, aerr := netip.ParseAddr(f)
			if aerr != nil {
				return nil, fmt.Errorf("%q is neither a CIDR nor an address", f)
			}
			if a.Zone() != "" {
				return nil, fmt.Errorf("%q: zones are not allowed", f)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if a := p.Addr(); a.Is4In6() { // sources are compared unmapped (addrPort)
			if p.Bits() < 96 {
				return nil, fmt.Errorf("%q: an IPv4-mapped prefix shorter than /96", f)
			}
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		b = append(b, p.Masked())
	}
	return b, nil
}

// has reports whether a is a balancer's address.
func (b balancers) has(a net.Addr) bool {
	if len(b) == 0 {
		return false
	}
	ip := addrPort(a).Addr()
	for _, p := range b {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// proxyRefusedMetric counts balancer connections closed for their header.
func proxyRefusedMetric(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_gateway_proxy_header_refused_total",
		Help: "Connections from a -proxy-protocol-from balancer closed because their PROXY header was invalid or did not arrive within -proxy-protocol-timeout.",
	}, []string{"reason"})
	reg.MustRegister(c)
	return c
}

// headerWaits caps the balancers' connections waiting for their PROXY
// header, on every listener together. The per-source limits cannot count
// them (the source is not known yet) and the global accept rate alone
// would let rate × -proxy-protocol-timeout goroutines wait (10,000 at the
// defaults).
type headerWaits struct {
	max   int64
	n     atomic.Int64
	gauge prometheus.Gauge
}

func newHeaderWaits(max int, reg prometheus.Registerer) *headerWaits {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "berth_gateway_proxy_header_waiting",
		Help: "Connections from -proxy-protocol-from balancers whose PROXY header has not arrived yet (capped by -proxy-protocol-max-waiting).",
	})
	reg.MustRegister(g)
	return &headerWaits{max: int64(max), gauge: g}
}

// acquire takes a place; false when all are taken.
func (w *headerWaits) acquire() bool {
	if w.n.Add(1) > w.max {
		w.n.Add(-1)
		return false
	}
	w.gauge.Inc()
	return true
}

// release gives back a place acquire took.
func (w *headerWaits) release() {
	w.n.Add(-1)
	w.gauge.Dec()
}

// admitBalancer applies to c, a balancer's connection just accepted at
// start, the global accept rate and the cap of connections waiting for
// their header, resetting c when over either. Admitted, c holds a waiting
// place until fromBalancer returns (or the caller gives it back).
func (g *Gateway) admitBalancer(c net.Conn, start time.Time) bool {
	if !g.admitGlobal(c, start) {
		return false
	}
	if !g.waits.acquire() {
		g.m.rateLimited.WithLabelValues("proxy_header").Inc()
		reset(c)
		return false
	}
	return true
}

// fromBalancer reads the PROXY header that c, a balancer's connection
// accepted at start, begins with, and returns the device's address: the
// header's source, or c's own when the header names none (the balancer's
// own connection, such as a health check). False when there is no valid
// header within -proxy-protocol-timeout (or the connect timeout, if
// shorter): the caller closes c. Either way it gives back c's waiting
// place (admitBalancer).
func (g *Gateway) fromBalancer(c net.Conn, start time.Time) (net.Addr, bool) {
	defer g.waits.release()
	c.SetReadDeadline(start.Add(min(g.cfg.ProxyProtocolTimeout, g.cfg.ConnectTimeout)))
	h, err := proxyheader.Read(c)
	if err != nil {
		reason := "invalid"
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
			return nil, false // closed before a byte (a TCP health check), or by Shutdown
		case errors.Is(err, os.ErrDeadlineExceeded):
			reason = "timeout"
		}
		g.proxyRefused.WithLabelValues(reason).Inc()
		if now := time.Now(); g.refuseLog.allow(now) {
			g.log.Info("balancer connection closed: no valid PROXY header", "balancer", c.RemoteAddr().String(), "reason", reason, "err", err)
		}
		return nil, false
	}
	c.SetReadDeadline(time.Time{})
	if h.Local {
		return c.RemoteAddr(), true
	}
	return net.TCPAddrFromAddrPort(netip.AddrPortFrom(h.Source.Addr().Unmap(), h.Source.Port())), true
}

// acceptFromBalancer serves c, accepted at start from a balancer on the
// TCP or TLS listener: the global accept rate and the cap of waiting
// headers now, the per-source limits once its header has named the
// device, in c's own goroutine.
func (g *Gateway) acceptFromBalancer(c net.Conn, tlsConf *tls.Config, start time.Time) {
	g.viaBalancer(c, start, func(s *session, from net.Addr, pend *pendingSlot) {
		s.remote = from
		g.serve(s, c, tlsConf, start, pend)
	})
}

// viaBalancer admits c, accepted at start from a listed balancer, under
// the global accept rate and the cap of waiting headers, tracks it, and in
// c's own goroutine reads its header and admits the device it names under
// the per-source limits, then calls then; c is closed on every refusal.
// The tracking ends when then returns.
func (g *Gateway) viaBalancer(c net.Conn, start time.Time, then func(s *session, from net.Addr, pend *pendingSlot)) {
	if !g.admitBalancer(c, start) {
		return
	}
	s := &session{client: c}
	if !g.track(s) {
		g.waits.release()
		c.Close()
		return
	}
	go func() {
		defer g.untrack(s)
		from, ok := g.fromBalancer(c, start)
		if !ok {
			c.Close()
			return
		}
		pend, ok := g.admitSource(c, from, time.Now())
		if !ok {
			return
		}
		then(s, from, pend)
	}()
}

// balancedConn is a balancer's connection to a WebSocket listener, which
// reports the device's address as its remote one (for http.Server, the
// WebSocket layer and handle). TCP and TLS connections are not wrapped
// (session.remote carries it): the relay splices the bare *net.TCPConn.
type balancedConn struct {
	net.Conn
	remote net.Addr
}

func (c *balancedConn) RemoteAddr() net.Addr { return c.remote }

// balancerListener is limitedListener for the WebSocket listeners when
// -proxy-protocol-from is set. http.Server accepts in one loop, so a
// balancer's connection cannot wait there for its header: run accepts,
// admits the others at once as limitedListener does, and reads each
// balancer connection's header in a goroutine of its own (a session, so
// Shutdown waits for it or closes it), which hands the connection to
// Accept once admitted.
type balancerListener struct {
	net.Listener
	g     *Gateway
	ready chan accepted
	done  chan struct{} // closed by Close
	once  sync.Once
}

type accepted struct {
	c   net.Conn
	err error
}

func newBalancerListener(ln net.Listener, g *Gateway) *balancerListener {
	return &balancerListener{Listener: ln, g: g, ready: make(chan accepted), done: make(chan struct{})}
}

// Accept returns the next admitted connection, or the listener's error.
func (l *balancerListener) Accept() (net.Conn, error) {
	select {
	case a := <-l.ready:
		return a.c, a.err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept and the listener under it.
func (l *balancerListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// hand gives c to Accept, or closes it when the listener is closed.
func (l *balancerListener) hand(a accepted) {
	select {
	case l.ready <- a:
	case <-l.done:
		if a.c != nil {
			a.c.Close()
		}
	}
}

// run accepts until the listener is closed; the Gateway's loops own it.
func (l *balancerListener) run() {
	g := l.g
	for {
		c, err := l.Listener.Accept()
		if errors.Is(err, net.ErrClosed) {
			l.once.Do(func() { close(l.done) })
			return
		}
		if err != nil {
			l.hand(accepted{err: err}) // http.Server backs off on temporary errors
			continue
		}
		start := time.Now()
		if !g.balancers.has(c.RemoteAddr()) {
			if slot, ok := g.admit(c); ok {
				l.hand(accepted{c: withSlot(c, slot)})
			}
			continue
		}
		// Once handed over, http.Server owns c and serveWS tracks it.
		g.viaBalancer(c, start, func(_ *session, from net.Addr, slot *pendingSlot) {
			l.hand(accepted{c: withSlot(&balancedConn{Conn: c, remote: from}, slot)})
		})
	}
}

// withSlot wraps c so that closing it gives its pending slot back.
func withSlot(c net.Conn, slot *pendingSlot) net.Conn {
	if slot == nil {
		return c
	}
	return &pendingConn{Conn: c, slot: slot}
}
