package gateway

import (
	"log/slog"
	"time"

	"berth.dev/broker/handoff"
)

// The revocation backstop of the devices handed off to a node, and of
// those adopted from its hello (handoff.go): if the node has not ended a
// revoked credential's device within revokeGrace, the gateway asks it to
// (close). A device waiting costs a registration in the revocation set,
// not a goroutine. A device's end (the node's closed, or its connection's
// end) stops its registration with its lease.

// credentials names the credentials of devices adopted from the hello:
// each gets the revocation backstop that a device handed off by this
// process has (an entry for a device not adopted, or already watched, is
// ignored).
func (n *handoffNode) credentials(creds []handoff.Live) {
	if n.h.adopted == nil {
		return
	}
	for _, l := range creds {
		n.mu.Lock()
		hc := n.taken[l.ID]
		fresh := hc != nil && !hc.watched && l.Credential != ""
		if fresh {
			hc.watched = true
		}
		n.mu.Unlock()
		if fresh {
			n.h.adopted(n, l.ID, hc, l.Credential)
		}
	}
}

// watching records the backstop's registration of hc; if hc has ended
// meanwhile it is stopped at once.
func (n *handoffNode) watching(hc *handedConn, stop func() bool) {
	n.mu.Lock()
	select {
	case <-hc.ended:
		n.mu.Unlock()
		stop()
		return
	default:
	}
	hc.watched, hc.unwatch = true, stop
	n.mu.Unlock()
}

// endLocked ends hc: the node no longer serves it. It returns the
// backstop's registration for the caller to stop once n.mu is released.
func (hc *handedConn) endLocked() func() bool {
	close(hc.ended)
	stop := hc.unwatch
	hc.unwatch = nil
	return stop
}

// closed releases the lease of a device the node no longer serves.
func (n *handoffNode) closed(id uint64) {
	n.mu.Lock()
	hc := n.taken[id]
	delete(n.taken, id)
	var stop func() bool
	if hc != nil {
		stop = hc.endLocked()
	}
	n.mu.Unlock()
	if stop != nil {
		stop()
	}
	if hc != nil && hc.lease != nil {
		hc.lease.Release()
	}
}

// end fails the handoffs waiting and ends the devices taken: their
// sockets died with the node's descriptors, so their leases are released,
// unless the gateway itself is closing (release false: the process exits
// and its counts go with it).
func (n *handoffNode) end(release bool) {
	n.mu.Lock()
	n.dead = true
	waiting, taken := n.waiting, n.taken
	n.waiting, n.taken = map[uint64]*sentHandoff{}, map[uint64]*handedConn{}
	stops := make([]func() bool, 0, len(taken))
	for _, hc := range taken {
		if stop := hc.endLocked(); stop != nil {
			stops = append(stops, stop)
		}
	}
	n.mu.Unlock()
	for _, s := range waiting {
		s.ch <- handoffAnswer{err: errHandoffGone}
	}
	for _, stop := range stops {
		stop()
	}
	for _, hc := range taken {
		if release && hc.lease != nil {
			hc.lease.Release()
		}
	}
}

// watchHandedOff is the revocation backstop of a device handed off as id
// to n: if the node has not ended it within revokeGrace of the
// credential's revocation, the gateway asks it to (close). It holds no
// goroutine while it waits (revocation.Set.AfterRevoked; a timer from the
// revocation on), so a handed-off device costs the gateway a map entry.
func (g *Gateway) watchHandedOff(log *slog.Logger, n *handoffNode, id uint64, hc *handedConn, credential string) {
	stop := g.d.Revoked.AfterRevoked(credential, func() {
		select {
		case <-hc.ended:
			return
		default:
		}
		g.m.revoked.Inc()
		time.AfterFunc(revokeGrace, func() {
			select {
			case <-hc.ended:
				log.Info("credential revoked; the node closed the connection")
			default:
				log.Info("credential revoked; asking the node to close the connection")
				n.sendClose(id)
			}
		})
	})
	n.watching(hc, stop)
}

// watchAdopted is the backstop of a device adopted from a node's hello,
// whose credential the node's credentials frame named.
func (g *Gateway) watchAdopted(n *handoffNode, id uint64, hc *handedConn, credential string) {
	g.watchHandedOff(g.log.With("node", n.id, "handoff_id", id, "credential_id", credential), n, id, hc, credential)
}
