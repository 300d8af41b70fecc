package gateway

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxTrackedIPs bounds the per-IP limiter table; past it, idle entries are
// swept, and if none are idle the new IP shares the global limit only.
const maxTrackedIPs = 100_000

// admission applies the global accept rate and the per-IP connect rate,
// which counts per source (source.go: an IPv4 address or an IPv6 /64, as
// the pending cap and the kernel SYN filter count). It runs right after
// accept, before any TLS or MQTT work.
type admission struct {
	global *rate.Limiter
	perIP  rate.Limit
	burst  int
	// A source's failed CONNECTs (cooldown.go) fill a bucket of failRate
	// and failBurst; over it, the source is refused for cooldown.
	failRate  rate.Limit
	failBurst int
	cooldown  time.Duration

	mu  sync.Mutex
	ips map[netip.Prefix]*ipLimiter
}

type ipLimiter struct {
	lim   *rate.Limiter
	seen  time.Time
	fails *rate.Limiter // nil until the source's first failed CONNECT
	until time.Time     // in cool-down before this
	// cooled: a cool-down began since the rate limiter last took from
	// it; its bucket is emptied at the next attempt after it.
	cooled bool
}

func newAdmission(cfg *Config) *admission {
	return &admission{
		global:    rate.NewLimiter(rate.Limit(cfg.AcceptRate), cfg.AcceptBurst),
		perIP:     rate.Limit(cfg.PerIPRate),
		burst:     cfg.PerIPBurst,
		failRate:  rate.Limit(cfg.PerIPRate / 4),
		failBurst: max(cfg.PerIPBurst/4, 1),
		cooldown:  cfg.FloodCooldown,
		ips:       map[netip.Prefix]*ipLimiter{},
	}
}

// allowGlobal reports whether the whole gateway may take a new
// connection now.
func (a *admission) allowGlobal(now time.Time) bool { return a.global.AllowN(now, 1) }

// allowIP reports whether a new connection from ip is within the rate of
// its source (sourceKey), and the source not in cool-down (cooling):
// addresses of one IPv6 /64 share a bucket. An invalid ip (not an IP
// connection) is not limited.
func (a *admission) allowIP(ip netip.Addr, now time.Time) (ok, cooling bool) {
	src := sourceKey(ip)
	if !src.IsValid() {
		return true, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.limiterLocked(src, now)
	l.seen = now
	if now.Before(l.until) {
		return false, true
	}
	if l.cooled { // after a cool-down: the rate, not a fresh burst
		l.cooled = false
		if n := int(l.lim.TokensAt(now)); n > 0 {
			l.lim.AllowN(now, n)
		}
	}
	return l.lim.AllowN(now, 1), false
}

// limiterLocked is src's entry, made when new: past maxTrackedIPs an
// untracked one, so the source shares the global limit only.
func (a *admission) limiterLocked(src netip.Prefix, now time.Time) *ipLimiter {
	if l, ok := a.ips[src]; ok {
		return l
	}
	if len(a.ips) >= maxTrackedIPs {
		a.sweepLocked(now)
	}
	l := &ipLimiter{lim: rate.NewLimiter(a.perIP, a.burst)}
	if len(a.ips) < maxTrackedIPs {
		a.ips[src] = l
	}
	return l
}

// failed counts a CONNECT of src refused for the client's own fault and
// reports whether it put src in cool-down: its failures outran failRate
// past failBurst. Off (false) when cooldown is 0.
func (a *admission) failed(src netip.Prefix, now time.Time) bool {
	if a.cooldown <= 0 || !src.IsValid() {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.limiterLocked(src, now)
	l.seen = now
	if l.fails == nil {
		l.fails = rate.NewLimiter(a.failRate, a.failBurst)
	}
	if now.Before(l.until) || l.fails.AllowN(now, 1) {
		return false
	}
	l.until, l.cooled = now.Add(a.cooldown), true
	l.fails = rate.NewLimiter(a.failRate, a.failBurst) // a fresh count after the cool-down
	return true
}

// sweepLocked drops limiters idle long enough to have refilled their
// burst, and out of cool-down.
func (a *admission) sweepLocked(now time.Time) {
	idle := time.Duration(float64(a.burst)/float64(a.perIP)*float64(time.Second)) + time.Second
	for src, l := range a.ips {
		if now.Sub(l.seen) > idle && !now.Before(l.until) {
			delete(a.ips, src)
		}
	}
}

// Log lines about refusals, which can come in floods (quietLog): one line
// per pendLogEvery about connections refused over MaxPendingPerIP, and the
// first refuseLogBurst refused CONNECTs per refuseLogEvery; then a summary
// line with the count not logged.
const (
	pendLogEvery   = 10 * time.Second
	refuseLogEvery = 10 * time.Second
	refuseLogBurst = 50
)

// admit applies the accept-time rate limits and the cap of pending
// connections per source; a refused conn is reset before anything is
// read from it. An admitted conn holds a pending slot (nil when its
// address is not IP) that its handler releases.
func (g *Gateway) admit(c net.Conn) (*pendingSlot, bool) {
	now := time.Now()
	if !g.admitGlobal(c, now) {
		return nil, false
	}
	return g.admitSource(c, c.RemoteAddr(), now)
}

// admitGlobal applies the whole gateway's accept rate to c, resetting it
// when over.
func (g *Gateway) admitGlobal(c net.Conn, now time.Time) bool {
	if !g.adm.allowGlobal(now) {
		g.m.rateLimited.WithLabelValues("global").Inc()
		reset(c)
		return false
	}
	return true
}

// admitSource applies the per-source rate and pending cap to c, whose
// source is from: c's own address, or the device's that a balancer's
// PROXY header named (balancer.go).
func (g *Gateway) admitSource(c net.Conn, from net.Addr, now time.Time) (*pendingSlot, bool) {
	if ok, cooling := g.adm.allowIP(addrPort(from).Addr(), now); !ok {
		scope := "ip"
		if cooling {
			scope = "cooldown"
		}
		g.m.rateLimited.WithLabelValues(scope).Inc()
		reset(c)
		return nil, false
	}
	slot, src, ok := g.pend.acquire(from)
	if !ok {
		g.m.rateLimited.WithLabelValues("pending").Inc()
		reset(c)
		if g.pendLog.allow(now) {
			g.log.Warn("connections refused: too many pending from one source", "source", src.String(), "max_pending_per_ip", g.cfg.MaxPendingPerIP)
		}
		return nil, false
	}
	g.detachSYNFilter(c)
	return slot, true
}

// reset closes a connection refused at accept with an RST rather than a
// FIN (SO_LINGER 0): no FIN exchange and no TIME_WAIT socket per refusal,
// which is most of what a connect flood costs the gateway. The device sees
// "connection reset by peer". Only for connections nothing was read from:
// a refused CONNECT gets its CONNACK and a normal close [MQTT-3.2.2-7].
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// addrPort converts a net.Addr to netip.AddrPort (invalid when it is not
// an IP address).
func addrPort(a net.Addr) netip.AddrPort {
	switch v := a.(type) {
	case *net.TCPAddr:
		ap := v.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	case nil:
		return netip.AddrPort{}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// limitedListener applies admission to a listener handed to http.Server
// (WebSocket), so refused connections never reach HTTP parsing. The
// connections it returns hold their pending slot until they close (or
// serveWS relays their CONNECT). With -proxy-protocol-from,
// balancerListener takes its place.
type limitedListener struct {
	net.Listener
	g *Gateway
}

func (l limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if slot, ok := l.g.admit(c); ok {
			if slot == nil {
				return c, nil
			}
			return &pendingConn{Conn: c, slot: slot}, nil
		}
	}
}
