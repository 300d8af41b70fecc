package node

import (
	"context"
	"time"

	"berth.dev/broker/packet"
)

// Idle tenants. A tenant's shard that has had no holder (connection being
// served, admin call) for Config.IdleTimeout is shut down and its store
// closed; the next connection or admin call opens it again, and with a
// data directory its sessions and retained messages come back from the
// WAL. Without one, a shard holding sessions or retained messages stays
// open (closing it would lose them), as does one with a delayed will
// pending.
//
//	open ──(refs 0, IdleTimeout)──▶ closing (closingTenants[id]) ──▶ closed
//	  ▲                                   │ a new holder waits for it
//	  └────────────── tenant(id) ─────────┘

// closeIdleLoop closes idle shards until the node shuts down.
func (n *Node) closeIdleLoop() {
	every := min(max(n.cfg.IdleTimeout/4, 10*time.Millisecond), 30*time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case now := <-tick.C:
			n.closeIdle(now)
		}
	}
}

// closeIdle closes every shard idle since before now - IdleTimeout.
func (n *Node) closeIdle(now time.Time) {
	persistent := n.cfg.DataDir != ""
	var idle []*tenant
	n.mu.Lock()
	if n.closing {
		n.mu.Unlock()
		return
	}
	for id, t := range n.tenants {
		if t.refs > 0 || now.Sub(t.idleSince) < n.cfg.IdleTimeout || !t.sh.Idle(persistent) {
			continue
		}
		delete(n.tenants, id)
		n.closingTenants[id] = make(chan struct{})
		idle = append(idle, t)
	}
	n.mu.Unlock()
	for _, t := range idle {
		n.closeTenant(t, packet.ErrServerShuttingDown)
	}
}

// closeTenant shuts down an idle tenant's shard (MQTT 5 clients told
// reason), closes its store and lets waiting openers go on.
func (n *Node) closeTenant(t *tenant, reason packet.ReasonCode) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := t.sh.ShutdownWith(ctx, reason); err != nil {
		n.log.Warn("closing idle tenant shard", "tenant_id", t.id, "err", err)
	}
	t.sample() // its last counters into usage
	n.fold(t)  // and into the node's metrics
	if t.store != nil {
		if err := t.store.Close(); err != nil {
			n.log.Warn("closing idle tenant storage", "tenant_id", t.id, "err", err)
		}
	}
	n.quotas.Forget(t.id) // read afresh on reopen
	n.rules.Forget(t.id)
	n.mu.Lock()
	done := n.closingTenants[t.id]
	delete(n.closingTenants, t.id)
	n.mu.Unlock()
	close(done)
	n.log.Info("idle tenant shard closed", "tenant_id", t.id)
}
