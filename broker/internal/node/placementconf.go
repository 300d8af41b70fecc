package node

import "berth.dev/broker/internal/placement"

// Placement kept fresh (docs/replication.md, "Placement in Postgres"): a
// leader serving a tenant records its placement when it is elected (lead)
// and again after every configuration change it applies (a drain's move,
// a replacement, a plan's factor), so tenant_placement.replicas names the
// voters of the newest committed configuration, not those of the last
// election. The row moves forward only: by epoch (the term), then within
// it by config_index (the configuration's log index; migration 00019), so
// a late write of an older configuration never wins.

// recordConfig records rg's placement when this node serves it and its
// term or configuration index moved since leadLoop last recorded it.
// Called from leadLoop only (it owns rg.recorded).
func (r *replicas) recordConfig(rg *replGroup) {
	// The term before the leader: a Ready stores a new leader before the
	// new term, so a term read while this node still leads is its own.
	term := rg.g.Term()
	if rg.state.Load() != serving || rg.g.Leader() != r.self {
		return
	}
	ci := rg.g.ConfIndex() // before the voters: they are then at least as new
	at := [2]uint64{term, ci}
	if at == rg.recorded {
		return
	}
	rg.recorded = at
	r.placement.Leading(placement.Placement{TenantID: rg.id, Leader: r.n.cfg.ID, Replicas: r.voterNames(rg), Epoch: at[0], ConfigIndex: ci})
}
