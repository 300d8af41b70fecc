package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"berth.dev/broker/jwtauth"
	"berth.dev/broker/proxyproto"
	"berth.dev/gateway/internal/connlimit"
	"berth.dev/gateway/internal/revocation"
	"berth.dev/gateway/internal/route"
	"berth.dev/gateway/internal/synfilter"
)

// Deps are the parts a Gateway uses; the caller starts and stops them.
type Deps struct {
	Auth     *jwtauth.Verifier
	Revoked  *revocation.Set
	Routes   *route.Table
	Limits   *connlimit.Limiter
	Signer   *proxyproto.Signer
	Logger   *slog.Logger
	Registry *prometheus.Registry // where metrics register; a new one when nil
	// Tracer makes the spans of each connect (see trace.go); none when nil.
	// The caller owns it: its Shutdown, after the Gateway's, flushes them.
	Tracer trace.TracerProvider
}

// Gateway serves MQTT listeners. New, Start, Shutdown.
type Gateway struct {
	cfg  Config
	d    Deps
	log  *slog.Logger
	reg  *prometheus.Registry
	m    *metrics
	adm  *admission
	hs   *handshakes // handshake admission (handshake.go)
	pend *pendingIPs
	// pendLog bounds the lines about connections refused over
	// MaxPendingPerIP, refuseLog those about refused CONNECTs.
	pendLog   *quietLog
	refuseLog *quietLog
	coolLog   *quietLog // sources put in cool-down (cooldown.go)
	bufs      *bufPool
	tls       *tls.Config       // nil without a certificate
	syn       *synfilter.Filter // the kernel SYN filter; nil when off
	// balancers send a PROXY header naming the device (balancer.go);
	// proxyRefused counts their connections closed for it, waits caps
	// those still waiting for it.
	balancers    balancers
	proxyRefused *prometheus.CounterVec
	waits        *headerWaits
	tr           trace.Tracer
	ho           *handoffs // the nodes on this host (-handoff-dir); nil when off

	connCtx    context.Context // cancelled when Shutdown gives up waiting
	cancelConn context.CancelFunc
	nextID     atomic.Uint64

	mu        sync.Mutex
	closing   bool
	listeners []net.Listener // MQTT listeners (the WebSocket ones too)
	sessions  map[*session]struct{}
	wsSrvs    []*http.Server // ws and wss
	metrics   *http.Server
	loops     sync.WaitGroup // accept loops and HTTP servers
	conns     sync.WaitGroup // one per session

	addrs map[string]net.Addr // listener kind -> bound address
}

// session is one client connection, tracked so Shutdown can close it.
type session struct {
	mu     sync.Mutex
	client net.Conn
	node   net.Conn
	// remote is the device's address when a balancer's PROXY header named
	// it (the TCP and TLS listeners); nil means client.RemoteAddr(). Set
	// before handle runs, by the goroutine that runs it.
	remote net.Addr
}

// remoteAddr is the device's address.
func (s *session) remoteAddr() net.Addr {
	if s.remote != nil {
		return s.remote
	}
	return s.client.RemoteAddr()
}

func (s *session) setNode(c net.Conn) {
	s.mu.Lock()
	s.node = c
	s.mu.Unlock()
}

func (s *session) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.client.Close()
	if s.node != nil {
		s.node.Close()
	}
}

// New checks cfg and builds a Gateway; nothing listens until Start.
func New(cfg Config, d Deps) (*Gateway, error) {
	if d.Auth == nil || d.Revoked == nil || d.Routes == nil || d.Limits == nil || d.Signer == nil {
		return nil, errors.New("gateway: Auth, Revoked, Routes, Limits and Signer are required")
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Tracer == nil {
		d.Tracer = noop.NewTracerProvider()
	}
	reg := d.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := newMetrics(reg)
	g := &Gateway{
		cfg:  cfg,
		d:    d,
		log:  d.Logger,
		reg:  reg,
		m:    m,
		adm:  newAdmission(&cfg),
		hs:   newHandshakes(&cfg, reg),
		pend: newPendingIPs(cfg.MaxPendingPerIP, m.pending),
		pendLog: newQuietLog(d.Logger, slog.LevelWarn,
			"connections refused: too many pending from one source; lines not logged", pendLogEvery, 1),
		refuseLog: newQuietLog(d.Logger, slog.LevelInfo,
			"connect refused; lines not logged", refuseLogEvery, refuseLogBurst),
		coolLog: newQuietLog(d.Logger, slog.LevelWarn,
			"sources refused for a cool-down; lines not logged", coolLogEvery, 1),
		bufs:     newBufPool(),
		tr:       d.Tracer.Tracer(tracerName),
		sessions: map[*session]struct{}{},
		addrs:    map[string]net.Addr{},
	}
	g.connCtx, g.cancelConn = context.WithCancel(context.Background())
	var err error
	if g.balancers, err = parseTrusted(cfg.ProxyProtocolFrom); err != nil {
		return nil, fmt.Errorf("gateway: -proxy-protocol-from: %w", err)
	}
	g.proxyRefused = proxyRefusedMetric(reg)
	g.waits = newHeaderWaits(cfg.ProxyProtocolMaxWaiting, reg)
	if cfg.TLSCert != "" {
		cr, err := newCertReloader(cfg.TLSCert, cfg.TLSKey, cfg.TLSReloadCheck, d.Logger)
		if err != nil {
			return nil, err
		}
		g.tls = g.tlsConfig(cr) // tlsslot.go
	}
	if cfg.HandoffDir != "" {
		g.ho = newHandoffs(cfg.HandoffDir, d.Logger, d.Limits)
		g.ho.adopted = g.watchAdopted // handoffconn.go: the backstop of adopted devices
	}
	g.syn = loadSYNFilter(&cfg, d.Logger) // closed by Shutdown
	reg.MustRegister(synDroppedMetric(g.syn))
	return g, nil
}

// Listener kinds, for Addr.
const (
	KindTCP     = "tcp"
	KindTLS     = "tls"
	KindWS      = "ws"
	KindWSS     = "wss" // WebSocket over TLS
	KindMetrics = "metrics"
)

// Addr returns the bound address of a listener kind, nil when disabled.
func (g *Gateway) Addr(kind string) net.Addr {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.addrs[kind]
}

// Start opens the listeners and serves until Shutdown.
func (g *Gateway) Start(ctx context.Context) error {
	type lc struct {
		kind, addr string
	}
	var want []lc
	if g.cfg.ListenTCP != "" {
		want = append(want, lc{KindTCP, g.cfg.ListenTCP})
	}
	if g.cfg.ListenTLS != "" && g.tls != nil {
		want = append(want, lc{KindTLS, g.cfg.ListenTLS})
	}
	if g.cfg.ListenWS != "" {
		want = append(want, lc{KindWS, g.cfg.ListenWS})
	}
	if g.cfg.ListenWSS != "" && g.tls != nil {
		want = append(want, lc{KindWSS, g.cfg.ListenWSS})
	}
	if g.cfg.MetricsListen != "" {
		want = append(want, lc{KindMetrics, g.cfg.MetricsListen})
	}
	if g.ho != nil {
		g.ho.start()
	}
	var lcfg net.ListenConfig
	if g.syn != nil {
		// The kernel takes no socket filter on Multipath TCP, Go's
		// default; MPTCP clients fall back to TCP.
		lcfg.SetMultipathTCP(false)
	}
	for _, w := range want {
		ln, err := lcfg.Listen(ctx, "tcp", w.addr)
		if err != nil {
			g.closeListeners()
			return fmt.Errorf("gateway: listen %s %s: %w", w.kind, w.addr, err)
		}
		g.mu.Lock()
		if w.kind != KindMetrics {
			g.listeners = append(g.listeners, ln)
		}
		g.addrs[w.kind] = ln.Addr()
		g.mu.Unlock()
		if w.kind != KindMetrics {
			g.attachSYNFilter(w.kind, ln)
		}
		g.log.Info("listening", "kind", w.kind, "addr", ln.Addr().String())
		switch w.kind {
		case KindTCP:
			g.loops.Go(func() { g.acceptLoop(ln, nil) })
		case KindTLS:
			g.loops.Go(func() { g.acceptLoop(ln, g.tls) })
		case KindWS, KindWSS:
			var l net.Listener = limitedListener{ln, g} // rate limits before any TLS or HTTP work
			if len(g.balancers) > 0 {
				bl := newBalancerListener(ln, g)
				g.loops.Go(bl.run)
				l = bl
			}
			if w.kind == KindWSS {
				l = tls.NewListener(slotListener{l, g.hs}, g.wssTLS())
			}
			srv := g.wsServer()
			g.mu.Lock()
			g.wsSrvs = append(g.wsSrvs, srv)
			g.mu.Unlock()
			g.serveHTTP(srv, l)
		case KindMetrics:
			mux := http.NewServeMux()
			mux.Handle("/metrics", promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{}))
			g.metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
			g.serveHTTP(g.metrics, ln)
		}
	}
	return nil
}

// wsServer serves MQTT over WebSocket at /mqtt (serveWS). On the wss
// listener net/http runs the TLS handshake in the connection's own
// goroutine under ReadHeaderTimeout (the ConnectTimeout, as on the TLS
// listener); a handshake that fails is counted like the TLS listener's.
func (g *Gateway) wsServer() *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/mqtt", g.serveWS)
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: g.cfg.ConnectTimeout,
		// A connection that keeps HTTP alive without upgrading stays
		// pending (unauthenticated): it gets no more time than a CONNECT.
		IdleTimeout: g.cfg.ConnectTimeout,
		// serveWS finds the connection's pending slot in its request.
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if slot := pendingSlotOf(c); slot != nil {
				return context.WithValue(ctx, pendingKey{}, slot)
			}
			return ctx
		},
		ErrorLog: slog.NewLogLogger(g.log.Handler(), slog.LevelInfo), // TLS handshake errors, accept retries
		ConnState: func(c net.Conn, st http.ConnState) {
			if tc, ok := c.(*tls.Conn); ok && st == http.StateClosed && !tc.ConnectionState().HandshakeComplete {
				sc, _ := tc.NetConn().(*slotConn)
				g.tlsFailed(sc)
			}
		},
	}
}

// wssTLS is the TLS listener's configuration (the same certificate store,
// reloaded without a restart) speaking HTTP/1.1 in ALPN instead of "mqtt":
// browsers offer h2 and http/1.1, and a WebSocket upgrade is an HTTP/1.1
// request.
func (g *Gateway) wssTLS() *tls.Config {
	c := g.tls.Clone()
	c.NextProtos = []string{"http/1.1"}
	return c
}

func (g *Gateway) tlsHandshakeFailed() { g.m.refusals.WithLabelValues("", "tls_handshake").Inc() }

func (g *Gateway) serveHTTP(srv *http.Server, ln net.Listener) {
	g.loops.Go(func() {
		// Shutdown closes the listener itself, so either error means a clean stop.
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			g.log.Error("http server stopped", "addr", ln.Addr().String(), "err", err)
		}
	})
}

func (g *Gateway) closeListeners() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, ln := range g.listeners {
		ln.Close()
	}
	for _, srv := range g.wsSrvs {
		srv.Close() // hijacked WebSocket connections are sessions, closed separately
	}
	if g.metrics != nil {
		g.metrics.Close()
	}
}

// Shutdown stops accepting at once, lets live connections run until ctx
// ends (the drain grace period), then closes them and waits for every
// goroutine. The metrics listener stays up until the end.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.mu.Lock()
	g.closing = true
	for _, ln := range g.listeners {
		ln.Close()
	}
	for _, srv := range g.wsSrvs {
		srv.Close()
	}
	n := len(g.sessions)
	g.mu.Unlock()
	g.log.Info("draining", "connections", n)

	drained := make(chan struct{})
	go func() { g.conns.Wait(); close(drained) }()
	var err error
	select {
	case <-drained:
	case <-ctx.Done():
		g.mu.Lock()
		left := len(g.sessions)
		for s := range g.sessions {
			s.close()
		}
		g.mu.Unlock()
		g.cancelConn()
		g.log.Warn("drain grace over; closed remaining connections", "connections", left)
		<-drained
		err = ctx.Err()
	}
	g.cancelConn()
	if g.ho != nil {
		// Devices handed off were not waited for: the node serves them.
		// Their leases stay counted until the process exits.
		g.ho.close()
	}
	g.closeListeners() // and the metrics server, last
	g.loops.Wait()
	g.pendLog.stop() // the summaries still due
	g.refuseLog.stop()
	g.coolLog.stop()
	if g.syn != nil {
		g.syn.Close()
	}
	return err
}

func (g *Gateway) isClosing() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closing
}

// track registers a session; false when shutting down.
func (g *Gateway) track(s *session) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing {
		return false
	}
	g.sessions[s] = struct{}{}
	g.conns.Add(1)
	return true
}

func (g *Gateway) untrack(s *session) {
	g.mu.Lock()
	delete(g.sessions, s)
	g.mu.Unlock()
	g.conns.Done()
}
