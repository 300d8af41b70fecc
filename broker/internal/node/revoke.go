package node

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgxlisten"

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
	l := &pgxlisten.Listener{
		Connect:        func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, n.cfg.DatabaseURL) },
		LogError:       func(_ context.Context, err error) { n.log.Warn("revocation listener", "err", err) },
		ReconnectDelay: time.Second,
	}
	l.Handle(revocationChannel, revocationHandler{n})
	err := l.Listen(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

type revocationHandler struct{ n *Node }

func (h revocationHandler) HandleNotification(_ context.Context, note *pgconn.Notification, _ *pgx.Conn) error {
	h.n.revoke(note.Payload)
	return nil
}

func (h revocationHandler) HandleBacklog(ctx context.Context, _ string, conn *pgx.Conn) error {
	live := h.n.liveCredentials()
	if len(live) == 0 {
		return nil
	}
	rows, err := conn.Query(ctx, `SELECT id FROM credentials WHERE id = ANY($1) AND revoked_at IS NOT NULL`, live)
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, id := range ids {
		h.n.revoke(id)
	}
	return nil
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
