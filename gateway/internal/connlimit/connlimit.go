package connlimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Errors returned by Acquire.
var (
	ErrLimit       = errors.New("connlimit: tenant connection limit reached")
	ErrUnavailable = errors.New("connlimit: Redis unavailable")
)

// admitScript: KEYS[1] the tenant's hash, KEYS[2] this gateway's heartbeat.
// ARGV: gateway id, limit, heartbeat key prefix, heartbeat TTL ms, hash TTL ms.
// Returns {count after admission or -1 when refused, 1 if this gateway's
// heartbeat had lapsed}.
var admitScript = redis.NewScript(`
local h = redis.call('HGETALL', KEYS[1])
local total = 0
for i = 1, #h, 2 do
  local gw = h[i]
  if gw == ARGV[1] or redis.call('EXISTS', ARGV[3] .. gw) == 1 then
    total = total + tonumber(h[i + 1])
  else
    redis.call('HDEL', KEYS[1], gw)
  end
end
local lapsed = 0
if not redis.call('SET', KEYS[2], '1', 'PX', ARGV[4], 'GET') then
  lapsed = 1
end
if total >= tonumber(ARGV[2]) then
  return {-1, lapsed}
end
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return {total + 1, lapsed}
`)

// adjustScript: KEYS[1] the tenant's hash; ARGV gateway id, delta, hash TTL
// ms. Adds delta to this gateway's count, deleting it at zero or below.
var adjustScript = redis.NewScript(`
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])
if n <= 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return n
`)

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
	hb  string // this gateway's heartbeat key

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
	if opt.GatewayID == "" {
		return nil, errors.New("connlimit: GatewayID is required")
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
	return &Limiter{rdb: rdb, opt: opt, hb: opt.Prefix + "gw:" + opt.GatewayID, tenants: map[string]*tenantCount{}}, nil
}

func (l *Limiter) hashKey(tenantID string) string { return l.opt.Prefix + "conns:" + tenantID }

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

// Shutdown stops the heartbeat, removes this gateway's counts and heartbeat
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
	_, err := l.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, t := range tenants {
			p.HDel(ctx, l.hashKey(t), l.opt.GatewayID)
		}
		p.Del(ctx, l.hb)
		return nil
	})
	return err
}

// Refresh writes the heartbeat and brings Redis up to date with this
// gateway's counts: pending deltas normally, absolute counts after a lapse.
func (l *Limiter) Refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, l.opt.Timeout)
	defer cancel()
	prev, err := l.rdb.SetArgs(ctx, l.hb, "1", redis.SetArgs{TTL: l.opt.HeartbeatTTL, Get: true}).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("connlimit: heartbeat: %w", err)
	}
	l.mu.Lock()
	if prev == "" {
		l.lapsed = true // first heartbeat, or it expired: others may have dropped our counts
	}
	if l.lapsed && l.inflight == 0 {
		l.mu.Unlock()
		return l.rewrite(ctx)
	}
	type delta struct {
		tenant string
		d      int
	}
	var deltas []delta
	var live []string // tenants whose hash must not expire while we hold connections
	for t, c := range l.tenants {
		if c.pending != 0 {
			deltas = append(deltas, delta{t, c.pending})
			c.pending = 0
		} else if c.held == 0 {
			delete(l.tenants, t)
		}
		if c.held > 0 {
			live = append(live, t)
		}
	}
	l.mu.Unlock()
	if len(deltas) == 0 && len(live) == 0 {
		return nil
	}
	cmds, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, d := range deltas {
			adjustScript.Eval(ctx, p, []string{l.hashKey(d.tenant)}, l.opt.GatewayID, d.d, l.hashTTL().Milliseconds())
		}
		for _, t := range live {
			p.PExpire(ctx, l.hashKey(t), l.hashTTL())
		}
		return nil
	})
	if err != nil {
		l.mu.Lock()
		for i, d := range deltas {
			if i >= len(cmds) || cmds[i].Err() != nil {
				l.tenantLocked(d.tenant).pending += d.d // try again next time
			}
		}
		l.mu.Unlock()
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
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for t, n := range held {
			if n > 0 {
				p.HSet(ctx, l.hashKey(t), l.opt.GatewayID, n)
				p.PExpire(ctx, l.hashKey(t), l.hashTTL())
			} else {
				p.HDel(ctx, l.hashKey(t), l.opt.GatewayID)
			}
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
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, l.opt.Timeout)
	defer cancel()
	res, err := admitScript.Run(ctx, l.rdb,
		[]string{l.hashKey(tenantID), l.hb},
		l.opt.GatewayID, limit, l.opt.Prefix+"gw:", l.opt.HeartbeatTTL.Milliseconds(), l.hashTTL().Milliseconds(),
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

// Release gives the slot back. It is idempotent.
func (ls *Lease) Release() {
	ls.once.Do(func() {
		l := ls.l
		l.mu.Lock()
		l.inflight++
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), l.opt.Timeout)
		defer cancel()
		err := adjustScript.Run(ctx, l.rdb, []string{l.hashKey(ls.tenant)}, l.opt.GatewayID, -1, l.hashTTL().Milliseconds()).Err()
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
