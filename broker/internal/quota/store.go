// Package quota keeps each tenant's live quotas on a node and the token
// buckets that enforce its rates, and with them the tenant's
// trace_sample_rate (tenants table), which the same NOTIFY announces.
//
// Quotas are read from Postgres when a tenant's shard opens and changed live:
// the API updates the quotas row and sends NOTIFY berth_quotas '<tenant id>';
// the Store re-reads that tenant and tells its subscriber, which adjusts
// limits in place without reconnecting anyone. After a lost connection the
// Store re-reads every tenant it holds, since notifications may have been
// missed.
package quota

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgxlisten"

	"berth.dev/broker/internal/pglisten"
	"berth.dev/quotas"
)

// Channel is the NOTIFY channel that announces quota changes.
const Channel = "berth_quotas"

// ErrNoTenant is returned for a tenant with no quotas row.
var ErrNoTenant = errors.New("quota: no such tenant")

// Store holds the quotas of the tenants open on this node.
type Store struct {
	pool *pgxpool.Pool
	log  *slog.Logger

	mu       sync.Mutex
	tenants  map[string]quotas.Quotas
	rates    map[string]float64 // trace_sample_rate of the held tenants
	onChange func(tenantID string, q quotas.Quotas)
}

// NewStore returns a Store reading from pool. onChange, if not nil, is called
// (outside any lock) whenever a held tenant's quotas change.
func NewStore(pool *pgxpool.Pool, log *slog.Logger, onChange func(tenantID string, q quotas.Quotas)) *Store {
	return &Store{pool: pool, log: log, tenants: make(map[string]quotas.Quotas), rates: make(map[string]float64), onChange: onChange}
}

var selectQuotas = func() string {
	cols := make([]string, len(quotas.Fields))
	for i, f := range quotas.Fields {
		cols[i] = f.Name
	}
	return "SELECT " + strings.Join(cols, ", ") + ", t.trace_sample_rate FROM quotas q JOIN tenants t ON t.id = q.tenant_id WHERE q.tenant_id = $1"
}()

func load(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, tenantID string) (quotas.Quotas, float64, error) {
	var out quotas.Quotas
	var rate float64
	dst := make([]any, len(quotas.Fields), len(quotas.Fields)+1)
	for i, f := range quotas.Fields {
		dst[i] = f.Get(&out)
	}
	if err := q.QueryRow(ctx, selectQuotas, tenantID).Scan(append(dst, &rate)...); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return out, 0, fmt.Errorf("%w %q", ErrNoTenant, tenantID)
		}
		return out, 0, fmt.Errorf("quota: load %q: %w", tenantID, err)
	}
	return out, rate, nil
}

// Get returns the tenant's quotas, reading them on first use and holding them
// (and following their changes) from then on.
func (s *Store) Get(ctx context.Context, tenantID string) (quotas.Quotas, error) {
	s.mu.Lock()
	q, ok := s.tenants[tenantID]
	s.mu.Unlock()
	if ok {
		return q, nil
	}
	q, rate, err := load(ctx, s.pool, tenantID)
	if err != nil {
		return q, err
	}
	s.mu.Lock()
	s.tenants[tenantID] = q
	s.rates[tenantID] = rate
	s.mu.Unlock()
	return q, nil
}

// TraceSampleRate returns the held tenant's trace_sample_rate, as of the
// last Get or change (0 for a tenant not held).
func (s *Store) TraceSampleRate(tenantID string) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rates[tenantID]
}

// Forget stops following a tenant (its shard closed).
func (s *Store) Forget(tenantID string) {
	s.mu.Lock()
	delete(s.tenants, tenantID)
	delete(s.rates, tenantID)
	s.mu.Unlock()
}

// reload re-reads a held tenant and reports a change.
func (s *Store) reload(ctx context.Context, conn *pgx.Conn, tenantID string) error {
	s.mu.Lock()
	old, held := s.tenants[tenantID]
	oldRate := s.rates[tenantID]
	s.mu.Unlock()
	if !held {
		return nil
	}
	q, rate, err := load(ctx, conn, tenantID)
	if errors.Is(err, ErrNoTenant) {
		s.Forget(tenantID)
		return nil
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	_, still := s.tenants[tenantID]
	if still {
		s.tenants[tenantID] = q
		s.rates[tenantID] = rate
	}
	s.mu.Unlock()
	if still && (q != old || rate != oldRate) && s.onChange != nil {
		s.log.Info("quotas changed", "tenant_id", tenantID)
		s.onChange(tenantID, q)
	}
	return nil
}

// ListenerApplicationName names the listener's session in pg_stat_activity.
const ListenerApplicationName = "berth-quota-listener"

// Run listens for quota changes until ctx ends. connString is the database to
// LISTEN on (a dedicated connection, not one from the pool).
func (s *Store) Run(ctx context.Context, connString string) error {
	return pglisten.Run(ctx, pglisten.Config{ConnString: connString, AppName: ListenerApplicationName, Log: s.log},
		map[string]pgxlisten.Handler{Channel: pglisten.Rereader{Held: s.held, Reload: s.reload}})
}

// held lists the tenants the store follows.
func (s *Store) held() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.tenants))
	for id := range s.tenants {
		ids = append(ids, id)
	}
	return ids
}
