package node

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Replication factor per plan (docs/replication.md, "Replication factor
// per plan"): the voters of a tenant's group, at most Config.Replicas (the
// operator's cap, -replicas) and at most the cluster's nodes.
//
//   - free: 1. A free tenant has no availability promise; one replica
//     costs one disk write per message rather than three, and free
//     tenants are most tenants. Its data lives on one node's disk.
//   - pro: 3, survives one node down (drain, upgrade, crash).
//   - business: 5, survives two at once (one drained for maintenance
//     while another fails); needs -replicas 5 and five nodes, else 3.
//   - a plan this node does not know: 3.
func planReplicas(plan string) int {
	switch plan {
	case "free":
		return 1
	case "business":
		return 5
	}
	return 3
}

// factor is the number of voters of the tenant's group.
func (r *replicas) factor(tenantID string) int {
	r.plansMu.Lock()
	plan, ok := r.plans[tenantID]
	r.plansMu.Unlock()
	if !ok {
		ctx, cancel := context.WithTimeout(r.n.ctx, 5*time.Second)
		defer cancel()
		err := r.n.pool.QueryRow(ctx, `SELECT plan FROM tenants WHERE id = $1`, tenantID).Scan(&plan)
		if err != nil && err != pgx.ErrNoRows {
			r.n.log.Warn("replication: a tenant's plan", "tenant_id", tenantID, "err", err)
		}
		if err == nil {
			r.setPlans(map[string]string{tenantID: plan})
		}
	}
	return min(planReplicas(plan), r.size)
}

// setPlans records tenants' plans (read with the tenants table); a
// changed plan bumps plansVersion, so that memberLoop looks again.
func (r *replicas) setPlans(plans map[string]string) {
	r.plansMu.Lock()
	defer r.plansMu.Unlock()
	if r.plans == nil {
		r.plans = map[string]string{}
	}
	for id, p := range plans {
		if was, ok := r.plans[id]; ok && was != p {
			r.plansVersion++
		}
		r.plans[id] = p
	}
}

// loadPlans reads every tenant's id and plan.
func (r *replicas) loadPlans(ctx context.Context) ([]string, error) {
	rows, err := r.n.pool.Query(ctx, `SELECT id, plan FROM tenants`)
	if err != nil {
		return nil, fmt.Errorf("node: replication: tenants: %w", err)
	}
	type row struct{ ID, Plan string }
	list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		return nil, fmt.Errorf("node: replication: tenants: %w", err)
	}
	ids := make([]string, 0, len(list))
	plans := make(map[string]string, len(list))
	for _, x := range list {
		ids = append(ids, x.ID)
		plans[x.ID] = x.Plan
	}
	r.setPlans(plans)
	return ids, nil
}

// settleKey is what memberLoop's judgement of rg depends on: the peers'
// raft ids and draining flags, the plans, this node's drain and the term.
func (r *replicas) settleKey(rg *replGroup) [4]uint64 {
	r.plansMu.Lock()
	pv := r.plansVersion
	r.plansMu.Unlock()
	d := uint64(0)
	if r.movingOff.Load() {
		d = 1
	}
	if r.rebalanceActive() {
		d |= 2
	}
	return [4]uint64{r.host.IdentityChanges(), pv, d, rg.g.Term()}
}
