// Package placement records in Postgres where a replicated tenant is served:
// the node leading its Raft group, the nodes holding a replica and the epoch
// (the Raft term the leader was elected in), table tenant_placement
// (migration 00015). A row only moves forward: a write whose epoch is below
// the stored one is refused, so a deposed leader's late write never undoes
// its successor's. Every change NOTIFYs berth_placement with the tenant id
// (a trigger, in the writer's transaction); gateways re-route on it.
//
// Store reads and writes rows; Recorder is what a replica host calls when
// it becomes a tenant's leader: it writes off the caller's path, coalesces
// per tenant and retries while Postgres is away.
package placement

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Channel is the NOTIFY channel a change is announced on (docs/contracts.md).
const Channel = "berth_placement"

// Errors of Store.
var (
	ErrStale    = errors.New("placement: epoch not above the recorded one")
	ErrNotFound = errors.New("placement: tenant has no placement")
)

// Placement is where one tenant is served.
type Placement struct {
	TenantID string
	Leader   string   // nodes.id of the Raft leader
	Replicas []string // nodes.id of every voter, the leader included
	Epoch    uint64   // the leader's Raft term
	// ConfigIndex is the Raft log index of the configuration Replicas
	// describes: within an epoch a write lands only above the stored one.
	ConfigIndex uint64
	UpdatedAt   time.Time
}

// Store reads and writes tenant_placement.
type Store struct{ pool *pgxpool.Pool }

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// record: insert, or move an existing row forward. An equal epoch with the
// same leader may change the replicas (a membership change within a term:
// Raft has one leader per term, so it is the same authority speaking), but
// only to a newer configuration (a higher config index; migration 00019):
// a late write of an older one loses.
const recordSQL = `INSERT INTO tenant_placement AS p (tenant_id, leader, replicas, epoch, config_index, updated_at)
VALUES ($1, $2, $3, $4, $5, now())
ON CONFLICT (tenant_id) DO UPDATE
SET leader = EXCLUDED.leader, replicas = EXCLUDED.replicas, epoch = EXCLUDED.epoch,
    config_index = EXCLUDED.config_index, updated_at = now()
WHERE p.epoch < EXCLUDED.epoch
   OR (p.epoch = EXCLUDED.epoch AND p.leader = EXCLUDED.leader AND p.config_index < EXCLUDED.config_index)`

const getSQL = `SELECT coalesce(leader, ''), replicas, epoch, config_index, updated_at FROM tenant_placement WHERE tenant_id = $1`

// Record stores p unless the recorded epoch is above p.Epoch, or equal with
// another leader or a config index not below p.ConfigIndex: then ErrStale
// (wrapped, with what is recorded). Writing what is already recorded is a
// no-op (nil, no NOTIFY).
func (s *Store) Record(ctx context.Context, p Placement) error {
	if p.Epoch == 0 || p.Epoch > math.MaxInt64 {
		return fmt.Errorf("placement: record %s: epoch %d out of range", p.TenantID, p.Epoch)
	}
	if p.ConfigIndex > math.MaxInt64 {
		return fmt.Errorf("placement: record %s: config index %d out of range", p.TenantID, p.ConfigIndex)
	}
	if p.Leader == "" {
		return fmt.Errorf("placement: record %s: no leader", p.TenantID)
	}
	replicas := p.Replicas
	if replicas == nil {
		replicas = []string{}
	}
	tag, err := s.pool.Exec(ctx, recordSQL, p.TenantID, p.Leader, replicas, int64(p.Epoch), int64(p.ConfigIndex))
	if err != nil {
		return fmt.Errorf("placement: record %s epoch %d: %w", p.TenantID, p.Epoch, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	cur, err := s.Get(ctx, p.TenantID)
	if err != nil {
		return err
	}
	if cur.Epoch == p.Epoch && cur.Leader == p.Leader && cur.ConfigIndex == p.ConfigIndex && slices.Equal(cur.Replicas, replicas) {
		return nil
	}
	return fmt.Errorf("%w: %s has epoch %d (leader %s, config %d), not %d (leader %s, config %d)",
		ErrStale, p.TenantID, cur.Epoch, cur.Leader, cur.ConfigIndex, p.Epoch, p.Leader, p.ConfigIndex)
}

// Get returns the tenant's placement, or ErrNotFound.
func (s *Store) Get(ctx context.Context, tenantID string) (Placement, error) {
	p := Placement{TenantID: tenantID}
	var epoch, conf int64
	err := s.pool.QueryRow(ctx, getSQL, tenantID).Scan(&p.Leader, &p.Replicas, &epoch, &conf, &p.UpdatedAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Placement{}, ErrNotFound
	case err != nil:
		return Placement{}, fmt.Errorf("placement: get %s: %w", tenantID, err)
	}
	p.Epoch, p.ConfigIndex = uint64(epoch), uint64(conf)
	return p, nil
}
