package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// Placement is a replicated tenant's row in tenant_placement (issue #17,
// docs/replication.md): the node leading its Raft group, the nodes holding
// a replica (the voters, the leader included) and the epoch, the Raft term
// of that leader. Nodes write it; the API only reads it.
type Placement struct {
	Leader    *string // nodes.id; nil when the leader's node row is gone
	Replicas  []string
	Epoch     int64
	UpdatedAt time.Time
}

// TenantPlacement returns the tenant's placement, or nil when it has none
// (a tenant no replicated node has led yet, or a stack without -peers).
func (s *Store) TenantPlacement(ctx context.Context, tid string) (*Placement, error) {
	var p Placement
	err := s.pool.QueryRow(ctx, `SELECT leader, replicas, epoch, updated_at FROM tenant_placement WHERE tenant_id = $1`, tid).
		Scan(&p.Leader, &p.Replicas, &p.Epoch, &p.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, classify("tenant placement", err)
	}
	return &p, nil
}
