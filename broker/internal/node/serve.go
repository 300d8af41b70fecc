package node

import (
	"context"
	"net"
	"time"

	"berth.dev/broker/internal/acl"
	"berth.dev/broker/internal/shard"
	"berth.dev/broker/proxyproto"
)

// maxHeader bounds the PROXY header: addresses, ids, an ACL and the HMAC.
const maxHeader = 16 << 10

// proxiedConn reports the client's real address, from the PROXY header.
type proxiedConn struct {
	net.Conn
	remote net.Addr
}

func (c *proxiedConn) RemoteAddr() net.Addr { return c.remote }

// NetConn exposes the socket so the shard's writer can use writev on it:
// writes pass through unchanged.
func (c *proxiedConn) NetConn() net.Conn { return c.Conn }

// serve runs one forwarded connection: verify the header, then hand the
// connection to its tenant's shard until it ends.
func (n *Node) serve(c net.Conn) {
	defer c.Close()
	raw, err := proxyproto.ReadHeader(c, n.cfg.HeaderTimeout, maxHeader, make([]byte, 0, 512))
	if err != nil {
		n.log.Warn("refused connection: no valid PROXY header", "remote", c.RemoteAddr().String(), "err", err)
		return
	}
	var h proxyproto.Header
	var info proxyproto.Info
	if err := n.verifier.Verify(raw, &h, &info); err != nil {
		n.log.Warn("refused connection: PROXY header did not verify", "remote", c.RemoteAddr().String(), "err", err)
		return
	}
	if h.Command == proxyproto.CommandLocal { // a gateway's health check
		return
	}
	rules, err := acl.Parse(info.ACL)
	if err != nil {
		n.log.Warn("refused connection: bad ACL", "tenant_id", info.TenantID, "err", err)
		return
	}
	var deadline time.Time
	if info.TokenExpiry > 0 {
		deadline = time.Unix(info.TokenExpiry, 0)
		if !deadline.After(time.Now()) {
			n.log.Info("refused connection: token expired", "tenant_id", info.TenantID)
			return
		}
	}
	ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
	t, err := n.tenant(ctx, info.TenantID)
	cancel()
	if err != nil {
		n.log.Warn("refused connection: tenant unavailable", "tenant_id", info.TenantID, "err", err)
		return
	}
	if n.isRevoked(info.CredentialID) {
		n.log.Info("refused connection: credential revoked", "tenant_id", info.TenantID)
		return
	}

	pc := &proxiedConn{Conn: c, remote: net.TCPAddrFromAddrPort(h.Source)}
	t.track(info.CredentialID, pc)
	defer t.untrack(info.CredentialID, pc)
	limiter := t.limits.newConn()
	defer limiter.close()
	t.sh.ServeConn(pc, shard.ConnInfo{
		RemoteAddr:     h.Source.String(),
		TenantID:       info.TenantID,
		Authorizer:     rules,
		Deadline:       deadline,
		AllowAnonymous: true, // the gateway authenticated the client
		Limiter:        limiter,
	})
}
