package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/billing/plan"
	"berth.dev/quotas"
)

// Tenant is an isolated MQTT namespace with its own endpoint.
type Tenant struct {
	ID        string
	AccountID string
	Slug      string
	Plan      string
	NodeID    *string
	CreatedAt time.Time
	// TraceSampleRate is the share of the tenant's messages nodes trace,
	// 0 to 1 (besides those whose traceparent says sampled).
	TraceSampleRate float64
}

const tenantColumns = `id, account_id, slug, plan, node_id, created_at, trace_sample_rate`

func scanTenant(row pgx.Row) (Tenant, error) {
	var t Tenant
	err := row.Scan(&t.ID, &t.AccountID, &t.Slug, &t.Plan, &t.NodeID, &t.CreatedAt, &t.TraceSampleRate)
	return t, err
}

// TenantLimitError says the account already has the most tenants it may
// have.
type TenantLimitError struct{ Limit int }

func (e *TenantLimitError) Error() string {
	return fmt.Sprintf("store: the account already has its limit of %d tenants", e.Limit)
}

// PlanBoundsError refuses a plan change: a quota is above the new plan's
// bound.
type PlanBoundsError struct {
	Plan  string
	Bound *quotas.BoundError
}

func (e *PlanBoundsError) Error() string {
	return fmt.Sprintf("store: %s = %d is above the %s plan's %d", e.Bound.Field, e.Bound.Value, e.Plan, e.Bound.Max)
}

// CreateTenant creates a tenant with quotas q, placing it on the least-loaded
// live node (or none), and fills NodeID and CreatedAt. It returns a
// *TenantLimitError when t's account already has maxTenants tenants.
//
// Creations in one account serialize on the account's row (FOR NO KEY
// UPDATE: it does not block the foreign-key checks of rows that merely
// reference the account), and the count is its own statement after the
// lock, so under READ COMMITTED it sees every tenant committed before the
// lock was granted: two concurrent creations never both take the last
// place.
func (s *Store) CreateTenant(ctx context.Context, t *Tenant, q quotas.Quotas, maxTenants int) error {
	return classify("create tenant", s.inTx(ctx, func(tx pgx.Tx) error {
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM accounts WHERE id = $1 FOR NO KEY UPDATE`, t.AccountID).Scan(&one); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM tenants WHERE account_id = $1`, t.AccountID).Scan(&n); err != nil {
			return err
		}
		if n >= maxTenants {
			return &TenantLimitError{Limit: maxTenants}
		}
		return createTenant(ctx, tx, t, q)
	}))
}

func createTenant(ctx context.Context, tx pgx.Tx, t *Tenant, q quotas.Quotas) error {
	node, err := placeNode(ctx, tx)
	if err != nil {
		return err
	}
	t.NodeID = node
	if err := tx.QueryRow(ctx,
		`INSERT INTO tenants (id, account_id, slug, plan, node_id) VALUES ($1, $2, $3, $4, $5) RETURNING created_at, trace_sample_rate`,
		t.ID, t.AccountID, t.Slug, t.Plan, t.NodeID).Scan(&t.CreatedAt, &t.TraceSampleRate); err != nil {
		return err
	}
	if err := insertQuotas(ctx, tx, t.ID, q); err != nil {
		return err
	}
	if node != nil {
		return notify(ctx, tx, ChannelPlacement, t.ID)
	}
	return nil
}

// GetTenant returns the account's tenant tid.
func (s *Store) GetTenant(ctx context.Context, accountID, tid string) (Tenant, error) {
	t, err := scanTenant(s.pool.QueryRow(ctx,
		`SELECT `+tenantColumns+` FROM tenants WHERE id = $1 AND account_id = $2`, tid, accountID))
	return t, classify("get tenant", err)
}

// ListTenants pages through an account's tenants, oldest first.
func (s *Store) ListTenants(ctx context.Context, accountID string, p Page) ([]Tenant, *Cursor, error) {
	at, id := p.afterArgs()
	rows, err := s.pool.Query(ctx,
		`SELECT `+tenantColumns+` FROM tenants
		 WHERE account_id = $1 AND ($2::timestamptz IS NULL OR (created_at, id) > ($2, $3::text))
		 ORDER BY created_at, id LIMIT $4`, accountID, at, id, p.Limit+1)
	if err != nil {
		return nil, nil, classify("list tenants", err)
	}
	ts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Tenant, error) { return scanTenant(row) })
	if err != nil {
		return nil, nil, classify("list tenants", err)
	}
	ts, next := trim(ts, p.Limit, func(t Tenant) Cursor { return Cursor{At: t.CreatedAt, ID: t.ID} })
	return ts, next, nil
}

// TenantUpdate holds the fields a PATCH may change; nil means unchanged.
type TenantUpdate struct {
	Slug            *string
	Plan            *string
	TraceSampleRate *float64 // 0 to 1
}

// UpdateTenant changes a tenant's slug, plan and/or trace sample rate. A
// plan whose bounds a quota is above is refused with a *PlanBoundsError
// naming it (nothing changes): the user lowers the quota first, rather
// than losing capacity silently. A plan change is announced on
// berth_quotas, as is a change of the trace sample rate (nodes apply both
// live); a slug change is announced on berth_placement (gateways route by
// slug).
func (s *Store) UpdateTenant(ctx context.Context, accountID, tid string, u TenantUpdate) (Tenant, error) {
	var t Tenant
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		t, err = scanTenant(tx.QueryRow(ctx,
			`SELECT `+tenantColumns+` FROM tenants WHERE id = $1 AND account_id = $2 FOR UPDATE`, tid, accountID))
		if err != nil {
			return err
		}
		if u.Slug != nil && *u.Slug != t.Slug {
			if _, err := tx.Exec(ctx, `UPDATE tenants SET slug = $2 WHERE id = $1`, tid, *u.Slug); err != nil {
				return err
			}
			t.Slug = *u.Slug
			if err := notify(ctx, tx, ChannelPlacement, tid); err != nil {
				return err
			}
		}
		if u.TraceSampleRate != nil && *u.TraceSampleRate != t.TraceSampleRate {
			if _, err := tx.Exec(ctx, `UPDATE tenants SET trace_sample_rate = $2 WHERE id = $1`, tid, *u.TraceSampleRate); err != nil {
				return err
			}
			t.TraceSampleRate = *u.TraceSampleRate
			if err := notify(ctx, tx, ChannelQuotas, tid); err != nil {
				return err
			}
		}
		if u.Plan != nil && *u.Plan != t.Plan {
			p, err := plan.Lookup(*u.Plan)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE tenants SET plan = $2 WHERE id = $1`, tid, p.Name); err != nil {
				return err
			}
			t.Plan = p.Name
			q, _, err := readQuotas(ctx, tx, tid)
			if err != nil {
				return err
			}
			var bound *quotas.BoundError
			if errors.As(q.Within(p.Max), &bound) {
				return &PlanBoundsError{Plan: p.Name, Bound: bound}
			}
			// Nodes follow the plan too: it sets the tenant's replication
			// factor (docs/replication.md, "Replication factor per plan").
			if err := notify(ctx, tx, ChannelQuotas, tid); err != nil {
				return err
			}
		}
		return nil
	})
	return t, classify("update tenant", err)
}

// DeleteTenant deletes a tenant (its credentials, quotas and topic rules go
// with it), leaves its tombstone in deleted_tenants (its usage stays the
// account's; its plan is kept there for billing) and announces it:
// berth_placement to gateways (routing), berth_tenants_deleted to nodes
// (disconnect, close, erase; see docs/contracts.md).
func (s *Store) DeleteTenant(ctx context.Context, accountID, tid string) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `WITH gone AS (
				DELETE FROM tenants WHERE id = $1 AND account_id = $2 RETURNING id, account_id, slug, plan, created_at
			)
			INSERT INTO deleted_tenants (id, account_id, slug, plan, created_at) SELECT id, account_id, slug, plan, created_at FROM gone`,
			tid, accountID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		if err := notify(ctx, tx, ChannelPlacement, tid); err != nil {
			return err
		}
		return notify(ctx, tx, ChannelTenantsDeleted, tid)
	})
	return classify("delete tenant", err)
}

// AssignNode places a tenant that has no node yet (lazy placement) and
// returns the tenant as it is now. A tenant with a node is left alone.
func (s *Store) AssignNode(ctx context.Context, accountID, tid string) (Tenant, error) {
	var t Tenant
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		t, err = scanTenant(tx.QueryRow(ctx,
			`SELECT `+tenantColumns+` FROM tenants WHERE id = $1 AND account_id = $2 FOR UPDATE`, tid, accountID))
		if err != nil || t.NodeID != nil {
			return err
		}
		node, err := placeNode(ctx, tx)
		if err != nil || node == nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE tenants SET node_id = $2 WHERE id = $1`, tid, *node); err != nil {
			return err
		}
		t.NodeID = node
		return notify(ctx, tx, ChannelPlacement, tid)
	})
	return t, classify("assign node", err)
}

// LiveWindow is how recent a node's heartbeat must be for it to count as live.
const LiveWindow = 30 * time.Second

// placeNode picks the least-loaded live node: heartbeat within LiveWindow,
// not draining, below capacity, fewest tenants relative to capacity (ties
// by id). It returns nil when no node qualifies. Placements serialize on a
// transaction-scoped advisory lock taken in its own statement, so the count
// query (a fresh snapshot under READ COMMITTED) sees every placement
// committed before it and concurrent creations never overfill a node.
func placeNode(ctx context.Context, tx pgx.Tx) (*string, error) {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('berth_placement'))`); err != nil {
		return nil, err
	}
	var id string
	err := tx.QueryRow(ctx, fmt.Sprintf(`
		SELECT n.id FROM nodes n
		LEFT JOIN LATERAL (SELECT count(*) AS tenants FROM tenants t WHERE t.node_id = n.id) c ON true
		WHERE n.heartbeat_at > now() - interval '%d seconds' AND NOT n.draining AND c.tenants < n.capacity
		ORDER BY c.tenants::float8 / n.capacity, n.id
		LIMIT 1`, int(LiveWindow/time.Second))).Scan(&id)
	if err == pgx.ErrNoRows {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &id, nil
}

// Node is a registered broker node.
type Node struct {
	ID          string
	MQTTAddr    string
	AdminAddr   string
	Capacity    int
	HeartbeatAt time.Time
	Draining    bool
	Live        bool
}

// TenantNode returns the node a tenant is placed on (ErrNotFound when it
// has none). Live reports a heartbeat within LiveWindow.
func (s *Store) TenantNode(ctx context.Context, tid string) (Node, error) {
	var n Node
	err := s.pool.QueryRow(ctx, fmt.Sprintf(`
		SELECT n.id, n.mqtt_addr, n.admin_addr, n.capacity, n.heartbeat_at, n.draining,
		       n.heartbeat_at > now() - interval '%d seconds'
		FROM tenants t JOIN nodes n ON n.id = t.node_id WHERE t.id = $1`, int(LiveWindow/time.Second)), tid).
		Scan(&n.ID, &n.MQTTAddr, &n.AdminAddr, &n.Capacity, &n.HeartbeatAt, &n.Draining, &n.Live)
	return n, classify("tenant node", err)
}

// UpsertNode registers a node or refreshes its heartbeat. Nodes register
// themselves; the API uses this only in tests and tools.
func (s *Store) UpsertNode(ctx context.Context, n Node) error {
	_, err := s.pool.Exec(ctx,
		`INSERT INTO nodes (id, mqtt_addr, admin_addr, capacity, heartbeat_at, draining)
		 VALUES ($1, $2, $3, $4, $5, $6)
		 ON CONFLICT (id) DO UPDATE SET mqtt_addr = excluded.mqtt_addr, admin_addr = excluded.admin_addr,
		   capacity = excluded.capacity, heartbeat_at = excluded.heartbeat_at, draining = excluded.draining`,
		n.ID, n.MQTTAddr, n.AdminAddr, n.Capacity, n.HeartbeatAt, n.Draining)
	return classify("upsert node", err)
}

// quotaColumns is the quota column list in quotas.Fields order.
var quotaColumns = func() string {
	names := make([]string, len(quotas.Fields))
	for i, f := range quotas.Fields {
		names[i] = f.Name
	}
	return strings.Join(names, ", ")
}()
