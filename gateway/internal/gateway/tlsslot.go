package gateway

import (
	"crypto/tls"
	"errors"
	"net"
	"sync/atomic"
)

// TLS handshake admission. The CPU-heavy part of a TLS handshake is the
// server's: its side of the key exchange and the signature over the
// handshake (TLS 1.3's CertificateVerify, 1.2's ServerKeyExchange),
// computed between the ClientHello's arrival and the server's flight
// going out. It takes a handshake slot (handshake.go) like a CONNECT's
// token check: GetConfigForClient, called once the whole ClientHello has
// been read, takes one (waiting up to HandshakeWait), and the
// connection's next read (the server now waits for the client's reply)
// or its close frees it. So a slot is never held while a client's bytes
// are awaited: not before its ClientHello, not while it answers. A TLS
// 1.3 HelloRetryRequest reads a second ClientHello, which frees the
// slot; GetCertificate, called after it and before the signature, takes
// it again. What runs after the client's reply (TLS 1.2's shared secret,
// the Finished check, session tickets) is small and not under the slot,
// nor is a TLS 1.3 resumption's key exchange after a HelloRetryRequest.
//
// A handshake that gets no slot in time is abandoned with a TLS alert
// (internal_error: there is no MQTT CONNACK before TLS is up) and
// counted as refusals_total{reason="tls_busy"}, not against its source:
// being busy is the service's doing. WebSocket over TLS gets the same
// through its TLS layer; its HTTP upgrade is cheap and takes no slot.

// errTLSBusy abandons a TLS handshake that found no slot in time.
var errTLSBusy = errors.New("gateway: no handshake slot freed within -handshake-wait")

// slotConn is a TLS connection's transport: it carries the connection's
// hold on a handshake slot during the handshake.
type slotConn struct {
	net.Conn
	h    *handshakes
	held atomic.Bool
	busy atomic.Bool // no slot within HandshakeWait: the handshake was abandoned
}

func newSlotConn(c net.Conn, h *handshakes) *slotConn { return &slotConn{Conn: c, h: h} }

// NetConn is the connection under it (pendingSlotOf looks through it).
func (c *slotConn) NetConn() net.Conn { return c.Conn }

// Read frees the slot first: from here the handshake waits on the client.
func (c *slotConn) Read(b []byte) (int, error) {
	c.release()
	return c.Conn.Read(b)
}

// Close closes the connection, then frees the slot if still held.
func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

func (c *slotConn) release() {
	if c.held.Load() && c.held.CompareAndSwap(true, false) {
		c.h.leave()
	}
}

// tlsAdmit takes the handshake slot of the connection hi is from for the
// server's part of its handshake, unless it holds it already; errTLSBusy
// abandons the handshake when none frees in time.
func (g *Gateway) tlsAdmit(hi *tls.ClientHelloInfo) error {
	c, ok := hi.Conn.(*slotConn)
	if !ok || c.held.Load() {
		return nil
	}
	ctx := hi.Context()
	if !g.hs.enter(ctx) {
		if ctx.Err() == nil {
			c.busy.Store(true)
		}
		return errTLSBusy
	}
	c.held.Store(true)
	return nil
}

// tlsConfig is the TLS listener's configuration: certificates from r,
// the server's part of each handshake under a slot (tlsAdmit).
func (g *Gateway) tlsConfig(r *certReloader) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"mqtt"},
		GetConfigForClient: func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
			return nil, g.tlsAdmit(hi) // nil: this configuration
		},
		GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if err := g.tlsAdmit(hi); err != nil { // after a HelloRetryRequest
				return nil, err
			}
			return r.getCertificate(hi)
		},
	}
}

// tlsFailed counts a TLS handshake that did not complete on c: abandoned
// for want of a slot, or failed (the client's doing).
func (g *Gateway) tlsFailed(c *slotConn) {
	if c != nil && c.busy.Load() {
		g.m.refusals.WithLabelValues("", "tls_busy").Inc()
		return
	}
	g.tlsHandshakeFailed()
}

// slotListener wraps each accepted connection in a slotConn, under the
// wss listener's TLS layer.
type slotListener struct {
	net.Listener
	h *handshakes
}

func (l slotListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newSlotConn(c, l.h), nil
}
