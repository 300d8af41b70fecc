package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"berth.dev/broker/internal/msgtrace"
	"berth.dev/broker/internal/quota"
	"berth.dev/broker/internal/shard"
	"berth.dev/broker/internal/store"
	"berth.dev/quotas"
)

// Opening a tenant's shard. The open (quotas, rules and the month's usage
// from Postgres; the store: message-log segments, sessions, retained
// messages; the shard's recovery) runs without Node.mu, so one slow open
// (a large log on a cold or busy disk) stalls no other tenant's open, no
// release, no usage flush, metrics scrape or /readyz. Node.opening holds
// the opens under way: another caller for the same tenant waits for that
// open (or for its own ctx) instead of opening the tenant twice.
//
//	tenant(id) ─▶ opening[id] ─(open, no lock)─▶ under mu: closing? deleted?
//	                   │                            │ no:  tenants[id], held once
//	                   │                            │ yes: what was opened closes
//	     waiters ◀── done ◀─────────────────────────┘
//
// The entry stays in Node.opening until what was opened is in
// Node.tenants or closed again: Shutdown and a deletion wait for it, so a
// deletion erases the directory only once the store is closed.

// opening is one open under way.
type opening struct {
	done chan struct{} // closed when the open has finished
	err  error         // the open's error, set before done is closed
}

// tenant returns the tenant's shard, opening it on first use (or again
// after it closed for idleness), and holds it open: the caller calls
// n.release(t) when done with it.
func (n *Node) tenant(ctx context.Context, id string) (*tenant, error) {
	for {
		n.mu.Lock()
		t, ok := n.tenants[id]
		closing, closed := n.closing, n.closingTenants[id]
		_, deleted := n.deleted[id]
		op := n.opening[id]
		var mine *opening
		switch {
		case deleted || closing:
		case ok:
			t.refs++
		case closed == nil && op == nil:
			mine = &opening{done: make(chan struct{})}
			n.opening[id] = mine
		}
		n.mu.Unlock()
		var err error
		switch {
		case deleted:
			return nil, errTenantDeleted
		case closing:
			return nil, errShuttingDown
		case ok:
			return t, nil
		case closed != nil:
			// Closing for idleness: its storage is still being closed.
			// Replicated and led elsewhere now (its devices are being
			// moved, moverate.go): refused at once, not after the move.
			if r := n.replication(); r != nil {
				if _, err := r.serving(id); err != nil {
					return nil, err
				}
			}
			select {
			case <-closed:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		case op != nil:
			// Another caller is opening it.
			select {
			case <-op.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if op.err == nil || errors.Is(op.err, context.Canceled) || errors.Is(op.err, context.DeadlineExceeded) {
				continue // opened: take a hold; or that caller gave up: look again
			}
			err = op.err
		default:
			t, err = n.openTenant(ctx, id, mine)
		}
		switch {
		case errors.Is(err, errBusy):
			continue
		case errors.Is(err, quota.ErrNoTenant) && !errors.Is(err, errTenantDeleted):
			// Deleted while this node was down or not listening? Then
			// its directory here goes too.
			if n.wasDeleted(ctx, id) {
				n.deleteTenant(id)
				return nil, errTenantDeleted
			}
		case err == nil && mine != nil:
			// Before the connection that opened it is served (revoke.go).
			n.purgeDeadOwners(ctx, t)
		}
		return t, err
	}
}

// openTenant opens the tenant's shard for op (registered in n.opening by
// tenant) and, unless the node began closing or the tenant was deleted
// meanwhile, adds it to n.tenants held once. It finishes op either way.
func (n *Node) openTenant(ctx context.Context, id string, op *opening) (*tenant, error) {
	start := time.Now()
	t, q, took, err := n.openShard(ctx, id)
	if err != nil {
		n.finishOpen(id, op, err)
		return nil, err
	}
	n.mu.Lock()
	_, deleted := n.deleted[id]
	switch {
	case n.closing:
		err = errShuttingDown
	case deleted:
		err = errTenantDeleted
	default:
		// Under mu: a revocation is either in n.revoked already or will
		// find the tenant in n.tenants.
		n.purgeRevoked(id, t.sh)
		n.tenants[id] = t
		delete(n.opening, id)
		// Registered first: a rule change from now on finds the tenant,
		// and one before it is in what the store holds.
		t.sh.SetTopicRules(n.rules.Current(id))
	}
	n.mu.Unlock()
	if err != nil {
		n.closeOpened(t)
		if deleted {
			n.quotas.Forget(id)
			n.rules.Forget(id)
		}
		n.finishOpen(id, op, err)
		return nil, err
	}
	close(op.done)
	// A quota change while the shard opened found no tenant to apply to.
	if now, err := n.quotas.Get(ctx, id); err == nil && now != q {
		n.applyQuotas(id, now)
	}
	n.log.Info("tenant shard opened", "tenant_id", id, "took", time.Since(start).Round(time.Millisecond),
		"storage_took", took.storage.Round(time.Millisecond), "recovery_took", took.recovery.Round(time.Millisecond))
	return t, nil
}

// finishOpen ends an open that put nothing in n.tenants.
func (n *Node) finishOpen(id string, op *opening, err error) {
	op.err = err
	n.mu.Lock()
	delete(n.opening, id)
	n.mu.Unlock()
	close(op.done)
}

// closeOpened closes a shard opened for nothing: the node began closing,
// or its tenant was deleted, while it opened. Nobody else holds it.
func (n *Node) closeOpened(t *tenant) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := t.sh.Shutdown(ctx); err != nil {
		n.log.Warn("closing a tenant shard opened meanwhile", "tenant_id", t.id, "err", err)
	}
	if t.store != nil {
		if err := t.store.Close(); err != nil {
			n.log.Warn("closing the storage of a tenant shard opened meanwhile", "tenant_id", t.id, "err", err)
		}
	}
}

// openTook is how long an open's phases took: the store (the logs'
// segments, compaction of the keyed logs) and the shard's recovery
// (retained messages, sessions, pending messages from the log).
type openTook struct{ storage, recovery time.Duration }

// openShard reads what the tenant's shard needs and opens it, store
// included, without Node.mu. The tenant it returns is held once.
func (n *Node) openShard(ctx context.Context, id string) (*tenant, quotas.Quotas, openTook, error) {
	var took openTook
	q, err := n.quotas.Get(ctx, id)
	if err != nil {
		return nil, q, took, err
	}
	if _, err := n.rules.Load(ctx, id); err != nil {
		return nil, q, took, err
	}
	var monthUsed int64
	// The monthly quota counts accepted messages, as billing does.
	if err := n.pool.QueryRow(ctx, `SELECT coalesce(sum(messages_accepted), 0)::bigint FROM usage
		WHERE tenant_id = $1 AND bucket >= date_trunc('month', now())`, id).Scan(&monthUsed); err != nil {
		return nil, q, took, fmt.Errorf("node: monthly usage of %s: %w", id, err)
	}
	opts := shardOptions(q, n, id)
	u := n.meter.Tenant(id)
	// The shard records latencies straight into the tenant's meter, which
	// outlives it (a shard closed for idleness loses no sample).
	opts.Latency = shard.Latency{Delivery: &u.Latency.Delivery, Ack: &u.Latency.Ack, Connect: &u.Latency.Connect}
	sampler := msgtrace.NewSampler(n.quotas.TraceSampleRate(id), float64(n.cfg.TraceCap))
	opts.Tracing = shard.Tracing{TenantID: id, Sampler: sampler, Sink: n.spans}
	var st, shared *store.WAL
	began := time.Now()
	if r := n.replication(); r != nil {
		// The store is the tenant's replicated log's, open while this
		// node holds a replica: not the shard's to close.
		l, err := r.serving(id)
		if err != nil {
			return nil, q, took, err
		}
		shared = l.Store()
		opts.Store, opts.MessageLog, opts.Replication = shared, shared.Messages(), l
	} else if n.cfg.DataDir != "" {
		if st, err = store.OpenTenant(n.cfg.DataDir, id, store.WALOptions{
			Fsync: n.cfg.Fsync, FsyncInterval: n.cfg.FsyncInterval, Logger: opts.Logger,
			SegmentBytes: segmentBytes(q.RetentionBytes), OnFsync: n.metrics().observeFsync,
			FS: n.cfg.storeFS,
		}); err != nil {
			return nil, q, took, fmt.Errorf("node: storage of %s: %w", id, err)
		}
		opts.Store, opts.MessageLog = st, st.Messages()
	}
	took.storage = time.Since(began)
	began = time.Now()
	sh := shard.New(opts) // recovery: retained messages, sessions, pending messages
	if err := sh.Start(n.ctx); err != nil {
		if st != nil {
			st.Close()
		}
		return nil, q, took, fmt.Errorf("node: start shard for %s: %w", id, err)
	}
	took.recovery = time.Since(began)
	t := &tenant{id: id, sh: sh, store: st, shared: shared, usage: u, traces: sampler, limits: newTenantLimits(q, monthUsed),
		conns: make(map[string]map[net.Conn]*shard.Traffic), refs: 1}
	return t, q, took, nil
}
