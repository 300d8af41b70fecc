package node

import (
	"context"
	"errors"
	"net"
	"time"

	"berth.dev/broker/handoff"
	"berth.dev/broker/internal/acl"
	"berth.dev/broker/internal/shard"
	"berth.dev/broker/packet"
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

// SetNetConn replaces the socket: the shard parks an idle connection
// without its net.Conn and rebuilds one on the same socket when it wakes
// (the shard's detach.go, which guards the calls), keeping this wrapper,
// and so the connection's identity (End, the tenant's tracking).
func (c *proxiedConn) SetNetConn(nc net.Conn) { c.Conn = nc }

// serve runs one forwarded connection: verify the header, then hand the
// connection to its tenant's shard until it ends. done is called once it
// has ended and is closed: when serve returns, or later, on another
// goroutine, for a connection the shard parked (shard.Serve).
func (n *Node) serve(c net.Conn, done func()) {
	raw, err := proxyproto.ReadHeader(c, n.cfg.HeaderTimeout, maxHeader, make([]byte, 0, 512))
	if err != nil {
		n.log.Warn("refused connection: no valid PROXY header", "remote", c.RemoteAddr().String(), "err", err)
		_ = c.Close()
		done()
		return
	}
	n.serveHeader(c, raw, nil, done)
}

// admission hears how the admission of a connection handed over a Unix
// socket ends (handoff.go): refused, with nothing written to the socket,
// or taken, from when the node serves it (its refusals then go to the
// device as CONNACKs; t is nil for a refusal without a shard). take
// returns false if the gateway has asked for the connection to be closed
// meanwhile.
type admission interface {
	refuse(r handoff.Reason)
	take(tenantID, credentialID string, t *tenant, pc net.Conn) bool
}

// serveHeader serves c, whose PROXY header raw has been read, as serve
// does; adm is nil for a TCP connection. c is closed and done called as
// serve says.
func (n *Node) serveHeader(c net.Conn, raw []byte, adm admission, done func()) {
	async := false
	defer func() {
		if !async {
			_ = c.Close()
			done()
		}
	}()
	refuse := func(r handoff.Reason) {
		if adm != nil {
			adm.refuse(r)
		}
	}
	var h proxyproto.Header
	var info proxyproto.Info
	if err := n.verifier.Verify(raw, &h, &info); err != nil {
		n.log.Warn("refused connection: PROXY header did not verify", "remote", c.RemoteAddr().String(), "err", err)
		refuse(handoff.RefusedBadHeader)
		return
	}
	if h.Command == proxyproto.CommandLocal { // a gateway's health check
		refuse(handoff.RefusedBadHeader) // a handed-off socket has a device
		return
	}
	rules, err := acl.Parse(info.ACL)
	if err != nil {
		n.log.Warn("refused connection: bad ACL", "tenant_id", info.TenantID, "err", err)
		refuse(handoff.RefusedBadHeader)
		return
	}
	var deadline time.Time
	if info.TokenExpiry > 0 {
		deadline = time.Unix(info.TokenExpiry, 0)
		if !deadline.After(time.Now()) {
			n.log.Info("refused connection: token expired", "tenant_id", info.TenantID)
			refuse(handoff.RefusedBadHeader)
			return
		}
	}
	ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
	t, err := n.tenant(ctx, info.TenantID)
	cancel()
	if errors.Is(err, errNotLeader) || errors.Is(err, errNotVoter) {
		// Replicated, and not served here: the gateway tries the leader
		// (docs/replication.md). CONNACK 0x9C (3.1.1: 3); over a Unix
		// socket, refused not-leader and not a byte to the device.
		n.log.Info("refused connection: tenant led elsewhere", "tenant_id", info.TenantID, "err", err)
		if adm != nil {
			adm.refuse(handoff.RefusedNotLeader)
			return
		}
		n.refuseConnect(c, packet.ErrUseAnotherServer)
		return
	}
	if errors.Is(err, errTenantDeleted) {
		// A gateway that has not heard of the deletion yet: answer
		// CONNACK 0x87 (3.1.1: 5) as it would.
		n.log.Info("refused connection: tenant deleted", "tenant_id", info.TenantID)
		if adm == nil || adm.take(info.TenantID, info.CredentialID, nil, c) {
			n.refuseConnect(c, packet.ErrNotAuthorized)
		}
		return
	}
	if err != nil {
		n.log.Warn("refused connection: tenant unavailable", "tenant_id", info.TenantID, "err", err)
		if errors.Is(err, errShuttingDown) {
			refuse(handoff.RefusedShuttingDown)
		} else {
			refuse(handoff.RefusedUnavailable)
		}
		return
	}
	release := func() { n.release(t) }
	defer func() {
		if !async {
			release()
		}
	}()
	pc := &proxiedConn{Conn: c, remote: net.TCPAddrFromAddrPort(h.Source)}
	if adm != nil && !adm.take(info.TenantID, info.CredentialID, t, pc) {
		return // the gateway closed it before it was taken
	}
	if n.isRevoked(info.CredentialID) {
		// The gateway may not have heard of the revocation yet (a client
		// reconnecting at once): answer CONNACK 0x87 (3.1.1: 5).
		n.log.Info("refused connection: credential revoked", "tenant_id", info.TenantID)
		t.sh.ServeConn(pc, shard.ConnInfo{RemoteAddr: h.Source.String(), TenantID: info.TenantID,
			Refuse: packet.ErrNotAuthorized})
		return
	}
	limiter := t.limits.admitConn()
	if limiter == nil {
		// max_connections reached on this node: a gateway admitted it
		// without Redis (fail-open). CONNACK 0x97 (3.1.1: 3).
		n.log.Info("refused connection: max_connections reached on this node", "tenant_id", info.TenantID)
		t.sh.ServeConn(pc, shard.ConnInfo{RemoteAddr: h.Source.String(), TenantID: info.TenantID,
			Refuse: packet.ErrQuotaExceeded})
		return
	}
	traffic := t.track(info.CredentialID, pc)
	ci := shard.ConnInfo{
		RemoteAddr: h.Source.String(),
		TenantID:   info.TenantID,
		// Sessions belong to the credential that created them: another
		// credential of the tenant cannot take one over (CONNACK 0x85).
		CredentialID:   info.CredentialID,
		Authorizer:     rules,
		Deadline:       deadline,
		AllowAnonymous: true, // the gateway authenticated the client
		Limiter:        limiter,
		// A CONNECT may name the method (the gateway verified its token);
		// re-authenticating needs the API's keys.
		AuthMethod: AuthMethodJWT,
		// Usage per credential: this connection's own meters, summed per
		// credential when the node flushes.
		Traffic: traffic,
	}
	if n.tokens != nil {
		ci.Reauthenticate = n.reauthenticate(info.TenantID, info.CredentialID)
	}
	// The shard may park the connection and return: what follows its end
	// runs in its done.
	async = true
	t.sh.Serve(pc, ci, func() {
		t.untrack(info.CredentialID, pc)
		limiter.close()
		release()
		_ = pc.Close() // closed by the shard already; not c: the socket may have been rebuilt under pc
		done()
	})
}

// AuthMethodJWT is the MQTT 5 Authentication Method of Berth tokens: the
// Authentication Data of a re-authentication (AUTH 0x19) is a fresh
// credential token (docs/contracts.md).
const AuthMethodJWT = "berth-jwt"

// Re-authentication refusals beyond the token's own.
var (
	errOtherCredential = errors.New("node: token is for another credential or tenant")
	errRevoked         = errors.New("node: credential revoked")
)

// reauthenticate returns the check of one connection's re-authentication:
// the token must verify against the API's keys and name the same
// credential and tenant as the connection, the credential must not be
// revoked nor the tenant deleted (its row gone); its exp becomes the
// connection's new deadline. The ACL stays the one the connection opened
// with.
func (n *Node) reauthenticate(tenantID, credID string) func([]byte) (time.Time, error) {
	return func(token []byte) (time.Time, error) {
		ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
		defer cancel()
		c, err := n.tokens.Verify(ctx, credID, token) // sub must be this credential
		switch {
		case err != nil:
			return time.Time{}, err
		case c.TenantID != tenantID:
			return time.Time{}, errOtherCredential
		case n.isRevoked(credID):
			return time.Time{}, errRevoked
		case n.isDeleted(tenantID) || n.tenantGone(ctx, tenantID):
			// Deleted: the notification that ends this connection may
			// not have come yet.
			return time.Time{}, errTenantDeleted
		}
		return c.Expiry, nil
	}
}
