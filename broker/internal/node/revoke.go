package node

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgxlisten"

	"berth.dev/broker/internal/pglisten"
	"berth.dev/broker/internal/shard"
	"berth.dev/broker/packet"
)

// revocationChannel announces a revoked credential id (docs/contracts.md).
const revocationChannel = "berth_credentials"

// revoked remembers revoked credential ids seen since start, so a header
// signed just before the revocation cannot open a new connection.
type revoked struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

func (n *Node) isRevoked(cred string) bool {
	n.revoked.mu.Lock()
	defer n.revoked.mu.Unlock()
	_, ok := n.revoked.ids[cred]
	return ok
}

// revoke closes every live connection of the credential, in every tenant
// open on this node, and deletes every session the credential owns, live
// or offline, with its subscriptions and queue (a tenant opened later
// drops them as it opens: purgeRevoked).
func (n *Node) revoke(cred string) {
	n.revoked.mu.Lock()
	if n.revoked.ids == nil {
		n.revoked.ids = make(map[string]struct{})
	}
	n.revoked.ids[cred] = struct{}{}
	n.revoked.mu.Unlock()

	n.mu.Lock()
	ts := make([]*tenant, 0, len(n.tenants))
	for _, t := range n.tenants {
		ts = append(ts, t)
	}
	n.mu.Unlock()
	for _, t := range ts {
		if k := t.sh.EndSessionsOf(cred, packet.ErrNotAuthorized); k > 0 {
			n.log.Info("ended sessions of a revoked credential", "tenant_id", t.id, "sessions", k)
		}
		if k := t.closeCredential(cred); k > 0 {
			n.log.Info("closed connections of a revoked credential", "tenant_id", t.id, "connections", k)
		}
	}
}

// followRevocations listens for revocations until ctx ends. After every
// (re)connect it also closes live connections whose credentials were revoked
// while it was away.
func (n *Node) followRevocations(ctx context.Context) error {
	return pglisten.Run(ctx, pglisten.Config{ConnString: n.cfg.DatabaseURL, AppName: "berth-revocation-listener", Log: n.log},
		map[string]pgxlisten.Handler{revocationChannel: revocationHandler{n}})
}

type revocationHandler struct{ n *Node }

func (h revocationHandler) HandleNotification(_ context.Context, note *pgconn.Notification, _ *pgx.Conn) error {
	h.n.revoke(note.Payload)
	return nil
}

// HandleBacklog runs after every (re)connect of the listener: it may have
// missed revocations, so every credential the node holds anything of (a
// live connection, or a session in an open shard, connected or offline)
// is checked, and those revoked or gone are revoked here.
func (h revocationHandler) HandleBacklog(ctx context.Context, _ string, conn *pgx.Conn) error {
	held := h.n.liveCredentials()
	for _, t := range h.n.openTenants() {
		held = append(held, t.sh.SessionOwners()...)
	}
	dead, err := deadCredentials(ctx, conn, held)
	if err != nil {
		return err
	}
	for _, id := range dead {
		h.n.revoke(id)
	}
	return nil
}

// deadCredentials returns those of ids that are revoked or have no row
// (deleted): credentials that may hold nothing on the node.
func deadCredentials(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := q.Query(ctx, `SELECT id FROM unnest($1::text[]) AS u(id)
		WHERE NOT EXISTS (SELECT 1 FROM credentials c WHERE c.id = u.id AND c.revoked_at IS NULL)`, ids)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// purgeDeadOwners ends the sessions a freshly opened shard restored for
// credentials revoked or deleted while no notice reached this node (it
// was down, or its listener was): the node checks its shard's session
// owners against Postgres before the connection that opened the shard
// is served, and revokes the dead ones (their sessions go, their
// connections are refused). When Postgres does not answer, the sessions
// stay until the listener's next (re)connect checks them (HandleBacklog).
func (n *Node) purgeDeadOwners(ctx context.Context, t *tenant) {
	owners := t.sh.SessionOwners()
	if len(owners) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	dead, err := deadCredentials(ctx, n.pool, owners)
	if err != nil {
		n.log.Warn("session owners not checked", "tenant_id", t.id, "err", err)
		return
	}
	for _, id := range dead {
		n.log.Info("credential revoked or deleted while away; its sessions go", "tenant_id", t.id, "credential_id", id)
		n.revoke(id)
	}
}

// openTenants returns the tenants whose shards are open.
func (n *Node) openTenants() []*tenant {
	n.mu.Lock()
	defer n.mu.Unlock()
	ts := make([]*tenant, 0, len(n.tenants))
	for _, t := range n.tenants {
		ts = append(ts, t)
	}
	return ts
}

// purgeRevoked ends the sessions a freshly opened shard restored for
// credentials revoked since this node started. n.mu is held, so a
// revocation either is already in n.revoked or will find the tenant.
func (n *Node) purgeRevoked(tenantID string, sh *shard.Shard) {
	n.revoked.mu.Lock()
	ids := make([]string, 0, len(n.revoked.ids))
	for id := range n.revoked.ids {
		ids = append(ids, id)
	}
	n.revoked.mu.Unlock()
	for _, id := range ids {
		if k := sh.EndSessionsOf(id, packet.ErrNotAuthorized); k > 0 {
			n.log.Info("ended sessions of a revoked credential", "tenant_id", tenantID, "sessions", k)
		}
	}
}

func (n *Node) liveCredentials() []string {
	n.mu.Lock()
	ts := make([]*tenant, 0, len(n.tenants))
	for _, t := range n.tenants {
		ts = append(ts, t)
	}
	n.mu.Unlock()
	var out []string
	for _, t := range ts {
		t.mu.Lock()
		for cred := range t.conns {
			out = append(out, cred)
		}
		t.mu.Unlock()
	}
	return out
}
