package node

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"berth.dev/broker/handoff"
	"berth.dev/broker/packet"
)

// A gateway on this host may hand device sockets to the node over a Unix
// socket (Config.HandoffListen; package handoff, docs/contracts.md
// "Socket handoff"). A handed-off socket is served exactly as a TCP
// connection from a gateway after its PROXY header (serveHeader): the same
// Verifier, the same tenant lookup, ConnInfo, limits and metrics. What
// differs is how admission ends: a socket this node will not serve is
// refused over the Unix socket (not-leader, bad-header, …) and its copy
// closed without a byte written, for the gateway still holds the device;
// one it serves is answered taken, and closed when it ends.
//
// The devices taken are the node's: when the gateway's Unix connection
// ends they are served on, and the next gateway connection's hello lists
// them (it adopts them: their closed goes to it).

const (
	// maxHandoffGateways bounds the Unix connections at once: one per
	// gateway process on the host is the design, a few more tolerate a
	// restart overlapping.
	maxHandoffGateways = 8
	// maxHandoffsUnderWay bounds one gateway's handoffs between their
	// receipt and their answer (verifying, opening the tenant): more are
	// refused over-capacity at once.
	maxHandoffsUnderWay = 256
	// handoffQueue bounds the frames waiting to be written to a gateway:
	// one that does not read them is disconnected.
	handoffQueue = 4096
)

// handoffs is the node's handoff listener and the gateways connected to
// it.
type handoffs struct {
	n  *Node
	ln *handoff.Listener
	wg sync.WaitGroup // the accept loop and each gateway's reader and writer

	mu      sync.Mutex
	closing bool
	gws     map[*handoffGateway]struct{}
	live    map[uint64]*handed // by handoff id: under way or taken
}

// handoffGateway is one gateway's Unix connection.
type handoffGateway struct {
	c   *handoff.Conn
	sem chan struct{} // handoffs under way

	mu      sync.Mutex
	out     chan []byte // frames to write; closed by stop
	stopped bool
}

// handed is one handed-off socket, from its receipt until it is refused
// or, taken, until it ends.
type handed struct {
	h  *handoffs
	id uint64

	// Under h.mu:
	owner      *handoffGateway // told the answer and closed
	decided    bool            // refused or taken: its slot in owner.sem is free
	taken      bool
	closeAsked bool // the gateway sent close before it was taken
	tenant     string
	credential string   // the device's credential id (the hello's credentials frame)
	t          *tenant  // nil for a refusal by CONNACK alone
	pc         net.Conn // what the shard serves
}

// listenHandoffs binds Config.HandoffListen; start accepts on it.
func (n *Node) listenHandoffs() (*handoffs, error) {
	if len(n.cfg.ID) > 0xFF {
		return nil, fmt.Errorf("%w: a node id of more than 255 bytes cannot be handed off to", ErrConfig)
	}
	ln, err := handoff.Listen(n.cfg.HandoffListen)
	if err != nil {
		return nil, fmt.Errorf("node: handoff listener: %w", err)
	}
	return &handoffs{n: n, ln: ln, gws: map[*handoffGateway]struct{}{}, live: map[uint64]*handed{}}, nil
}

// start accepts gateways: the node is up.
func (h *handoffs) start() {
	h.wg.Add(1)
	go h.acceptLoop()
}

func (h *handoffs) acceptLoop() {
	defer h.wg.Done()
	for {
		c, err := h.ln.Accept()
		switch {
		case errors.Is(err, handoff.ErrPeer):
			h.n.log.Warn("handoff: refused a connection", "err", err)
			continue
		case errors.Is(err, net.ErrClosed):
			return
		case err != nil:
			h.n.log.Warn("handoff: accept", "err", err)
			continue
		}
		h.open(c)
	}
}

// open greets a gateway's connection and starts serving it: the hello
// lists the devices taken that no connected gateway answers for, and this
// gateway answers for them from now on.
func (h *handoffs) open(c *handoff.Conn) {
	h.mu.Lock()
	if h.closing || len(h.gws) >= maxHandoffGateways {
		h.mu.Unlock()
		h.n.log.Warn("handoff: refused a gateway connection", "closing", h.closing, "gateways", len(h.gws))
		_ = c.Close()
		return
	}
	g := &handoffGateway{c: c, sem: make(chan struct{}, maxHandoffsUnderWay), out: make(chan []byte, handoffQueue)}
	var live []handoff.Live
	for _, e := range h.live {
		if e.taken && e.owner.isStopped() {
			e.owner = g
			live = append(live, handoff.Live{ID: e.id, Tenant: e.tenant, Credential: e.credential})
		}
	}
	hello, err := greeting(h.n.cfg.ID, live) // the id's length was checked at start
	if err != nil {
		h.n.log.Error("handoff: greeting a gateway", "err", err, "taken_listed", len(live))
	}
	h.gws[g] = struct{}{}
	g.send(hello)
	h.mu.Unlock()
	h.n.log.Info("handoff: gateway connected", "taken_listed", len(live))
	h.wg.Add(2)
	go h.write(g)
	go h.read(g)
}

// read takes the gateway's frames until its connection ends.
func (h *handoffs) read(g *handoffGateway) {
	defer h.wg.Done()
	defer func() {
		g.stop()
		h.mu.Lock()
		delete(h.gws, g)
		h.mu.Unlock()
	}()
	for {
		f, err := g.c.ReadFrame(h.n.cfg.HeaderTimeout)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				h.n.log.Warn("handoff: gateway connection", "err", err)
			}
			return
		}
		switch f.Type {
		case handoff.TypeHandoff:
			if !h.receive(g, f) {
				return
			}
		case handoff.TypeClose:
			f.CloseFDs()
			id, err := handoff.ParseID(f.Body)
			if err != nil {
				h.n.log.Warn("handoff: malformed close", "err", err)
				return
			}
			h.closeAsked(g, id)
		default: // a newer gateway's, or a node's own type: skipped
			f.CloseFDs()
			h.n.log.Debug("handoff: skipped a frame of unknown type", "type", f.Type)
		}
	}
}

// receive takes one handoff frame: refused at once, or served on its own
// goroutine. It returns false on a frame too malformed to answer.
func (h *handoffs) receive(g *handoffGateway, f handoff.Frame) bool {
	id, hdr, err := handoff.ParseHandoff(f.Body)
	if err != nil {
		f.CloseFDs()
		h.n.log.Warn("handoff: malformed handoff", "err", err)
		return false
	}
	if len(f.FDs) != 1 || f.Truncated {
		f.CloseFDs()
		h.n.log.Warn("handoff: refused: not one descriptor", "descriptors", len(f.FDs), "truncated", f.Truncated)
		g.send(handoff.AppendRefused(nil, id, handoff.RefusedBadDescriptor))
		return true
	}
	c, err := tcpFromFD(f.FDs[0])
	if err != nil {
		h.n.log.Warn("handoff: refused: not a TCP socket", "err", err)
		g.send(handoff.AppendRefused(nil, id, handoff.RefusedBadDescriptor))
		return true
	}
	reason := handoff.Reason(0)
	h.mu.Lock()
	switch {
	case len(hdr) > maxHeader:
		reason = handoff.RefusedBadHeader
	case h.closing:
		reason = handoff.RefusedShuttingDown
	case h.live[id] != nil:
		reason = handoff.RefusedDuplicateID
	default:
		select {
		case g.sem <- struct{}{}:
		default:
			reason = handoff.RefusedOverCapacity
		}
	}
	if reason != 0 {
		h.mu.Unlock()
		_ = c.Close()
		h.n.log.Warn("handoff: refused", "reason", reason.String())
		g.send(handoff.AppendRefused(nil, id, reason))
		return true
	}
	e := &handed{h: h, id: id, owner: g}
	h.live[id] = e
	h.n.conns.Add(1) // before Shutdown waits: h.closing is false under h.mu
	h.mu.Unlock()
	raw := append(make([]byte, 0, len(hdr)), hdr...) // f.Body is the reader's buffer
	go h.n.serveHeader(c, raw, e, e.done)
	return true
}

// closeAsked ends a connection the gateway handed off, at its request
// (its revocation backstop): DISCONNECT 0x87, as a revocation would.
func (h *handoffs) closeAsked(g *handoffGateway, id uint64) {
	h.mu.Lock()
	e := h.live[id]
	if e == nil || e.owner != g {
		h.mu.Unlock()
		return
	}
	if !e.taken {
		e.closeAsked = true
		h.mu.Unlock()
		return
	}
	t, pc := e.t, e.pc
	h.mu.Unlock()
	if t == nil || !t.sh.End(pc, packet.ErrNotAuthorized) {
		_ = pc.Close() // not (or no longer) in the shard: its reader ends
	}
}

// refuse answers the handoff refused; serveHeader closes the node's copy.
func (e *handed) refuse(r handoff.Reason) {
	h := e.h
	h.mu.Lock()
	delete(h.live, e.id)
	g := e.decideLocked()
	h.mu.Unlock()
	h.n.log.Info("handoff: refused", "reason", r.String())
	g.send(handoff.AppendRefused(nil, e.id, r))
}

// take answers the handoff taken: the node serves pc from now on.
func (e *handed) take(tenantID, credentialID string, t *tenant, pc net.Conn) bool {
	h := e.h
	h.mu.Lock()
	e.taken, e.tenant, e.credential, e.t, e.pc = true, tenantID, credentialID, t, pc
	g := e.decideLocked()
	asked := e.closeAsked
	h.mu.Unlock()
	g.send(handoff.AppendID(nil, handoff.TypeTaken, e.id))
	return !asked
}

// decideLocked frees the handoff's slot under way, once, and returns its
// gateway.
func (e *handed) decideLocked() *handoffGateway {
	if !e.decided {
		e.decided = true
		<-e.owner.sem
	}
	return e.owner
}

// done runs once the socket is closed (serveHeader's done): the gateway
// that answers for it hears closed.
func (e *handed) done() {
	h := e.h
	h.mu.Lock()
	delete(h.live, e.id)
	g, taken := e.decideLocked(), e.taken
	h.mu.Unlock()
	if taken {
		g.send(handoff.AppendID(nil, handoff.TypeClosed, e.id))
	}
	h.n.conns.Done()
}

// greeting is what a gateway's connection opens with: the hello frames
// listing live, then each listed device's credential, so that the
// gateway that adopts it keeps its revocation backstop (an older gateway
// skips those frames). When live cannot be listed (a tenant id too long
// for any frame: none the API makes) it is one hello listing no device
// and nothing more, never part of a list: the gateway takes the first
// frame for the hello and reads hellos until one says no more follow, so
// a partial list, or a credentials frame first, would have it drop the
// connection and dial again, forever.
func greeting(nodeID string, live []handoff.Live) ([]byte, error) {
	hello, err := handoff.AppendHellos(nil, nodeID, live)
	if err != nil {
		none, nerr := handoff.AppendHellos(nil, nodeID, nil)
		return none, errors.Join(fmt.Errorf("hello: %w (sent listing no device)", err), nerr)
	}
	withCreds, err := handoff.AppendCredentials(hello, credentialsKnown(live))
	if err != nil { // credentialsKnown left out the ones that cannot be sent: not expected
		return hello, fmt.Errorf("credentials after the hello: %w (none sent)", err)
	}
	return withCreds, nil
}

// credentialsKnown is the entries of live whose credential is known and
// can be sent (at most handoff.MaxCredential bytes; the API's ids are far
// shorter): the others are adopted without one.
func credentialsKnown(live []handoff.Live) []handoff.Live {
	out := make([]handoff.Live, 0, len(live))
	for _, l := range live {
		if l.Credential != "" && len(l.Credential) <= handoff.MaxCredential {
			out = append(out, l)
		}
	}
	return out
}

// stopTaking closes the listener (removing the socket file) and refuses
// the handoffs that follow (shutting-down); taken devices drain with the
// node's other connections.
func (h *handoffs) stopTaking() {
	h.mu.Lock()
	h.closing = true
	h.mu.Unlock()
	_ = h.ln.Close()
}

// close ends every gateway connection once what is queued for it is
// written (the closed of the devices drained), and waits for its loops.
func (h *handoffs) close() {
	h.stopTaking()
	h.mu.Lock()
	for g := range h.gws {
		g.stop()
	}
	h.mu.Unlock()
	h.wg.Wait()
}
