// Package route tells the gateway where a tenant lives: the MQTT address of
// its broker node, its slug (for the TLS SNI check) and its connection
// limit (quotas.max_connections). The node is the Raft leader recorded in
// tenant_placement when there is one (a replicated tenant, issue #17),
// tenants.node_id otherwise; nodes.mqtt_addr gives its address.
//
// Only a live node (nodes.heartbeat_at within Options.LiveWindow) is
// preferred: a placement row naming a node that stopped (a graceful stop
// ages its heartbeat at once) or died does not beat a live node that can
// serve the tenant. The choice is the first live one of the recorded
// leader, tenants.node_id and the recorded replicas, in that order; when
// none is live, the leader, else tenants.node_id, as if liveness were not
// looked at. A live node that does not lead a replicated tenant answers
// CONNACK 0x9C and the gateway re-reads the route (docs/replication.md,
// "Placement in Postgres and the gateway").
//
// Answers are cached. LISTEN berth_placement (a tenant moved, its leader
// changed, or it was deleted) and berth_quotas (its quotas changed) drop the
// tenant's entry; a reconnect of the listener drops them all. Entries also
// expire after TTL as a safety net. A lookup that raced an invalidation of
// its tenant (or of all) is not cached, and a lookup never joins a query
// started before its tenant's last invalidation. Refresh drops one
// tenant's entry and reads it again (a node answered that it is not the
// tenant's leader); other tenants' queries in flight are left alone, so a
// reconnect storm during an election costs a query per tenant refreshed,
// not per lookup.
//
// LookupSlug (slug.go) answers the same by tenant slug, for the tenant
// endpoints' DNS (package tenantdns); Route.PublicHost is the chosen
// node's nodes.public_host.
package route

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/gateway/internal/pglisten"
)

// NOTIFY channels (docs/contracts.md).
const (
	ChannelPlacement = "berth_placement"
	ChannelQuotas    = "berth_quotas"
)

// Lookup errors.
var (
	ErrNoTenant  = errors.New("route: no such tenant")
	ErrNotPlaced = errors.New("route: tenant has no node")
)

// Route is where a tenant's connections go.
type Route struct {
	TenantID string
	Slug     string
	NodeID   string
	NodeAddr string // host:port of the node's internal MQTT listener
	// Epoch is the epoch of the tenant's placement row (the Raft term its
	// recorded leader was elected in), 0 when it has none (routed by
	// tenants.node_id). NodeID is that leader unless the leader is not
	// live (see the package comment).
	Epoch uint64
	// MaxConnections is quotas.max_connections, or -1 when the tenant has
	// no quotas row (the gateway then applies its default).
	MaxConnections int
	// PublicHost is nodes.public_host of NodeID: the name or IP at which
	// devices reach that node's host (its -public-host; empty when unset).
	// The tenant endpoint's DNS answer (package tenantdns) names it.
	PublicHost string
}

// query picks the node: candidates ranked leader (1), tenants.node_id (2),
// replicas (3...); the first live one, else the first of ranks 1 and 2 with
// a nodes row (the choice before liveness counted). $2 is the live window
// in seconds.
const query = `SELECT t.slug, coalesce(c.id, ''), coalesce(c.mqtt_addr, ''), coalesce(q.max_connections, -1),
	coalesce(p.epoch, 0), coalesce(c.public_host, '')
FROM tenants t
LEFT JOIN tenant_placement p ON p.tenant_id = t.id
LEFT JOIN quotas q ON q.tenant_id = t.id
LEFT JOIN LATERAL (
	SELECT n.id, n.mqtt_addr, n.public_host
	FROM unnest(ARRAY[p.leader, t.node_id] || coalesce(p.replicas, '{}'::text[])) WITH ORDINALITY AS k(id, rank)
	JOIN nodes n ON n.id = k.id
	CROSS JOIN LATERAL (SELECT n.heartbeat_at > now() - make_interval(secs => $2)) AS l(live)
	WHERE l.live OR k.rank <= 2
	ORDER BY l.live DESC, k.rank
	LIMIT 1
) c ON true
WHERE t.id = $1`

// Options configures a Table.
type Options struct {
	TTL         time.Duration // positive entries; 1 min
	NegativeTTL time.Duration // ErrNoTenant / ErrNotPlaced entries; 5 s
	// LiveWindow is how recent a node's heartbeat must be for it to count
	// as live (nodes.heartbeat_at; nodes heartbeat every 10 s); 30 s, as
	// the API's placement counts it.
	LiveWindow time.Duration
	Logger     *slog.Logger
	RetryMin   time.Duration // listener reconnect delay; see pglisten
	Now        func() time.Time
}

// Table is the cached tenant -> route map. New, Start, Shutdown.
type Table struct {
	pool   *pgxpool.Pool
	opt    Options
	listen *pglisten.Listener

	mu       sync.Mutex
	cache    map[string]entry
	gen      uint64              // bumped when every entry is dropped
	inflight map[string]*pending // one query per tenant at a time
	slugs    slugCache           // slug -> tenant id (slug.go)
}

// pending is a query other lookups of the same tenant wait for, so a
// reconnect storm after an invalidation costs one query, not thousands.
type pending struct {
	gen   uint64 // the whole-cache generation it started in
	stale bool   // its tenant was invalidated since it started; under Table.mu
	done  chan struct{}
	r     Route
	err   error
}

// currentLocked tells whether p's answer is still good to share and cache.
func (t *Table) currentLocked(p *pending) bool { return !p.stale && p.gen == t.gen }

// dropLocked forgets tenantID's entry and marks a query in flight for it
// stale.
func (t *Table) dropLocked(tenantID string) {
	delete(t.cache, tenantID)
	if p, ok := t.inflight[tenantID]; ok {
		p.stale = true
	}
}

type entry struct {
	r       Route
	err     error
	expires time.Time
}

// New returns a Table reading from pool.
func New(pool *pgxpool.Pool, opt Options) *Table {
	if opt.TTL <= 0 {
		opt.TTL = time.Minute
	}
	if opt.NegativeTTL <= 0 {
		opt.NegativeTTL = 5 * time.Second
	}
	if opt.LiveWindow <= 0 {
		opt.LiveWindow = 30 * time.Second
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	t := &Table{pool: pool, opt: opt, cache: map[string]entry{}, inflight: map[string]*pending{}, slugs: newSlugCache()}
	t.listen = pglisten.New(pool, pglisten.Options{
		Channels: []string{ChannelPlacement, ChannelQuotas},
		Reset:    func(context.Context, *pgx.Conn) error { t.invalidateAll(); return nil },
		Notify:   t.notify,
		Logger:   opt.Logger,
		RetryMin: opt.RetryMin,
	})
	return t
}

// Start begins listening for invalidations.
func (t *Table) Start(ctx context.Context) error {
	if err := t.listen.Start(ctx); err != nil {
		return fmt.Errorf("route: start: %w", err)
	}
	return nil
}

// Shutdown stops listening.
func (t *Table) Shutdown(ctx context.Context) error { return t.listen.Shutdown(ctx) }

func (t *Table) notify(n *pgconn.Notification) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dropLocked(n.Payload)
	if n.Channel == ChannelPlacement { // perhaps a tenant created under a name just found absent
		t.slugs.dropAbsent()
	}
}

func (t *Table) invalidateAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.cache)
	t.gen++
	t.slugs.clear()
}

// Lookup returns the route of tenantID: ErrNoTenant when it does not exist,
// ErrNotPlaced when it has no node; other errors are database failures.
func (t *Table) Lookup(ctx context.Context, tenantID string) (Route, error) {
	now := t.opt.Now()
	t.mu.Lock()
	if e, ok := t.cache[tenantID]; ok && now.Before(e.expires) {
		t.mu.Unlock()
		return e.r, e.err
	}
	if p, ok := t.inflight[tenantID]; ok && t.currentLocked(p) {
		t.mu.Unlock()
		select {
		case <-p.done:
			return p.r, p.err
		case <-ctx.Done():
			return Route{}, ctx.Err()
		}
	}
	p := &pending{gen: t.gen, done: make(chan struct{})}
	t.inflight[tenantID] = p
	t.mu.Unlock()

	p.r, p.err = t.query(ctx, tenantID, now, p)
	t.mu.Lock()
	if t.inflight[tenantID] == p {
		delete(t.inflight, tenantID)
	}
	t.mu.Unlock()
	close(p.done)
	return p.r, p.err
}

// Refresh drops tenantID's cached route and reads it again: for a node
// that answered it does not lead the tenant, when the placement's NOTIFY
// may not have arrived yet.
func (t *Table) Refresh(ctx context.Context, tenantID string) (Route, error) {
	t.mu.Lock()
	t.dropLocked(tenantID)
	t.mu.Unlock()
	return t.Lookup(ctx, tenantID)
}

// query reads the route for p and caches the answer unless an
// invalidation of the tenant, or of all, happened since p started.
func (t *Table) query(ctx context.Context, tenantID string, now time.Time, p *pending) (Route, error) {
	r := Route{TenantID: tenantID}
	var epoch int64
	err := t.pool.QueryRow(ctx, query, tenantID, t.opt.LiveWindow.Seconds()).Scan(&r.Slug, &r.NodeID, &r.NodeAddr, &r.MaxConnections, &epoch, &r.PublicHost)
	r.Epoch = uint64(epoch)
	ttl := t.opt.TTL
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		err, ttl = ErrNoTenant, t.opt.NegativeTTL
	case err != nil:
		return Route{}, fmt.Errorf("route: lookup %s: %w", tenantID, err) // not cached
	case r.NodeAddr == "":
		err, ttl = ErrNotPlaced, t.opt.NegativeTTL
	}
	t.mu.Lock()
	if t.currentLocked(p) { // no invalidation raced the query
		t.cache[tenantID] = entry{r: r, err: err, expires: now.Add(ttl)}
	}
	t.mu.Unlock()
	return r, err
}
