package node

import (
	"cmp"
	"context"
	"errors"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgxlisten"

	"berth.dev/broker/internal/pglisten"
	"berth.dev/broker/internal/quota"
	"berth.dev/broker/internal/replica"
)

// A lower factor shrinks the group (docs/replication.md, "Replication
// factor per plan"): a tenant moved to a plan with fewer replicas (business
// → pro → free) has, once its leader sees the plan, more voters than its
// factor. The leader removes the voters that are not among the replicas
// the tenant should have now (wanted: rendezvous ranking, one per zone
// first, so the voters kept stay in distinct zones), one configuration
// change at a time: a dead voter first, then the others, never itself;
// when the only voter too many is the leader, it hands its leadership to
// a live wanted voter, which then removes it. Each removed node deletes
// its copy once it has applied its removal (removal.go). A group short of
// voters (an upgrade) grows as before (membership.go).
//
// The plan comes with the tenants table (every tenantsRefresh) and, at
// once, with NOTIFY berth_quotas, which a plan change sends (services'
// UpdateTenant): followPlans re-reads the tenant's plan on it.

// shrink is the step rg's configuration needs when it has more voters
// than its factor: remove (a voter not wanted, not this node), retry
// after asking for a leadership transfer (only this node is one too
// many), or settle (nothing to shrink). want are the wanted replicas'
// raft ids.
func (r *replicas) shrink(rg *replGroup, cur replica.Members, want []uint64) (old uint64, next int) {
	if len(cur.Voters) <= r.factor(rg.id) {
		return 0, settle
	}
	var extra []uint64
	for _, v := range cur.Voters {
		if !slices.Contains(want, v) {
			extra = append(extra, v)
		}
	}
	// A dead voter first (it holds no quorum up), then by id.
	slices.SortFunc(extra, func(a, b uint64) int {
		return cmp.Or(cmp.Compare(r.rank(a), r.rank(b)), cmp.Compare(a, b))
	})
	for _, v := range extra {
		if v != r.self {
			return v, remove
		}
	}
	if len(extra) == 0 {
		return 0, settle // every voter is wanted: more of them than the factor means wanted is wider
	}
	for _, v := range want { // only this node is one too many: hand over first
		if v != r.self && slices.Contains(cur.Voters, v) && r.host.Alive(v) {
			if err := rg.g.TransferLeadership(v); err == nil {
				r.n.log.Info("replication: handing the leadership over before leaving the group (lower factor)", "tenant_id", rg.id, "to", v)
			}
			return 0, retry
		}
	}
	return 0, retry
}

// rank orders voters to remove: a dead one (0) before a live one (1).
func (r *replicas) rank(id uint64) int {
	if r.host.Alive(id) {
		return 1
	}
	return 0
}

// followPlans listens on berth_quotas for the tenants whose group is open
// here and re-reads each one's plan on a notification (and all of them
// after every reconnect), so that a plan change reaches memberLoop at
// once rather than at the next tenants scan.
func (r *replicas) followPlans() {
	n := r.n
	err := pglisten.Run(n.ctx, pglisten.Config{ConnString: n.cfg.DatabaseURL, AppName: "berth-plan-listener", Log: n.log},
		map[string]pgxlisten.Handler{quota.Channel: pglisten.Rereader{Held: r.openTenants, Reload: r.reloadPlan}})
	if err != nil {
		n.log.Error("plan listener stopped", "err", err)
	}
}

// openTenants lists the tenants whose group is open here, or was removed
// from this node (a higher factor may add it back: removal.go).
func (r *replicas) openTenants() []string {
	r.mu.Lock()
	ids := make([]string, 0, len(r.groups))
	for id := range r.groups {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	return append(ids, r.removedTenants()...)
}

// reloadPlan re-reads one tenant's plan.
func (r *replicas) reloadPlan(ctx context.Context, conn *pgx.Conn, tenantID string) error {
	r.mu.Lock()
	_, open := r.groups[tenantID]
	r.mu.Unlock()
	if !open && !r.isRemoved(tenantID) {
		return nil
	}
	var plan string
	err := conn.QueryRow(ctx, `SELECT plan FROM tenants WHERE id = $1`, tenantID).Scan(&plan)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil // deleted: deletion.go
	case err != nil:
		return err
	}
	r.setPlans(map[string]string{tenantID: plan})
	return nil
}
