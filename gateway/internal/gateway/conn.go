package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/coder/websocket"

	"berth.dev/broker/jwtauth"
	"berth.dev/broker/packet"
	"berth.dev/broker/proxyproto"
	"berth.dev/gateway/internal/connlimit"
	"berth.dev/gateway/internal/route"
)

// errNotConnect: the first packet was not a CONNECT [MQTT-3.1.0-1].
var errNotConnect = errors.New("gateway: first packet is not CONNECT")

// connectChunk is the most readConnect allocates ahead of the bytes that
// arrived: a peer announcing a large CONNECT and sending nothing pins this
// much, not its Remaining Length.
const connectChunk = 4 << 10

// readConnect reads exactly one packet from r, byte-exact: the fixed header
// one byte at a time after the first two, then the body, so nothing after
// the CONNECT is consumed and the rest of the stream can be spliced. A
// packet larger than maxSize is refused before its body is read. The
// buffer grows as the body arrives (connectChunk at first, then doubling,
// never past the announced size), so what a slow or silent peer pins is
// about what it sent. It returns the whole packet, its fixed header and
// its body (aliasing it).
func readConnect(r io.Reader, maxSize int) (raw []byte, fh packet.FixedHeader, body []byte, err error) {
	hdr := make([]byte, 2, 5)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, fh, nil, err
	}
	var n int
	for {
		fh, n, err = packet.ParseFixedHeader(hdr)
		if err != nil {
			return nil, fh, nil, err
		}
		if n > 0 {
			break
		}
		if len(hdr) == 5 { // ParseFixedHeader reports a 5th length byte as malformed; be safe anyway
			return nil, fh, nil, packet.ErrMalformed
		}
		hdr = hdr[:len(hdr)+1]
		if _, err := io.ReadFull(r, hdr[len(hdr)-1:]); err != nil {
			return nil, fh, nil, err
		}
	}
	if fh.Type != packet.TypeConnect {
		return nil, fh, nil, errNotConnect
	}
	total := n + fh.Remaining
	if total > maxSize {
		return nil, fh, nil, packet.ErrPacketTooLarge
	}
	raw = make([]byte, n, n+min(fh.Remaining, connectChunk))
	copy(raw, hdr)
	for len(raw) < total {
		if len(raw) == cap(raw) {
			raw = slices.Grow(raw, min(total-len(raw), max(len(raw), connectChunk)))
		}
		m, err := r.Read(raw[len(raw):min(cap(raw), total)])
		raw = raw[:len(raw)+m]
		if err != nil && len(raw) < total {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, fh, nil, err
		}
	}
	return raw, fh, raw[n:], nil
}

// decodeRefusal is the refusal of a CONNECT whose body p could not decode
// (err from packet.Connect.Decode; p.Version as far as it was read).
func decodeRefusal(p *packet.Connect, err error) refusal {
	var code packet.ReasonCode
	errors.As(err, &code)
	switch {
	case code == packet.ErrUnsupportedProtocolVersion:
		return refuseProtocol
	case code == packet.ErrClientIDNotValid:
		return refuseClientID
	case p.Version == packet.Version5:
		return refuseMalformedV5
	default:
		return refuseMalformed
	}
}

// handle serves one client connection on client (TCP, TLS after the
// handshake, or a WebSocket stream, over TLS or not). transport is
// KindTCP, KindTLS, KindWS or KindWSS; sni is the TLS server name, if any.
// Along the way it notes what the connect's trace will say (ct); refuse,
// or the forward to the node, turns that into spans. pend is the
// connection's pending slot (nil-safe): released once the CONNECT is
// relayed, or when handle returns, whichever is first.
func (g *Gateway) handle(s *session, client net.Conn, start time.Time, transport, sni string, pend *pendingSlot) {
	g.m.active.Inc()
	defer g.m.active.Dec()
	defer pend.release()
	remote := s.remoteAddr() // the device's, also behind a PROXY-protocol balancer
	log := g.log.With("conn_id", g.nextID.Add(1), "remote", remote.String())
	deadline := start.Add(g.cfg.ConnectTimeout)
	client.SetDeadline(deadline)
	ctx, cancel := context.WithDeadline(g.connCtx, deadline)
	defer cancel()
	ct := connTrace{start: start, transport: transport, source: sourceOf(remote)}
	ct.enter(phaseParse, time.Now())

	// A refused CONNECT's CONNACK and close, and the verification of a
	// token, are done under a handshake slot (handshake.go): the close is
	// at handle's return, before the slot is freed.
	hs := handshakeHold{h: g.hs}
	defer hs.end(client)
	// peeked: the CONNECT is still in the socket (handoffconn.go); read out before a close.
	sock, raw, fh, body, err := g.connectBytes(client, transport)
	peeked := sock != nil && err == nil
	defer func() {
		if peeked {
			discardPeeked(sock, len(raw))
		}
	}()
	if err != nil {
		switch {
		case errors.Is(err, packet.ErrPacketTooLarge):
			g.refuseInSlot(ctx, &hs, client, log, &ct, refuseTooLarge, err)
		case errors.Is(err, os.ErrDeadlineExceeded):
			g.refuse(client, log, &ct, refuseTimeout, err)
		case errors.Is(err, net.ErrClosed):
			// Cut by Shutdown after the drain grace, still waiting for it.
			g.refuse(client, log, &ct, refuseShuttingDown, err)
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			// Gone before saying anything: a port scan or a health check.
			// No connect, so no span.
		default:
			g.refuseInSlot(ctx, &hs, client, log, &ct, refuseMalformed, err)
		}
		return
	}
	var p packet.Connect
	if err := p.Decode(0, fh, body); err != nil {
		ct.version = p.Version
		g.refuseInSlot(ctx, &hs, client, log, &ct, decodeRefusal(&p, err), err)
		return
	}
	ct.version, ct.clientID = p.Version, string(p.ClientID)
	if p.Version == packet.Version5 {
		ct.parent = traceParent(p.Props.UserProperties)
	}
	log = log.With("client_id", ct.clientID)

	// Authentication: user name = credential id, password = token.
	ct.enter(phaseAuth, time.Now())
	if !p.UsernameFlag || !p.PasswordFlag {
		g.refuseInSlot(ctx, &hs, client, log, &ct, refuseBadCredentials, errors.New("no user name or password"))
		return
	}
	// A token whose header verified here before costs a signature check:
	// in a slot. Another may make the verifier wait for the key set: not.
	known := g.hs.known.has(p.Password)
	if known && !hs.enter(ctx) {
		g.refuse(client, log, &ct, refuseBusy, errors.New("no handshake slot freed within -handshake-wait"))
		return
	}
	claims, err := g.d.Auth.Verify(ctx, string(p.Username), p.Password)
	switch {
	case err == nil:
		if !known {
			g.hs.known.add(p.Password)
		}
		hs.leave() // the rest waits on other services, not on the CPU
	case errors.Is(err, jwtauth.ErrUnknownKey):
		g.hs.known.forget(p.Password)
	}
	if err != nil {
		r := refuseBadCredentials
		if errors.Is(err, jwtauth.ErrKeysUnavailable) {
			r = refuseAuthDown
		}
		g.refuseInSlot(ctx, &hs, client, log, &ct, r, err)
		return
	}
	tid := claims.TenantID
	ct.tenant, ct.credential = tid, claims.Subject
	log = log.With("tenant_id", tid, "credential_id", claims.Subject)

	// Watch before checking, so a revocation arriving from now on is seen.
	watch := g.d.Revoked.Watch(claims.Subject)
	handedOff := false // then tryHandOff has stopped watch for the backstop's own, and the node's closed ends lease
	defer func() {
		if !handedOff {
			watch.Stop()
		}
	}()
	select {
	case <-watch.Done():
		g.refuse(client, log, &ct, refuseRevoked, errors.New("credential revoked"))
		return
	default:
	}

	// Admission: the tenant's placement and quota, then its connection limit.
	ct.enter(phaseAdmission, time.Now())
	rt, err := g.d.Routes.Lookup(ctx, tid)
	switch {
	case errors.Is(err, route.ErrNoTenant):
		g.refuse(client, log, &ct, refuseNoTenant, err)
		return
	case err != nil:
		g.refuse(client, log, &ct, refuseNoRoute, err)
		return
	}
	if slug, ok := g.sniSlug(sni); ok && slug != rt.Slug {
		g.refuse(client, log, &ct, refuseSNI, fmt.Errorf("SNI %q is not tenant %s (%s)", sni, tid, rt.Slug))
		return
	}

	limit := rt.MaxConnections
	if limit < 0 {
		limit = g.cfg.DefaultMaxConnections
	}
	ct.limit, ct.limitKnown = limit, true
	lease, err := g.d.Limits.Acquire(ctx, tid, limit)
	switch {
	case errors.Is(err, connlimit.ErrLimit):
		g.refuse(client, log, &ct, refuseOverLimit, fmt.Errorf("limit %d", limit))
		return
	case err != nil:
		g.refuse(client, log, &ct, refuseLimiterDown, err)
		return
	}
	defer func() {
		if !handedOff {
			lease.Release()
		}
	}()

	if g.isClosing() {
		// Accepted just before Shutdown: do not start a relay that the
		// drain would only cut. MQTT 5 says why; 3.1.1 gets 0x03.
		g.refuse(client, log, &ct, refuseShuttingDown, errors.New("gateway shutting down"))
		return
	}

	// Route: dial the node, send it the signed PROXY header and the CONNECT.
	ct.enter(phaseRoute, time.Now())
	src, dst := addrPort(remote), addrPort(client.LocalAddr())
	if !src.IsValid() || !dst.IsValid() {
		src, dst = netip.AddrPort{}, netip.AddrPort{} // UNSPEC rather than half an address
	}
	var exp int64
	if !claims.Expiry.IsZero() {
		exp = claims.Expiry.Unix()
	}
	info := proxyproto.Info{TenantID: tid, CredentialID: claims.Subject, ACL: claims.ACL, TokenExpiry: exp}
	header := func() ([]byte, error) {
		return g.d.Signer.Append(make([]byte, 0, 256+len(claims.ACL)+len(raw)), src, dst, &info)
	}
	if peeked {
		peeked = false // handed off, dropped, or read out for the relay
		var done bool
		if rt, done, handedOff = g.tryHandOff(ctx, log, &ct, sock, raw, rt, header, lease, watch, pend); done {
			return
		}
	}
	// The node's CONNACK is read here (a node not leading the tenant is
	// retried, leader.go), then relayed.
	node, answer, rt, r, err := g.forward(ctx, log, s, rt, p.Version, header, raw)
	ct.node = rt.NodeID
	if err != nil {
		g.refuse(client, log, &ct, r, err)
		return
	}
	defer node.Close()
	if _, err := client.Write(answer); err != nil {
		return // the device left while the node answered
	}
	client.SetDeadline(time.Time{}) // from here the node owns keep-alive
	pend.release()                  // authenticated and relayed: no longer pending
	now := time.Now()
	g.m.connects.WithLabelValues(tid, transport).Inc()
	g.m.latency.WithLabelValues(tid).Observe(now.Sub(start).Seconds())
	g.traceConnect(&ct, now, nil, nil)
	log.Debug("relaying", "node", rt.NodeAddr, "degraded_limit", lease.Degraded)

	// Revocation closes the live connection.
	relayDone := make(chan struct{})
	defer close(relayDone)
	go func() {
		select {
		case <-watch.Done():
			g.m.revoked.Inc()
			// The node hears of the revocation too and ends the connection
			// with a reason the device can read (MQTT 5 DISCONNECT 0x87);
			// the relay then closes both sides. Close it here only if the
			// node has not done so within the grace period.
			grace := time.NewTimer(revokeGrace)
			defer grace.Stop()
			select {
			case <-relayDone:
				log.Info("credential revoked; the node closed the connection")
			case <-grace.C:
				log.Info("credential revoked; closing connection")
				s.close()
			}
		case <-relayDone:
		}
	}()
	up, down := relay(client, node, g.bufs)
	log.Debug("connection closed", "bytes_up", up, "bytes_down", down)
}

// revokeGrace is how long a revoked credential's connection may stay open
// for the node's DISCONNECT to reach the device.
const revokeGrace = 2 * time.Second

// sniSlug returns the tenant slug named by a TLS server name of the form
// <slug>.<TenantDomain>.
func (g *Gateway) sniSlug(sni string) (string, bool) {
	if sni == "" || g.cfg.TenantDomain == "" {
		return "", false
	}
	slug, ok := strings.CutSuffix(strings.ToLower(sni), "."+strings.ToLower(g.cfg.TenantDomain))
	if !ok || slug == "" || strings.Contains(slug, ".") {
		return "", false
	}
	return slug, true
}

// refuse counts the refusal, sends its CONNACK (if it has one), records
// it on the connect's trace and lets the caller close the connection
// [MQTT-3.2.2-7].
func (g *Gateway) refuse(c net.Conn, log *slog.Logger, ct *connTrace, r refusal, cause error) {
	failed := time.Now()
	g.noteRefusal(log, ct, r, cause, failed)
	g.sendRefusal(c, ct, r, cause, failed)
}

// noteRefusal counts a refusal (against its source too, cooldown.go) and
// logs it, sparingly.
func (g *Gateway) noteRefusal(log *slog.Logger, ct *connTrace, r refusal, cause error, failed time.Time) {
	g.m.refusals.WithLabelValues(ct.tenant, r.label).Inc()
	g.refusedSource(ct.source, r, failed)
	if g.refuseLog.allow(failed) {
		log.Info("connect refused", "reason", r.label, "err", cause)
	}
}

// sendRefusal sends a refusal's CONNACK, if it has one, and records it on
// the connect's trace.
func (g *Gateway) sendRefusal(c net.Conn, ct *connTrace, r refusal, cause error, failed time.Time) {
	if ack := r.connack(ct.version); ack != nil {
		c.SetWriteDeadline(time.Now().Add(time.Second))
		c.Write(ack)
	}
	ct.leave(failed)
	g.traceConnect(ct, time.Now(), &r, cause)
}

// serveWS upgrades /mqtt to a WebSocket speaking subprotocol "mqtt" and
// serves it as a stream ([MQTT-6.0.0-2]: packets need not align with
// WebSocket frames). On the wss listener the request came over TLS, whose
// server name is checked against the tenant as on the TLS listener.
func (g *Gateway) serveWS(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	transport, sni := KindWS, ""
	if r.TLS != nil {
		transport, sni = KindWSS, r.TLS.ServerName
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols: []string{"mqtt"},
		// Tokens, not cookies, authenticate, so a cross-origin page gains
		// nothing: allow browsers from any origin.
		OriginPatterns: []string{"*"},
	})
	if err != nil {
		g.m.refusals.WithLabelValues("", "websocket_upgrade").Inc()
		return
	}
	if c.Subprotocol() != "mqtt" { // [MQTT-6.0.0-3]
		g.m.refusals.WithLabelValues("", "websocket_subprotocol").Inc()
		c.Close(websocket.StatusPolicyViolation, "subprotocol mqtt required")
		return
	}
	c.SetReadLimit(-1) // a stream: MaxConnectSize and the node bound what is read
	pend, _ := r.Context().Value(pendingKey{}).(*pendingSlot)
	nc := websocket.NetConn(g.connCtx, c, websocket.MessageBinary)
	s := &session{client: nc}
	if !g.track(s) {
		nc.Close()
		return
	}
	defer g.untrack(s)
	defer nc.Close()
	g.handle(s, nc, start, transport, sni, pend)
}

// pendingKey is the request context key of a WebSocket connection's
// pending slot (wsServer's ConnContext).
type pendingKey struct{}
