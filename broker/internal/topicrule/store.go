package topicrule

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgxlisten"

	"berth.dev/broker/internal/pglisten"
)

// Channel is the NOTIFY channel that announces a change to a tenant's
// topic rules; the payload is the tenant id (docs/contracts.md).
const Channel = "berth_topic_rules"

// ListenerApplicationName names the listener's session in pg_stat_activity.
const ListenerApplicationName = "berth-topic-rule-listener"

// Store holds the topic rules of the tenants open on this node and follows
// their changes: the API changes topic_rules and sends NOTIFY
// berth_topic_rules '<tenant id>' in the same transaction; the Store
// re-reads that tenant and hands the new Set to its subscriber. After a
// lost connection it re-reads every tenant it holds, since notifications
// may have been missed.
type Store struct {
	pool     *pgxpool.Pool
	log      *slog.Logger
	onChange func(tenantID string, s *Set)

	// loadMu orders whole reads (query, then store), so that an older
	// read never replaces a newer one: a tenant opening while its rules
	// change gets the newer rules either way.
	loadMu sync.Mutex

	mu      sync.Mutex
	tenants map[string]*Set // held tenants; a nil Set: no rules
}

// NewStore returns a Store reading from pool. onChange, if not nil, is
// called (outside the Store's locks, on the listener's goroutine) whenever
// a held tenant's rules change.
func NewStore(pool *pgxpool.Pool, log *slog.Logger, onChange func(tenantID string, s *Set)) *Store {
	return &Store{pool: pool, log: log, onChange: onChange, tenants: make(map[string]*Set)}
}

const selectRules = `SELECT id, filter, retention_seconds, retained_allowed, max_message_size, max_msgs_per_sec
	FROM topic_rules WHERE tenant_id = $1`

func (s *Store) read(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, tenantID string, prev *Set) (*Set, error) {
	rows, err := q.Query(ctx, selectRules, tenantID)
	if err != nil {
		return nil, fmt.Errorf("topicrule: load %q: %w", tenantID, err)
	}
	rules, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Rule, error) {
		var r Rule
		var retention, size, rate *int64
		if err := row.Scan(&r.ID, &r.Filter, &retention, &r.RetainedAllowed, &size, &rate); err != nil {
			return r, err
		}
		if retention != nil {
			r.HasRetention, r.Retention = true, time.Duration(*retention)*time.Second
		}
		if size != nil {
			r.MaxMessageSize = *size
		}
		if rate != nil {
			r.MaxMsgsPerSec = *rate
		}
		return r, nil
	})
	if err != nil {
		return nil, fmt.Errorf("topicrule: load %q: %w", tenantID, err)
	}
	set, skipped := NewSet(rules, prev)
	for _, r := range skipped {
		s.log.Warn("topic rule with an invalid filter ignored", "tenant_id", tenantID, "rule_id", r.ID, "filter", r.Filter)
	}
	return set, nil
}

// Load reads the tenant's rules, holds them and follows their changes from
// then on (until Forget). It returns the rules, nil for none.
func (s *Store) Load(ctx context.Context, tenantID string) (*Set, error) {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	set, err := s.read(ctx, s.pool, tenantID, s.Current(tenantID))
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.tenants[tenantID] = set
	s.mu.Unlock()
	return set, nil
}

// Current returns the held tenant's rules as last read (nil: none, or
// not held).
func (s *Store) Current(tenantID string) *Set {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tenants[tenantID]
}

// Forget stops following a tenant (its shard closed).
func (s *Store) Forget(tenantID string) {
	s.mu.Lock()
	delete(s.tenants, tenantID)
	s.mu.Unlock()
}

// reload re-reads a held tenant and reports its rules if they changed.
func (s *Store) reload(ctx context.Context, conn *pgx.Conn, tenantID string) error {
	s.loadMu.Lock()
	s.mu.Lock()
	prev, held := s.tenants[tenantID]
	s.mu.Unlock()
	if !held {
		s.loadMu.Unlock()
		return nil
	}
	set, err := s.read(ctx, conn, tenantID, prev)
	if err != nil {
		s.loadMu.Unlock()
		return err
	}
	changed := !set.equal(prev)
	s.mu.Lock()
	_, still := s.tenants[tenantID]
	if still && changed {
		s.tenants[tenantID] = set
	}
	s.mu.Unlock()
	s.loadMu.Unlock()
	if still && changed && s.onChange != nil {
		s.log.Info("topic rules changed", "tenant_id", tenantID, "rules", set.Len())
		s.onChange(tenantID, set)
	}
	return nil
}

// Run listens for rule changes until ctx ends. connString is the database
// to LISTEN on (a dedicated connection, not one from the pool).
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
