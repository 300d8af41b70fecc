package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"berth.dev/broker/internal/msgtrace"
	"berth.dev/broker/internal/poller"
	"berth.dev/broker/internal/quota"
	"berth.dev/broker/internal/registry"
	"berth.dev/broker/internal/topicrule"
	"berth.dev/broker/internal/usage"
	"berth.dev/broker/jwtauth"
	"berth.dev/broker/proxyproto"
	"berth.dev/broker/tracing"
)

var (
	errShuttingDown = errors.New("node: shutting down")
	errBusy         = errors.New("node: tenant shard is closing; retry")
)

// Node hosts the tenant shards of one broker node.
type Node struct {
	cfg      Config
	log      *slog.Logger
	pool     *pgxpool.Pool
	verifier *proxyproto.Verifier
	keys     *jwtauth.KeySet   // the API's JWKS; nil without Config.JWKSURL
	tokens   *jwtauth.Verifier // nil without Config.JWKSURL: no re-authentication
	quotas   *quota.Store
	rules    *topicrule.Store // the open tenants' topic rules (topicrules.go)
	meter    *usage.Meter
	flusher  *usage.Flusher
	reg      *registry.Registration
	traces   *tracing.Provider  // message-path spans to Postgres and OTLP
	spans    *msgtrace.Exporter // the shards' span sink, feeding traces

	ln      net.Listener
	adminLn net.Listener
	handoff *handoffs // nil without Config.HandoffListen (handoff.go)
	// poller parks idle client connections (shard.Options.Poller); nil
	// where there is none (not Linux).
	poller *poller.Poller
	admin  *http.Server

	ctx    context.Context // ends at Shutdown; parent of background work
	cancel context.CancelFunc
	bg     sync.WaitGroup // background loops
	conns  sync.WaitGroup // client connections, until serve's done

	revoked revoked

	repl  *replicas  // nil without Config.Peers (replication.go)
	pacer *movePacer // disconnects of devices whose tenant moved off (moverate.go)

	metricsOnce  sync.Once // metrics.go
	metricsState *nodeMetrics

	mu      sync.Mutex
	tenants map[string]*tenant
	// closingTenants are shards closing for idleness (or deletion),
	// closed when done; a tenant reopens only after.
	closingTenants map[string]chan struct{}
	// opening are the shards being opened, outside mu (opening.go).
	opening map[string]*opening
	// deleted are the tenants deleted since start (deletion.go): true once
	// their shard is closed and their directory erased.
	deleted  map[string]bool
	closing  bool
	shutOnce sync.Once
	shutErr  error
}

// New checks cfg and prepares a node; Start brings it up.
func New(cfg Config) (*Node, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	v, err := proxyproto.NewVerifier(cfg.ProxySecret, proxyproto.VerifierOptions{Previous: cfg.ProxySecretPrevious})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	n := &Node{cfg: cfg, log: cfg.Logger, verifier: v, meter: usage.NewMeter(), tenants: make(map[string]*tenant), closingTenants: make(map[string]chan struct{}), opening: make(map[string]*opening), deleted: make(map[string]bool),
		pacer: newMovePacer(cfg.MoveDisconnectRate)}
	if cfg.JWKSURL != "" {
		n.keys = jwtauth.NewKeySet(jwtauth.KeySetOptions{URL: cfg.JWKSURL, Logger: cfg.Logger})
		n.tokens = jwtauth.NewVerifier(n.keys, jwtauth.VerifierOptions{Issuer: cfg.Issuer})
	}
	return n, nil
}

// Start connects to Postgres, binds the listeners, registers the node and
// starts serving. It returns once the node accepts connections.
func (n *Node) Start(ctx context.Context) error {
	pool, err := pgxpool.New(ctx, n.cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("node: database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return fmt.Errorf("node: database: %w", err)
	}
	n.pool = pool
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.quotas = quota.NewStore(pool, n.log, n.applyQuotas)
	n.rules = topicrule.NewStore(pool, n.log, n.applyTopicRules)
	n.flusher = usage.NewFlusher(pool, n.meter, n.cfg.ID, n.cfg.UsageInterval, n.log)
	n.flusher.Sample = n.sampleAll
	// Shards sample messages themselves (per tenant, capped): every span
	// that reaches the provider is kept, with the ids chosen at sampling.
	n.traces, err = tracing.New(ctx, tracing.Options{
		Sampler: sdktrace.AlwaysSample(), IDGenerator: msgtrace.IDGenerator{}, OTLPEndpoint: n.cfg.OTLPEndpoint,
		Pool: pool, Component: "node", InstanceID: n.cfg.ID, Logger: n.log,
		Registerer: n.metrics().reg, // span store and export counters on the admin /metrics
	})
	if err != nil {
		n.cancel()
		pool.Close()
		return fmt.Errorf("node: tracing: %w", err)
	}
	n.spans = msgtrace.NewExporter(n.traces.TracerProvider(), msgtrace.ExporterOptions{Logger: n.log, Registerer: n.metrics().reg})

	if poller.Supported {
		if n.poller, err = poller.New(n.log); err != nil {
			n.abort()
			return fmt.Errorf("node: poller: %w", err)
		}
	}
	if n.ln, err = net.Listen("tcp", n.cfg.InternalListen); err != nil {
		n.abort()
		return fmt.Errorf("node: internal listener: %w", err)
	}
	if n.adminLn, err = net.Listen("tcp", n.cfg.AdminListen); err != nil {
		n.abort()
		return fmt.Errorf("node: admin listener: %w", err)
	}
	if n.cfg.HandoffListen != "" {
		if n.handoff, err = n.listenHandoffs(); err != nil {
			n.abort()
			return err
		}
	}
	mqttAddr, adminAddr := n.cfg.AdvertiseMQTT, n.cfg.AdvertiseAdmin
	if mqttAddr == "" {
		mqttAddr = n.ln.Addr().String()
	}
	if adminAddr == "" {
		adminAddr = n.adminLn.Addr().String()
	}
	n.reg, err = registry.Register(ctx, pool, registry.Node{ID: n.cfg.ID, MQTTAddr: mqttAddr, AdminAddr: adminAddr, Capacity: n.cfg.Capacity, PublicHost: n.cfg.PublicHost}, n.cfg.HeartbeatInterval, n.log)
	if err != nil {
		n.abort()
		return err
	}
	n.reg.Start()
	n.flusher.Start()
	if n.keys != nil {
		n.keys.Start(n.ctx) // a JWKS that is down only delays re-authentication
	}

	n.admin = &http.Server{Handler: n.adminHandler(), ReadHeaderTimeout: 5 * time.Second}
	n.goBackground(func() {
		if err := n.admin.Serve(n.adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("admin server", "err", err)
		}
	})
	n.goBackground(func() {
		if err := n.quotas.Run(n.ctx, n.cfg.DatabaseURL); err != nil {
			n.log.Error("quota listener stopped", "err", err)
		}
	})
	n.goBackground(func() {
		if err := n.rules.Run(n.ctx, n.cfg.DatabaseURL); err != nil {
			n.log.Error("topic rule listener stopped", "err", err)
		}
	})
	n.goBackground(func() {
		if err := n.followRevocations(n.ctx); err != nil {
			n.log.Error("revocation listener stopped", "err", err)
		}
	})
	n.goBackground(func() {
		if err := n.followDeletions(n.ctx); err != nil {
			n.log.Error("tenant deletion listener stopped", "err", err)
		}
	})
	if len(n.cfg.Peers) > 0 {
		if err := n.startReplication(ctx); err != nil {
			n.cancel()
			n.abort()
			return err
		}
	}
	if n.handoff != nil {
		n.handoff.start()
	}
	n.goBackground(n.closeIdleLoop)
	n.goBackground(n.acceptLoop)
	n.log.Info("node up", "node_id", n.cfg.ID, "mqtt", mqttAddr, "admin", adminAddr)
	return nil
}

func (n *Node) goBackground(f func()) {
	n.bg.Add(1)
	go func() { defer n.bg.Done(); f() }()
}

// abort undoes a partial Start.
func (n *Node) abort() {
	if n.ln != nil {
		n.ln.Close()
	}
	if n.adminLn != nil {
		n.adminLn.Close()
	}
	if n.handoff != nil {
		_ = n.handoff.ln.Close()
	}
	if n.poller != nil {
		_ = n.poller.Close()
	}
	n.cancel()
	if n.spans != nil {
		_ = n.spans.Shutdown(context.Background())
		_ = n.traces.Shutdown(context.Background())
	}
	n.pool.Close()
}

// Addr is the internal MQTT listener's address.
func (n *Node) Addr() net.Addr { return n.ln.Addr() }

// AdminAddr is the admin HTTP listener's address.
func (n *Node) AdminAddr() net.Addr { return n.adminLn.Addr() }

func (n *Node) acceptLoop() {
	for {
		c, err := n.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			n.log.Warn("accept", "err", err)
			time.Sleep(10 * time.Millisecond) // e.g. EMFILE: do not spin
			continue
		}
		n.conns.Add(1)
		go n.serve(c, n.conns.Done)
	}
}

// Shutdown stops accepting, disconnects every client (MQTT 5: 0x8B server
// shutting down), flushes usage, deregisters and closes the database pool.
// It is idempotent.
func (n *Node) Shutdown(ctx context.Context) error {
	n.shutOnce.Do(func() { n.shutErr = n.shutdown(ctx) })
	return n.shutErr
}

func (n *Node) shutdown(ctx context.Context) error {
	n.mu.Lock()
	n.closing = true
	ts := make([]*tenant, 0, len(n.tenants))
	for _, t := range n.tenants {
		ts = append(ts, t)
	}
	n.mu.Unlock()

	var errs []error
	n.ln.Close()
	if n.handoff != nil {
		n.handoff.stopTaking()
	}
	if err := n.reg.Drain(ctx); err != nil {
		errs = append(errs, err)
	}
	for _, t := range ts {
		if err := t.sh.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("tenant %s: %w", t.id, err))
		}
	}
	// Shards closing for idleness finish first: their last usage counts.
	// So do opens under way: what they opened closes again (opening.go).
	n.mu.Lock()
	idle := make([]chan struct{}, 0, len(n.closingTenants)+len(n.opening))
	for _, done := range n.closingTenants {
		idle = append(idle, done)
	}
	for _, op := range n.opening {
		idle = append(idle, op.done)
	}
	n.mu.Unlock()
	for _, done := range idle {
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	done := make(chan struct{})
	go func() { n.conns.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("node: connections still open: %w", ctx.Err()))
	}
	if n.handoff != nil {
		n.handoff.close() // after the drained devices' closed frames
	}
	if n.poller != nil {
		if err := n.poller.Close(); err != nil {
			errs = append(errs, fmt.Errorf("node: poller: %w", err))
		}
	}
	// The shards are stopped: sync and close their logs.
	for _, t := range ts {
		if t.store != nil {
			if err := t.store.Close(); err != nil {
				errs = append(errs, fmt.Errorf("tenant %s: closing storage: %w", t.id, err))
			}
		}
	}
	if n.repl != nil {
		if err := n.repl.close(); err != nil {
			errs = append(errs, fmt.Errorf("node: replication: %w", err))
		}
	}
	if err := n.admin.Shutdown(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := n.flusher.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("node: final usage flush: %w", err))
	}
	// The shards are stopped: export their last spans.
	if err := n.spans.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("node: span export: %w", err))
	}
	if err := n.traces.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("node: span flush: %w", err))
	}
	if err := n.reg.Shutdown(ctx); err != nil {
		errs = append(errs, err)
	}
	if n.keys != nil {
		if err := n.keys.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	n.cancel()
	n.bg.Wait()
	n.pool.Close()
	n.log.Info("node stopped", "node_id", n.cfg.ID)
	return errors.Join(errs...)
}
