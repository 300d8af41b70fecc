package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"syscall"
	"time"

	"berth.dev/broker/handoff"
	"berth.dev/broker/packet"
	"berth.dev/gateway/internal/connlimit"
	"berth.dev/gateway/internal/revocation"
	"berth.dev/gateway/internal/route"
)

// A plain-TCP device whose tenant's node is connected for handoff
// (handoff.go) has its CONNECT peeked, not read (peekConnect): once it is
// authenticated and admitted as any other, its socket goes to the node
// with the signed PROXY header (handOff), the node reads the CONNECT
// itself, and the gateway closes its copy. A node that does not lead the
// tenant is retried as forward does; any other refusal, or a node that
// cannot be asked, falls back to the TCP relay: the gateway reads the
// CONNECT out of the socket (consumePeeked) and forwards it, so the
// device gets whatever the node answers over TCP, as without handoff.

// handoffSocket is the device's socket if it may be handed off: a bare
// TCP connection (not TLS, not WebSocket) with -handoff-dir set.
func (g *Gateway) handoffSocket(client net.Conn, transport string) *net.TCPConn {
	if g.ho == nil || transport != KindTCP {
		return nil
	}
	tc, _ := client.(*net.TCPConn)
	return tc
}

// connectBytes reads the CONNECT (readConnect), or peeks at it when the
// socket may be handed off (sock, not nil).
func (g *Gateway) connectBytes(client net.Conn, transport string) (sock *net.TCPConn, raw []byte, fh packet.FixedHeader, body []byte, err error) {
	if sock = g.handoffSocket(client, transport); sock != nil {
		raw, fh, body, err = peekConnect(sock, g.cfg.MaxConnectSize)
	} else {
		raw, fh, body, err = readConnect(client, g.cfg.MaxConnectSize)
	}
	return sock, raw, fh, body, err
}

// peekConnect is readConnect without consuming: it waits (MSG_PEEK, under
// the connection's read deadline) until one whole CONNECT of at most
// maxSize bytes is in the socket and returns a copy of it; bytes after it
// are neither read nor looked at. On an error the bytes it peeked are
// consumed, so that a refusal's CONNACK is followed by a FIN, not a reset.
func peekConnect(tc *net.TCPConn, maxSize int) (raw []byte, fh packet.FixedHeader, body []byte, err error) {
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil, fh, nil, err
	}
	buf := make([]byte, 5)
	want, n, hdrLen := 0, 0, 0 // want: the packet's size once its fixed header is known
	var rerr error
	cerr := rc.Read(func(fd uintptr) bool {
		for {
			m, _, e := syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK)
			switch {
			case e == syscall.EAGAIN:
				return false // wait for more bytes
			case e == syscall.EINTR:
				continue
			case e != nil:
				rerr = e
				return true
			case m == 0:
				rerr = io.EOF
				if n > 0 {
					rerr = io.ErrUnexpectedEOF
				}
				return true
			}
			n = m
			if want == 0 {
				var hl int
				fh, hl, rerr = packet.ParseFixedHeader(buf[:m])
				switch {
				case rerr != nil:
					return true
				case hl == 0 && m < 5:
					return false
				case hl == 0:
					rerr = packet.ErrMalformed
					return true
				case fh.Type != packet.TypeConnect:
					rerr = errNotConnect
					return true
				case hl+fh.Remaining > maxSize:
					rerr = packet.ErrPacketTooLarge
					return true
				}
				want, hdrLen = hl+fh.Remaining, hl
			}
			if n >= want {
				return true
			}
			if m < len(buf) {
				return false // all that came is peeked
			}
			// The buffer is full: grow it as readConnect does.
			buf = append(buf, make([]byte, min(want-len(buf), max(len(buf), connectChunk)))...)
		}
	})
	if cerr == nil {
		cerr = rerr
	}
	if cerr != nil {
		if n > 0 {
			discardPeeked(tc, n)
		}
		return nil, fh, nil, cerr
	}
	raw = buf[:want]
	return raw, fh, raw[hdrLen:], nil
}

// discardPeeked reads n bytes that were peeked (so they are in the socket).
func discardPeeked(tc *net.TCPConn, n int) {
	_ = tc.SetReadDeadline(time.Now().Add(time.Second))
	_, _ = io.ReadFull(tc, make([]byte, n))
}

// consumePeeked reads the CONNECT that peekConnect left in the socket, on
// its way to the TCP relay; it must be the same bytes.
func consumePeeked(tc *net.TCPConn, raw []byte) error {
	got := make([]byte, len(raw))
	if _, err := io.ReadFull(tc, got); err != nil {
		return err
	}
	if string(got) != string(raw) {
		return errors.New("gateway: the peeked CONNECT changed in the socket")
	}
	return nil
}

// tryHandOff hands the device's socket to its node if one on this host
// serves the tenant (handOff). done: the connection is dealt with (handed
// off, or refused); handed: the node has it, and from now on the
// connection's lease and revocation watch are the handoff's. Otherwise
// the CONNECT has been read out of the socket: relay it over TCP to rt.
func (g *Gateway) tryHandOff(ctx context.Context, log *slog.Logger, ct *connTrace, sock *net.TCPConn, raw []byte,
	rt route.Route, header func() ([]byte, error), lease *connlimit.Lease, watch *revocation.Watch, pend *pendingSlot) (_ route.Route, done, handed bool) {
	res, hn, id, hc, rt, r, err := g.handOff(ctx, log, sock, rt, header, lease)
	switch res {
	case handoffTaken:
		pend.release()
		now := time.Now()
		ct.node = rt.NodeID
		g.m.connects.WithLabelValues(ct.tenant, KindTCP).Inc()
		g.m.latency.WithLabelValues(ct.tenant).Observe(now.Sub(ct.start).Seconds())
		g.traceConnect(ct, now, nil, nil)
		log.Debug("handed off", "node", rt.NodeID, "handoff_id", id, "degraded_limit", lease.Degraded)
		g.watchHandedOff(log, hn, id, hc, ct.credential)
		watch.Stop()          // after the backstop's registration: no revocation unseen between them
		return rt, true, true // handle closes the gateway's copy of the socket; the node has its own
	case handoffFailed:
		// The node may hold the socket (it was sent close): nothing more
		// is read from it or written to it.
		ct.node = rt.NodeID
		failed := time.Now()
		g.noteRefusal(log, ct, r, err, failed)
		ct.leave(failed)
		g.traceConnect(ct, time.Now(), &r, err)
		return rt, true, false
	case handoffRefused:
		ct.node = rt.NodeID
		discardPeeked(sock, len(raw))
		g.refuse(sock, log, ct, r, err)
		return rt, true, false
	}
	if err := consumePeeked(sock, raw); err != nil {
		g.refuse(sock, log, ct, refuseNodeDown, err)
		return rt, true, false
	}
	return rt, false, false
}

// handoffResult is how handOff ended.
type handoffResult int

const (
	handoffNotTried handoffResult = iota // no node connected for the route: relay over TCP
	handoffTaken                         // the node serves the device
	handoffFallBack                      // refused (other than not-leader): relay over TCP
	handoffRefused                       // the device is refused (r); the node does not hold it
	handoffFailed                        // no answer: the node may hold the socket; the gateway lets go of it
)

// handOff offers the device's socket to the node of rt, and to the next
// leader while the node answers not-leader (as forward retries). It
// returns the route last used; with handoffTaken the handed-off
// connection, whose lease is lease until the node reports it closed.
func (g *Gateway) handOff(ctx context.Context, log *slog.Logger, sock *net.TCPConn, rt route.Route,
	header func() ([]byte, error), lease *connlimit.Lease) (handoffResult, *handoffNode, uint64, *handedConn, route.Route, refusal, error) {
	for attempt := 0; ; attempt++ {
		n := g.ho.node(rt.NodeID)
		if n == nil {
			return handoffNotTried, nil, 0, nil, rt, refusal{}, nil
		}
		hdr, err := header()
		if err != nil {
			return handoffRefused, nil, 0, nil, rt, refuseNodeDown, err
		}
		id := g.ho.nextID.Add(1)
		a := n.handoff(ctx, id, hdr, sock, lease)
		switch {
		case a.hc != nil:
			g.m.handoffs.WithLabelValues("taken").Inc()
			return handoffTaken, n, id, a.hc, rt, refusal{}, nil
		case errors.Is(a.err, errHandoffNotSent):
			// Ended since node() found it: nothing was sent.
			log.Info("handoff not sent; relaying", "node", rt.NodeID, "err", a.err)
			return handoffFallBack, nil, 0, nil, rt, refusal{}, nil
		case errors.Is(a.err, errHandoffGone):
			// The node may serve the device now: its next hello lists it.
			g.m.handoffs.WithLabelValues("node_gone").Inc()
			return handoffFailed, nil, 0, nil, rt, refuseNodeDown, a.err
		case a.err != nil:
			g.m.handoffs.WithLabelValues("no_answer").Inc()
			return handoffFailed, nil, 0, nil, rt, refuseNodeDown, a.err
		case a.reason != handoff.RefusedNotLeader:
			g.m.handoffs.WithLabelValues(a.reason.String()).Inc()
			log.Info("handoff refused; relaying", "node", rt.NodeID, "reason", a.reason.String())
			return handoffFallBack, nil, 0, nil, rt, refusal{}, nil
		}
		g.m.handoffs.WithLabelValues(a.reason.String()).Inc()
		if attempt == maxLeaderRetries {
			return handoffRefused, nil, 0, nil, rt, refuseNoLeader, errNotLeader
		}
		log.Info("node does not lead the tenant; retrying its leader", "node", rt.NodeID, "epoch", rt.Epoch,
			"reason", "handoff refused not-leader", "attempt", attempt+1)
		var r refusal
		if rt, r, err = g.nextLeader(ctx, rt, attempt); err != nil {
			return handoffRefused, nil, 0, nil, rt, r, err
		}
	}
}
