package gateway

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"berth.dev/broker/handoff"
	"berth.dev/gateway/internal/connlimit"
)

// With -handoff-dir the gateway keeps one Unix connection to every node
// whose handoff socket (<dir>/*.sock) it finds, and hands a plain-TCP
// device's socket to its node when the route names one of them
// (handoffconn.go; package berth.dev/broker/handoff; docs/contracts.md
// "Socket handoff"). This file is the connections: dialing, the node's
// hello, the answers and the leases of the devices handed off (their end
// and revocation backstop: handoffbackstop.go).

const (
	// handoffScan is how often the directory is read for sockets not yet
	// connected; a connection that ends is redialed at once, then with
	// backoff up to handoffBackoffMax.
	handoffScan       = time.Second
	handoffBackoffMax = 30 * time.Second
	// handoffFrameTimeout bounds a frame's bytes once its first has come,
	// and the wait for the node's hello after the dial.
	handoffFrameTimeout = 5 * time.Second
)

// handoffLimits is what the handoffs need of connlimit.Limiter.
type handoffLimits interface {
	Adopt(ctx context.Context, tenantID string) *connlimit.Lease
}

// handoffs is the gateway's Unix connections to its host's nodes.
type handoffs struct {
	dir    string
	log    *slog.Logger
	limits handoffLimits
	// adopted is told each adopted device whose credential the node's
	// credentials frame names (the revocation backstop); set once before
	// start, nil for none.
	adopted func(n *handoffNode, id uint64, hc *handedConn, credential string)
	nextID  atomic.Uint64 // starts at a random value: ids stay unique across restarts
	ctx     context.Context
	cancel  context.CancelFunc
	kick    chan struct{} // a connection ended: scan now
	wg      sync.WaitGroup

	mu      sync.Mutex
	closing bool
	nodes   map[string]*handoffNode // by node id, once its hello came
	paths   map[string]*handoffNode // by socket path
	retry   map[string]retryAt      // by socket path, after a failure
}

type retryAt struct {
	at      time.Time
	backoff time.Duration
}

// handoffNode is one node's connection.
type handoffNode struct {
	h    *handoffs
	path string
	id   string
	c    *handoff.Conn
	wmu  sync.Mutex // writes

	mu      sync.Mutex
	dead    bool
	waiting map[uint64]*sentHandoff // handoffs sent, not yet answered
	taken   map[uint64]*handedConn  // served by the node, until its closed
}

// handedConn is a device the node took: its lease is held until the
// node's closed (or the connection's end). ended is closed then, under
// handoffNode.mu, and unwatch (the revocation backstop's registration,
// set under it too) is called.
type handedConn struct {
	lease   *connlimit.Lease
	ended   chan struct{}
	unwatch func() bool
	watched bool // a credential is watched (fresh, or from the credentials frame)
}

// sentHandoff is a handoff waiting for its answer. Its lease becomes the
// handedConn's when the node takes it, else stays the sender's.
type sentHandoff struct {
	ch    chan handoffAnswer // buffered: one answer
	lease *connlimit.Lease
}

// handoffAnswer is the node's answer to one handoff.
type handoffAnswer struct {
	hc     *handedConn    // taken
	reason handoff.Reason // refused
	err    error          // no answer: the connection ended, or the write failed
}

func newHandoffs(dir string, log *slog.Logger, limits handoffLimits) *handoffs {
	h := &handoffs{dir: dir, log: log, limits: limits, kick: make(chan struct{}, 1),
		nodes: map[string]*handoffNode{}, paths: map[string]*handoffNode{}, retry: map[string]retryAt{}}
	var b [8]byte
	_, _ = rand.Read(b[:])
	h.nextID.Store(binary.BigEndian.Uint64(b[:]))
	h.ctx, h.cancel = context.WithCancel(context.Background())
	return h
}

// start scans the directory now and then every handoffScan.
func (h *handoffs) start() {
	h.scan()
	h.wg.Go(func() {
		t := time.NewTicker(handoffScan)
		defer t.Stop()
		for {
			select {
			case <-h.ctx.Done():
				return
			case <-t.C:
			case <-h.kick:
			}
			h.scan()
		}
	})
}

// node returns the live connection to node id, nil if none.
func (h *handoffs) node(id string) *handoffNode {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nodes[id]
}

// scan dials the sockets of dir not connected and not backing off.
func (h *handoffs) scan() {
	paths, err := filepath.Glob(filepath.Join(h.dir, "*.sock"))
	if err != nil {
		h.log.Warn("handoff: reading the socket directory", "dir", h.dir, "err", err)
		return
	}
	now := time.Now()
	for _, p := range paths {
		h.mu.Lock()
		skip := h.closing || h.paths[p] != nil || now.Before(h.retry[p].at)
		h.mu.Unlock()
		if skip {
			continue
		}
		if err := h.dial(p); err != nil {
			h.mu.Lock()
			r := h.retry[p]
			r.backoff = min(max(2*r.backoff, handoffScan), handoffBackoffMax)
			r.at = time.Now().Add(r.backoff)
			h.retry[p] = r
			h.mu.Unlock()
			h.log.Warn("handoff: connecting to a node", "socket", p, "err", err, "retry_in", r.backoff)
		}
	}
}

// dial connects to the socket at path, reads the node's hello, adopts
// the devices it lists and serves the connection.
func (h *handoffs) dial(path string) error {
	c, err := handoff.Dial(path)
	if err != nil {
		return err
	}
	var id string
	var live []handoff.Live
	for more := true; more; {
		_ = c.SetReadDeadline(time.Now().Add(handoffFrameTimeout))
		f, err := c.ReadFrame(handoffFrameTimeout)
		if err == nil {
			f.CloseFDs()
			if f.Type != handoff.TypeHello {
				err = errors.New("handoff: the node's first frame is not a hello")
			} else {
				id, more, live, err = handoff.ParseHello(f.Body, live)
			}
		}
		if err != nil {
			_ = c.Close()
			return err
		}
	}
	n := &handoffNode{h: h, path: path, id: id, c: c,
		waiting: map[uint64]*sentHandoff{}, taken: map[uint64]*handedConn{}}
	h.mu.Lock()
	if h.closing || h.nodes[id] != nil {
		dup := !h.closing
		h.mu.Unlock()
		_ = c.Close() // the node lists its devices again to the next connection
		if dup {
			return errors.New("handoff: another socket serves node " + id)
		}
		return nil
	}
	h.nodes[id], h.paths[path] = n, n
	delete(h.retry, path)
	h.mu.Unlock()
	// Adopted before the reader starts: their closed comes after.
	for _, l := range live {
		hc := &handedConn{lease: h.limits.Adopt(h.ctx, l.Tenant), ended: make(chan struct{})}
		n.mu.Lock()
		n.taken[l.ID] = hc
		n.mu.Unlock()
	}
	h.log.Info("handoff: connected to a node", "node", id, "socket", path, "adopted", len(live))
	h.wg.Go(n.read)
	return nil
}

// read takes the node's frames until the connection ends.
func (n *handoffNode) read() {
	var err error
	for {
		var f handoff.Frame
		if f, err = n.c.ReadFrame(handoffFrameTimeout); err != nil {
			break
		}
		f.CloseFDs() // a node sends none
		var id uint64
		switch f.Type {
		case handoff.TypeTaken:
			if id, err = handoff.ParseID(f.Body); err == nil {
				n.answer(id, true, 0)
			}
		case handoff.TypeRefused:
			var r handoff.Reason
			if id, r, err = handoff.ParseRefused(f.Body); err == nil {
				n.answer(id, false, r)
			}
		case handoff.TypeClosed:
			if id, err = handoff.ParseID(f.Body); err == nil {
				n.closed(id)
			}
		case handoff.TypeCredentials:
			var creds []handoff.Live
			if creds, err = handoff.ParseCredentials(f.Body, nil); err == nil {
				n.credentials(creds)
			}
		default: // a newer node's: skipped
		}
		if err != nil {
			break
		}
	}
	h := n.h
	h.mu.Lock()
	ours := h.closing
	if h.nodes[n.id] == n {
		delete(h.nodes, n.id)
	}
	if h.paths[n.path] == n {
		delete(h.paths, n.path)
	}
	h.mu.Unlock()
	if !ours && !errors.Is(err, io.EOF) {
		h.log.Warn("handoff: node connection", "node", n.id, "err", err)
	}
	_ = n.c.Close()
	n.end(!ours)
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// answer delivers the node's answer to the handoff waiting for it; one
// that no longer waits (its close was sent) is dropped. A taken device's
// lease moves here from the handoff's.
func (n *handoffNode) answer(id uint64, taken bool, r handoff.Reason) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.waiting[id]
	if s == nil {
		return
	}
	delete(n.waiting, id)
	if !taken {
		s.ch <- handoffAnswer{reason: r}
		return
	}
	hc := &handedConn{lease: s.lease, ended: make(chan struct{})}
	n.taken[id] = hc
	s.ch <- handoffAnswer{hc: hc}
}

// errHandoffGone: the node's connection ended, or a write to it failed,
// after the handoff was sent (the node may have taken the socket, and
// serves it on); errHandoffNotSent: it had ended before.
var (
	errHandoffGone    = errors.New("handoff: the node's connection ended before its answer")
	errHandoffNotSent = errors.New("handoff: the node's connection had ended")
)

// handoff sends sock to the node under id with header and waits for the
// answer until ctx ends; then it sends close for the id (a node that
// takes it afterwards ends it at once) and answers with ctx's error.
// If the node takes it, lease is held until the node's closed.
func (n *handoffNode) handoff(ctx context.Context, id uint64, header []byte, sock syscall.Conn, lease *connlimit.Lease) handoffAnswer {
	ch := make(chan handoffAnswer, 1)
	n.mu.Lock()
	if n.dead {
		n.mu.Unlock()
		return handoffAnswer{err: errHandoffNotSent}
	}
	n.waiting[id] = &sentHandoff{ch: ch, lease: lease}
	n.mu.Unlock()
	deadline, _ := ctx.Deadline()
	n.wmu.Lock()
	_ = n.c.SetWriteDeadline(deadline)
	err := n.c.Handoff(id, header, sock)
	n.wmu.Unlock()
	if err != nil {
		n.mu.Lock()
		delete(n.waiting, id)
		n.mu.Unlock()
		_ = n.c.Close() // a frame cut short leaves the stream unframed: the reader ends it
		return handoffAnswer{err: fmt.Errorf("%w: %w", errHandoffGone, err)}
	}
	var a handoffAnswer
	select {
	case a = <-ch:
	case <-ctx.Done():
		n.mu.Lock()
		_, still := n.waiting[id]
		delete(n.waiting, id)
		n.mu.Unlock()
		if !still {
			a = <-ch // answered meanwhile
			break
		}
		n.sendClose(id)
		return handoffAnswer{err: ctx.Err()}
	}
	return a
}

// sendClose asks the node to end the device handed off as id.
func (n *handoffNode) sendClose(id uint64) {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	_ = n.c.SetWriteDeadline(time.Now().Add(handoffFrameTimeout))
	if err := n.c.Write(handoff.AppendID(nil, handoff.TypeClose, id)); err != nil {
		n.h.log.Warn("handoff: sending close", "node", n.id, "err", err)
	}
}

// close stops dialing and closes every connection, keeping the leases of
// the devices handed off (the process is exiting), and waits for the
// goroutines.
func (h *handoffs) close() {
	h.mu.Lock()
	h.closing = true
	nodes := make([]*handoffNode, 0, len(h.paths))
	for _, n := range h.paths {
		nodes = append(nodes, n)
	}
	h.mu.Unlock()
	h.cancel()
	for _, n := range nodes {
		_ = n.c.Close()
	}
	h.wg.Wait()
}
