package placement

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// RecorderOptions configures a Recorder.
type RecorderOptions struct {
	Logger   *slog.Logger
	RetryMin time.Duration // first delay after a failed write; 100 ms
	RetryMax time.Duration // delays double up to this; 5 s
	Timeout  time.Duration // per write; 5 s
}

// Recorder writes the leaderships a replica host reports, off the host's
// path (a Raft loop must not wait on Postgres): Leading only queues, one
// goroutine writes. Reports for one tenant coalesce to the highest epoch
// (and, within it, configuration index).
// A write that fails is retried with backoff until it lands, turns out
// stale, or a newer report replaces it; one whose tenant no longer exists
// is dropped. New → Start → Shutdown.
type Recorder struct {
	store *Store
	opt   RecorderOptions

	mu      sync.Mutex
	pending map[string]Placement
	wake    chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
}

// NewRecorder returns a Recorder writing through store.
func NewRecorder(store *Store, opt RecorderOptions) *Recorder {
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.RetryMin <= 0 {
		opt.RetryMin = 100 * time.Millisecond
	}
	if opt.RetryMax < opt.RetryMin {
		opt.RetryMax = max(5*time.Second, opt.RetryMin)
	}
	if opt.Timeout <= 0 {
		opt.Timeout = 5 * time.Second
	}
	return &Recorder{store: store, opt: opt, pending: map[string]Placement{}, wake: make(chan struct{}, 1)}
}

// Leading reports that p.Leader (this node) leads p.TenantID's group since
// p.Epoch, with the voters of its configuration at p.ConfigIndex: at its
// election and after every configuration change it applies. It never
// blocks.
func (r *Recorder) Leading(p Placement) {
	r.mu.Lock()
	if cur, ok := r.pending[p.TenantID]; !ok || !newer(cur, p) {
		r.pending[p.TenantID] = p
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Pending is how many tenants have a write not yet landed.
func (r *Recorder) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

// Start starts the writer.
func (r *Recorder) Start(ctx context.Context) {
	ctx, r.cancel = context.WithCancel(ctx)
	r.done = make(chan struct{})
	go r.run(ctx)
}

// Shutdown stops the writer; writes still pending are abandoned (the next
// leader, or this one after a restart, records again).
func (r *Recorder) Shutdown(ctx context.Context) error {
	if r.cancel == nil {
		return nil
	}
	r.cancel()
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Recorder) run(ctx context.Context) {
	defer close(r.done)
	delay := time.Duration(0)
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
			if retry != nil {
				continue // a retry is scheduled; it will take this too
			}
		case <-retry:
			retry = nil
		}
		if r.flush(ctx) {
			delay = 0
			continue
		}
		if delay == 0 {
			delay = r.opt.RetryMin
		} else {
			delay = min(2*delay, r.opt.RetryMax)
		}
		retry = time.After(delay)
	}
}

// flush writes every pending placement once; it reports whether all landed
// (or were settled: stale, tenant gone).
func (r *Recorder) flush(ctx context.Context) bool {
	r.mu.Lock()
	batch := make([]Placement, 0, len(r.pending))
	for _, p := range r.pending {
		batch = append(batch, p)
	}
	r.mu.Unlock()
	ok := true
	for _, p := range batch {
		wctx, cancel := context.WithTimeout(ctx, r.opt.Timeout)
		err := r.store.Record(wctx, p)
		cancel()
		log := r.opt.Logger.With("tenant_id", p.TenantID, "epoch", p.Epoch, "leader", p.Leader)
		switch {
		case err == nil:
			log.Info("placement recorded")
		case errors.Is(err, ErrStale):
			log.Info("placement not recorded: a newer epoch is", "err", err)
		case tenantGone(err):
			log.Info("placement not recorded: tenant deleted", "err", err)
		default:
			if ctx.Err() == nil {
				log.Warn("placement write failed; retrying", "err", err)
			}
			ok = false
			continue
		}
		r.mu.Lock()
		if cur, ok := r.pending[p.TenantID]; ok && cur.Epoch == p.Epoch && cur.Leader == p.Leader && cur.ConfigIndex == p.ConfigIndex {
			delete(r.pending, p.TenantID)
		}
		r.mu.Unlock()
	}
	return ok
}

// tenantGone reports a foreign-key violation on the tenant (it was deleted);
// one on the leader (a node not registered yet) is worth retrying.
func tenantGone(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23503" && pe.ConstraintName == "tenant_placement_tenant_id_fkey"
}

// newer reports whether a is a later report than b: a higher epoch, or
// the same with a higher configuration index.
func newer(a, b Placement) bool {
	return a.Epoch > b.Epoch || (a.Epoch == b.Epoch && a.ConfigIndex > b.ConfigIndex)
}
