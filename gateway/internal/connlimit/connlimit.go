package connlimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Errors returned by Acquire.
var (
	ErrLimit       = errors.New("connlimit: tenant connection limit reached")
	ErrUnavailable = errors.New("connlimit: Redis unavailable")
)

// Options configures a Limiter.
type Options struct {
	GatewayID    string        // unique per gateway process; required
	Prefix       string        // key prefix; "berth:"
	HeartbeatTTL time.Duration // 10 s; refreshed every third of it
	Timeout      time.Duration // per Redis call; 250 ms
	FailClosed   bool          // refuse instead of admitting when Redis is unreachable
	Logger       *slog.Logger
}

// Limiter admits connections for one gateway. New, Start, Shutdown.
type Limiter struct {
	rdb redis.UniversalClient
	opt Options

	mu       sync.Mutex
	tenants  map[string]*tenantCount
	inflight int    // admissions and releases between their script and their local update
	seq      uint64 // bumped by every local update
	lapsed   bool   // the heartbeat lapsed: write absolute counts at the next refresh

	cancel context.CancelFunc
	done   chan struct{}
}

type tenantCount struct {
	held    int // connections held here
	pending int // delta not yet in Redis (degraded admissions, failed releases)
}

// New returns a Limiter using rdb.
func New(rdb redis.UniversalClient, opt Options) (*Limiter, error) {
	if opt.GatewayID == "" || strings.HasPrefix(opt.GatewayID, "hb:") {
		return nil, errors.New("connlimit: GatewayID is required and must not start with \"hb:\"")
	}
	if opt.Prefix == "" {
		opt.Prefix = "berth:"
	}
	if opt.HeartbeatTTL <= 0 {
		opt.HeartbeatTTL = 10 * time.Second
	}
	if opt.Timeout <= 0 {
		opt.Timeout = 250 * time.Millisecond
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	return &Limiter{rdb: rdb, opt: opt, tenants: map[string]*tenantCount{}}, nil
}

// hashKey is the tenant's hash; {tenantID} is its Cluster hash tag.
func (l *Limiter) hashKey(tenantID string) string {
	return l.opt.Prefix + "leases:{" + tenantID + "}"
}

func (l *Limiter) hashTTL() time.Duration { return 3 * l.opt.HeartbeatTTL }

// Start writes the heartbeat and keeps refreshing it until Shutdown. A
// failing refresh is logged, not fatal (see the package comment).
func (l *Limiter) Start(ctx context.Context) {
	ctx, l.cancel = context.WithCancel(context.WithoutCancel(ctx))
	l.done = make(chan struct{})
	if err := l.Refresh(ctx); err != nil {
		l.opt.Logger.Warn("connlimit heartbeat failed", "err", err)
	}
	go func() {
		defer close(l.done)
		t := time.NewTicker(l.opt.HeartbeatTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := l.Refresh(ctx); err != nil {
					l.opt.Logger.Warn("connlimit heartbeat failed", "err", err)
				}
			}
		}
	}()
}

// Shutdown stops the heartbeat, removes this gateway's counts and heartbeats
// from Redis (its remaining connections are about to be closed) and waits.
func (l *Limiter) Shutdown(ctx context.Context) error {
	if l.cancel == nil {
		return nil
	}
	l.cancel()
	select {
	case <-l.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	l.mu.Lock()
	tenants := make([]string, 0, len(l.tenants))
	for t := range l.tenants {
		tenants = append(tenants, t)
	}
	l.mu.Unlock()
	if len(tenants) == 0 {
		return nil
	}
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, t := range tenants {
			p.HDel(ctx, l.hashKey(t), l.opt.GatewayID, "hb:"+l.opt.GatewayID)
		}
		return nil
	})
	return err
}

// Refresh beats for every tenant this gateway holds connections for and
// brings Redis up to date with its counts: pending deltas normally,
// absolute counts after a lapse.
func (l *Limiter) Refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, l.opt.Timeout)
	defer cancel()
	l.mu.Lock()
	if l.lapsed && l.inflight == 0 {
		l.mu.Unlock()
		return l.rewrite(ctx)
	}
	type delta struct {
		tenant string
		d      int
	}
	var deltas []delta
	var live []string // tenants whose heartbeat and hash must not expire while we hold connections
	var want []int    // per live tenant: its count in Redis if every write so far landed
	seq := l.seq
	for t, c := range l.tenants {
		if c.held > 0 {
			live = append(live, t)
			want = append(want, c.held-c.pending)
		}
		if c.pending != 0 {
			deltas = append(deltas, delta{t, c.pending})
			c.pending = 0
		} else if c.held == 0 {
			delete(l.tenants, t)
		}
	}
	l.mu.Unlock()
	if len(deltas) == 0 && len(live) == 0 {
		return nil
	}
	hb, hashTTL := l.opt.HeartbeatTTL.Milliseconds(), l.hashTTL().Milliseconds()
	var touches []*redis.Cmd
	cmds, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		// Touch before adjusting: a lapse must be seen before the
		// adjustment beats again.
		for _, t := range live {
			touches = append(touches, touchScript.Eval(ctx, p, []string{l.hashKey(t)}, l.opt.GatewayID, hb, hashTTL))
		}
		for _, d := range deltas {
			adjustScript.Eval(ctx, p, []string{l.hashKey(d.tenant)}, l.opt.GatewayID, d.d, hb, hashTTL)
		}
		return nil
	})
	if err != nil {
		l.mu.Lock()
		for i, d := range deltas {
			if j := len(live) + i; j >= len(cmds) || cmds[j].Err() != nil {
				l.tenantLocked(d.tenant).pending += d.d // try again next time
			}
		}
		l.mu.Unlock()
	}
	// A lapse, or a count that differs from ours while nothing changed
	// it meanwhile (writes lost in a Sentinel failover, say): write the
	// absolute counts, now if nothing is in flight.
	lapsed, differs := false, false
	for i, c := range touches {
		if r, err := c.Int64Slice(); err == nil && len(r) == 2 {
			lapsed = lapsed || r[0] == 1
			differs = differs || int(r[1]) != want[i]
		}
	}
	l.mu.Lock()
	quiet := l.inflight == 0
	if lapsed || (differs && quiet && l.seq == seq) {
		l.lapsed = true
	}
	rewrite := l.lapsed && quiet && err == nil
	l.mu.Unlock()
	if rewrite {
		return l.rewrite(ctx)
	}
	if err != nil {
		return fmt.Errorf("connlimit: refresh: %w", err)
	}
	return nil
}

// rewrite writes absolute counts. It counts only if no admission or
// release ran meanwhile (see the package comment); otherwise lapsed stays
// set and the next refresh tries again.
func (l *Limiter) rewrite(ctx context.Context) error {
	l.mu.Lock()
	seq := l.seq
	held := make(map[string]int, len(l.tenants))
	for t, c := range l.tenants {
		held[t] = c.held
	}
	l.mu.Unlock()
	hb, hashTTL := l.opt.HeartbeatTTL.Milliseconds(), l.hashTTL().Milliseconds()
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for t, n := range held {
			setScript.Eval(ctx, p, []string{l.hashKey(t)}, l.opt.GatewayID, n, hb, hashTTL)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("connlimit: rewrite: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seq == seq && l.inflight == 0 {
		l.lapsed = false
		for _, c := range l.tenants {
			c.pending = 0
		}
	}
	return nil
}

func (l *Limiter) tenantLocked(t string) *tenantCount {
	c, ok := l.tenants[t]
	if !ok {
		c = &tenantCount{}
		l.tenants[t] = c
	}
	return c
}

// Lease is one admitted connection. Release it when the connection ends.
type Lease struct {
	l        *Limiter
	tenant   string
	once     sync.Once
	Count    int  // the tenant's connections after this admission (0 when Degraded)
	Degraded bool // admitted without Redis (fail-open)
}

// Acquire admits one connection for tenantID under limit (a limit of 0 or
// less admits nothing). It returns ErrLimit when the tenant is at its
// limit, and when Redis is unreachable either a Degraded lease (fail open,
// the default) or ErrUnavailable (FailClosed).
func (l *Limiter) Acquire(ctx context.Context, tenantID string, limit int) (*Lease, error) {
	if limit <= 0 {
		return nil, ErrLimit
	}
	l.mu.Lock()
	l.inflight++
	var held int
	if c, ok := l.tenants[tenantID]; ok {
		held = c.held
	}
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, l.opt.Timeout)
	defer cancel()
	res, err := admitScript.Run(ctx, l.rdb, []string{l.hashKey(tenantID)},
		l.opt.GatewayID, limit, l.opt.HeartbeatTTL.Milliseconds(), l.hashTTL().Milliseconds(), held,
	).Int64Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("admit script returned %v", res)
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	l.inflight--
	l.seq++
	switch {
	case err != nil && l.opt.FailClosed:
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	case err != nil:
		l.opt.Logger.Warn("connlimit: Redis unavailable, admitting (fail-open)", "tenant_id", tenantID, "err", err)
		c := l.tenantLocked(tenantID)
		c.held++
		c.pending++
		return &Lease{l: l, tenant: tenantID, Degraded: true}, nil
	}
	if res[1] == 1 {
		l.lapsed = true
	}
	if res[0] < 0 {
		return nil, ErrLimit
	}
	l.tenantLocked(tenantID).held++
	return &Lease{l: l, tenant: tenantID, Count: int(res[0])}, nil
}

// Adopt counts one connection for tenantID without the limit check: a
// connection this gateway admitted before it restarted, which a node still
// serves (a socket handoff's hello, gateway/internal/gateway/handoff.go).
// It adds it to Redis at once (the refresh's delta script); when Redis is
// unreachable the next refresh adds it. Release it when the connection
// ends.
func (l *Limiter) Adopt(ctx context.Context, tenantID string) *Lease {
	l.mu.Lock()
	l.inflight++
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, l.opt.Timeout)
	defer cancel()
	err := adjustScript.Run(ctx, l.rdb, []string{l.hashKey(tenantID)},
		l.opt.GatewayID, 1, l.opt.HeartbeatTTL.Milliseconds(), l.hashTTL().Milliseconds()).Err()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inflight--
	l.seq++
	c := l.tenantLocked(tenantID)
	c.held++
	if err != nil {
		l.opt.Logger.Warn("connlimit: adopting a connection failed; the next refresh retries", "tenant_id", tenantID, "err", err)
		c.pending++
	}
	return &Lease{l: l, tenant: tenantID, Degraded: err != nil}
}

// Release gives the slot back. It is idempotent.
func (ls *Lease) Release() {
	ls.once.Do(func() {
		l := ls.l
		l.mu.Lock()
		l.inflight++
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), l.opt.Timeout)
		defer cancel()
		err := adjustScript.Run(ctx, l.rdb, []string{l.hashKey(ls.tenant)},
			l.opt.GatewayID, -1, l.opt.HeartbeatTTL.Milliseconds(), l.hashTTL().Milliseconds()).Err()
		if err != nil {
			l.opt.Logger.Warn("connlimit: release failed; the next refresh retries", "tenant_id", ls.tenant, "err", err)
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.inflight--
		l.seq++
		c := l.tenantLocked(ls.tenant)
		c.held--
		if err != nil {
			c.pending--
		}
	})
}

// Held returns the connections this gateway holds for tenant.
func (l *Limiter) Held(tenant string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.tenants[tenant]; ok {
		return c.held
	}
	return 0
}
