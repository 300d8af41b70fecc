package node

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgxlisten"

	"berth.dev/broker/internal/pglisten"
	"berth.dev/broker/internal/quota"
	"berth.dev/broker/internal/store"
	"berth.dev/broker/packet"
)

// Deleted tenants (docs/contracts.md). DELETE /v1/tenants/{tid} removes the
// tenant's row, leaves its tombstone in deleted_tenants and sends NOTIFY
// berth_tenants_deleted '<tenant id>' in the same transaction. Every node
// then, for that tenant:
//
//  1. refuses it from then on: a new connection gets CONNACK 0x87 (3.1.1:
//     5), an admin call 404, a re-authentication DISCONNECT 0x87;
//  2. ends its connections (MQTT 5: DISCONNECT 0x87, 3.1.1: closed) and
//     shuts its shard down, waiting for every holder to let go;
//  3. folds the shard's last counters into usage, closes its store and
//     erases its directory under -data (sessions, retained, message log);
//  4. retires its usage counters and flushes at once: the last deltas land
//     under the tenant's id, attributed to its account by the tombstone.
//
// The tombstone, not the notification, is the authority: a notification
// for a tenant that still has its row (or none in deleted_tenants) is
// ignored, so a tenant that moved is never taken for deleted. A listener
// that (re)connects, at start too, re-reads: every tenant open on the node
// and every tenant directory under -data that belongs to a deleted tenant
// is deleted as above, so a notification missed while the node was down
// or reconnecting costs nothing but time. A shard never opens for a tenant
// with a tombstone (its quotas row is gone with it).

// deletionChannel announces a deleted tenant's id.
const deletionChannel = "berth_tenants_deleted"

// errTenantDeleted refuses a deleted tenant; it is a quota.ErrNoTenant, so
// the admin API answers 404 as for any unknown tenant.
var errTenantDeleted = fmt.Errorf("node: tenant deleted: %w", quota.ErrNoTenant)

// deletionTimeout bounds one tenant's deletion on the node: its shard's
// shutdown, its last holders, the usage flush.
const deletionTimeout = 15 * time.Second

// queryer is what the deletion checks read through: the listener's own
// connection or the pool.
type queryer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// isDeleted reports whether the tenant was deleted since this node started.
func (n *Node) isDeleted(id string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.deleted[id]
	return ok
}

// wasDeleted reports whether the tenant has a tombstone. A database error
// answers false: the caller then treats the tenant as unknown.
func (n *Node) wasDeleted(ctx context.Context, id string) bool {
	var gone bool
	err := n.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM deleted_tenants WHERE id = $1)`, id).Scan(&gone)
	if err != nil {
		n.log.Warn("reading tenant tombstone", "tenant_id", id, "err", err)
	}
	return gone
}

// deleteTenant does everything the node owes a deleted tenant (see the
// comment at the top of this file). It is idempotent; a second call once
// the first has finished only erases the directory again.
func (n *Node) deleteTenant(id string) {
	n.mu.Lock()
	finished, seen := n.deleted[id]
	if seen && !finished {
		n.mu.Unlock()
		return // under way
	}
	n.deleted[id] = false
	if n.closing {
		// Shutdown closes the shard; the next start erases the directory.
		n.mu.Unlock()
		return
	}
	t := n.tenants[id]
	idle := n.closingTenants[id] // closing for idleness: wait for it
	var opened chan struct{}     // opening: it closes what it opened (opening.go)
	if op := n.opening[id]; op != nil {
		opened = op.done
	}
	var done, drained chan struct{}
	if t != nil {
		delete(n.tenants, id)
		done = make(chan struct{})
		n.closingTenants[id] = done // Shutdown waits for it
		if t.refs > 0 {
			drained = make(chan struct{})
			t.drained = drained
		}
	}
	n.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), deletionTimeout)
	defer cancel()
	ended := 0
	for _, wait := range []chan struct{}{idle, opened} {
		if wait != nil {
			select {
			case <-wait:
			case <-ctx.Done():
			}
		}
	}
	if t != nil {
		ended = n.closeDeleted(ctx, t, drained)
	}
	if n.cfg.DataDir != "" {
		if err := store.RemoveTenant(n.cfg.DataDir, id); err != nil {
			n.log.Error("erasing a deleted tenant's directory", "tenant_id", id, "err", err)
		}
	}
	n.quotas.Forget(id)
	n.rules.Forget(id)
	n.meter.Retire(id)
	if t != nil || idle != nil {
		// Its last deltas now, not at the next tick: the tenant is gone
		// and nothing else will remind the node of it. A failed flush
		// stays pending and is retried with the next one.
		if err := n.flusher.Flush(ctx); err != nil {
			n.log.Warn("usage flush after a tenant deletion failed; will retry", "tenant_id", id, "err", err)
		}
	}
	n.mu.Lock()
	n.deleted[id] = true
	if done != nil {
		delete(n.closingTenants, id)
	}
	n.mu.Unlock()
	if done != nil {
		close(done)
	}
	n.log.Info("deleted tenant removed from the node", "tenant_id", id, "connections_ended", ended, "was_open", t != nil)
}

// closeDeleted ends the connections of a deleted tenant's shard (MQTT 5:
// DISCONNECT 0x87), shuts the shard down, waits for its last holders,
// folds its last counters into usage and closes its store. It returns how
// many connections were live.
func (n *Node) closeDeleted(ctx context.Context, t *tenant, drained <-chan struct{}) int {
	t.mu.Lock()
	live := 0
	for _, m := range t.conns {
		live += len(m)
	}
	t.mu.Unlock()
	if err := t.sh.ShutdownWith(ctx, packet.ErrNotAuthorized); err != nil {
		n.log.Warn("shutting down a deleted tenant's shard", "tenant_id", t.id, "err", err)
	}
	if drained != nil {
		// Connections untrack (their traffic and connection time into
		// the tenant's usage) before they let go.
		select {
		case <-drained:
		case <-ctx.Done():
			n.log.Warn("a deleted tenant's shard is still held", "tenant_id", t.id)
		}
	}
	t.sample() // its last counters into usage
	n.fold(t)  // and into the node's metrics
	if t.store != nil {
		if err := t.store.Close(); err != nil {
			n.log.Warn("closing a deleted tenant's storage", "tenant_id", t.id, "err", err)
		}
	}
	return live
}

// followDeletions listens for deleted tenants until ctx ends.
func (n *Node) followDeletions(ctx context.Context) error {
	return pglisten.Run(ctx, pglisten.Config{ConnString: n.cfg.DatabaseURL, AppName: "berth-tenant-deletion-listener", Log: n.log},
		map[string]pgxlisten.Handler{deletionChannel: deletionHandler{n}})
}

type deletionHandler struct{ n *Node }

// HandleNotification deletes the tenant if its tombstone says so.
func (h deletionHandler) HandleNotification(ctx context.Context, note *pgconn.Notification, conn *pgx.Conn) error {
	ids, err := deletedAmong(ctx, conn, []string{note.Payload}, nil)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		h.n.log.Warn("tenant deletion notice for a tenant that is not deleted; ignored", "tenant_id", note.Payload)
	}
	for _, id := range ids {
		h.n.deleteTenant(id)
	}
	return nil
}

// HandleBacklog runs after every (re)connect of the listener, the first
// included: it deletes the deleted tenants open on this node or with a
// directory under -data.
func (h deletionHandler) HandleBacklog(ctx context.Context, _ string, conn *pgx.Conn) error {
	return h.n.sweepDeleted(ctx, conn)
}

// sweepDeleted deletes every deleted tenant the node still holds: a shard
// open or closing, or a directory under -data.
func (n *Node) sweepDeleted(ctx context.Context, q queryer) error {
	n.mu.Lock()
	held := make([]string, 0, len(n.tenants)+len(n.closingTenants))
	for id := range n.tenants {
		held = append(held, id)
	}
	for id := range n.closingTenants {
		held = append(held, id)
	}
	n.mu.Unlock()
	var dirs []string
	if n.cfg.DataDir != "" {
		var err error
		if dirs, err = store.TenantDirNames(n.cfg.DataDir); err != nil {
			return fmt.Errorf("node: listing tenant directories: %w", err)
		}
	}
	if len(held) == 0 && len(dirs) == 0 {
		return nil
	}
	ids, err := deletedAmong(ctx, q, held, dirs)
	if err != nil {
		return err
	}
	for _, id := range ids {
		n.deleteTenant(id)
	}
	return nil
}

// deletedAmong returns the deleted tenants among ids and among the owners
// of the tenant directories named dirs (store.TenantDir: hex of the first
// 16 bytes of the id's SHA-256, computed the same way in SQL).
func deletedAmong(ctx context.Context, q queryer, ids, dirs []string) ([]string, error) {
	if ids == nil {
		ids = []string{}
	}
	if dirs == nil {
		dirs = []string{}
	}
	rows, err := q.Query(ctx, `SELECT id FROM deleted_tenants
		WHERE id = ANY($1) OR encode(substring(sha256(convert_to(id, 'UTF8')) FROM 1 FOR 16), 'hex') = ANY($2)`, ids, dirs)
	if err != nil {
		return nil, fmt.Errorf("node: reading deleted tenants: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("node: reading deleted tenants: %w", err)
	}
	return out, nil
}

// tenantGone reports whether the tenant no longer has its row: a deletion
// this node may not have heard of yet. A database error answers false (a
// re-authentication is not refused for an outage; the notification still
// ends the tenant's connections when it comes).
func (n *Node) tenantGone(ctx context.Context, id string) bool {
	var exists bool
	if err := n.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tenants WHERE id = $1)`, id).Scan(&exists); err != nil {
		n.log.Warn("checking a re-authenticating tenant", "tenant_id", id, "err", err)
		return false
	}
	return !exists
}

// refuseConnect answers a connection of a tenant that has no shard here
// (deleted) with a CONNACK refusal in the client's protocol version
// (reason as is in MQTT 5, its 3.1.1 return code otherwise), after reading
// its CONNECT. A CONNECT larger than maxRefusedConnect, or anything else,
// is just closed. The caller closes c.
func (n *Node) refuseConnect(c net.Conn, reason packet.ReasonCode) {
	_ = c.SetDeadline(time.Now().Add(n.cfg.HeaderTimeout))
	r := packet.NewReader(c, 512)
	fh, body, err := r.ReadPacket(maxRefusedConnect)
	if err != nil || fh.Type != packet.TypeConnect {
		return
	}
	var cp packet.Connect
	if err := cp.Decode(0, fh, body); err != nil && cp.Version == 0 {
		return
	}
	ack := packet.Connack{Reason: reason}
	b, err := ack.Append(make([]byte, 0, 8), cp.Version)
	if err != nil {
		return
	}
	_, _ = c.Write(b)
}

// maxRefusedConnect bounds the CONNECT read only to be refused.
const maxRefusedConnect = 64 << 10
