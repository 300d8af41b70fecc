package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"time"
)

// acceptLoop accepts on the TCP listener (tlsConf nil) or the TLS one,
// admits each connection (ratelimit.go; balancer.go for a balancer's) and
// serves it in a goroutine of its own.
func (g *Gateway) acceptLoop(ln net.Listener, tlsConf *tls.Config) {
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and friends: back off instead of spinning.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			g.log.Warn("accept failed", "err", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		start := time.Now()
		if g.balancers.has(c.RemoteAddr()) {
			g.acceptFromBalancer(c, tlsConf, start) // balancer.go
			continue
		}
		pend, ok := g.admit(c)
		if !ok {
			continue
		}
		s := &session{client: c}
		if !g.track(s) {
			pend.release()
			c.Close()
			continue
		}
		go func() {
			defer g.untrack(s)
			g.serve(s, c, tlsConf, start, pend)
		}()
	}
}

// serve runs the TLS handshake (with tlsConf) and then handle on an
// admitted connection c of the TCP or TLS listener, and closes it.
func (g *Gateway) serve(s *session, c net.Conn, tlsConf *tls.Config, start time.Time, pend *pendingSlot) {
	defer pend.release() // after the close: the TLS handshake or CONNECT never came, or was refused
	defer c.Close()
	if tlsConf == nil {
		g.handle(s, c, start, KindTCP, "", pend)
		return
	}
	sc := newSlotConn(c, g.hs) // the server's part of the handshake under a slot (tlsslot.go)
	tc := tls.Server(sc, tlsConf)
	ctx, cancel := context.WithDeadline(g.connCtx, start.Add(g.cfg.ConnectTimeout))
	err := tc.HandshakeContext(ctx)
	cancel()
	sc.release()
	if err != nil {
		g.tlsFailed(sc)
		if !sc.busy.Load() {
			g.sourceFailed(sourceOf(s.remoteAddr()), time.Now())
		}
		return
	}
	g.handle(s, tc, start, KindTLS, tc.ConnectionState().ServerName, pend)
}
