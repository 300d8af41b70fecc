package replica

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// frameHandler is what the transport delivers to (the Host): every
// verified frame, from the authenticated peer, with the state of the
// connection it came on (payload is valid only during the call); and the
// end of each accepted connection, however it ends.
type frameHandler interface {
	handleFrame(cs *connState, from uint64, kind byte, group uint64, payload []byte)
	connEnded(cs *connState)
}

// connState is what the frames of one accepted connection build up: the
// snapshot streams it carries (snapstream.go). The connection's goroutine
// owns it; connEnded releases it when the connection ends (Transport.close
// waits for that).
type connState struct {
	snaps map[uint64]*snapIn // by group
}

// TransportStats counts what the transport refused or dropped.
type TransportStats struct {
	AuthFailures  uint64 // connections whose handshake failed (wrong secret, unknown node, garbage)
	MACFailures   uint64 // connections closed on a frame whose MAC did not verify
	Dropped       uint64 // outbound frames dropped: peer queue full (frames or bytes) or peer unknown
	FramesIn      uint64 // verified frames received
	FramesOut     uint64 // frames written
	BadMessages   uint64 // verified frames whose content was refused (wrong from/to, bad encoding)
	ConnsAccepted uint64
	// Snapshot streams (snapstream.go): started to followers, received
	// whole, and installed into the state machine.
	SnapshotsSent, SnapshotsReceived, SnapshotsInstalled uint64
}

// Transport carries frames between nodes over TCP. Each node dials every peer
// once and sends on that connection only; it receives on the connections its
// peers dial. A connection starts with a mutual HMAC challenge-response over
// the cluster secret and then carries frames MAC'd with a per-connection key.
type Transport struct {
	id         uint64
	secret     []byte
	queueLen   int   // frames queued per peer at most
	queueBytes int64 // payload bytes queued per peer at most
	log        *slog.Logger
	ln         net.Listener
	handle     frameHandler

	mu       sync.Mutex
	peers    map[uint64]*peer
	accepted map[net.Conn]struct{}
	streams  map[net.Conn]struct{} // dialed by stream
	closed   bool

	stop chan struct{}
	wg   sync.WaitGroup

	// cut, when set, names peers this node neither sends to nor accepts
	// frames from: a network partition injected by tests.
	cut atomic.Pointer[map[uint64]bool]

	authFailures, macFailures, dropped, framesIn, framesOut, badMessages, connsAccepted atomic.Uint64
}

type outFrame struct {
	kind    byte
	group   uint64
	payload []byte
}

type peer struct {
	id   uint64
	addr string
	q    chan outFrame
	conn net.Conn // the dialed connection, guarded by Transport.mu
	// queued is the payload bytes in q (added by send, taken off when a
	// frame leaves q).
	queued atomic.Int64
}

// take accounts for a frame taken off the peer's queue.
func (p *peer) take(f outFrame) { p.queued.Add(-int64(len(f.payload))) }

// newTransport listens on addr and delivers verified frames to handle.
// Start the accept loop with start.
func newTransport(id uint64, addr string, secret []byte, queueLen int, queueBytes int64, log *slog.Logger, handle frameHandler) (*Transport, error) {
	if len(secret) < 16 {
		return nil, errors.New("replica: the peer secret must be at least 16 bytes")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("replica: listen: %w", err)
	}
	return &Transport{
		id: id, secret: secret, queueLen: queueLen, queueBytes: queueBytes, log: log, ln: ln, handle: handle,
		peers: map[uint64]*peer{}, accepted: map[net.Conn]struct{}{}, streams: map[net.Conn]struct{}{}, stop: make(chan struct{}),
	}, nil
}

// Addr is the address the transport listens on.
func (t *Transport) Addr() string { return t.ln.Addr().String() }

func (t *Transport) start() {
	t.wg.Add(1)
	go t.acceptLoop()
}

// addPeer registers a peer and starts its sender. Idempotent per id.
func (t *Transport) addPeer(id uint64, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.peers[id] != nil || id == t.id {
		return
	}
	p := &peer{id: id, addr: addr, q: make(chan outFrame, t.queueLen)}
	t.peers[id] = p
	t.wg.Add(1)
	go t.sendLoop(p)
}

func (t *Transport) known(id uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.peers[id] != nil
}

// send queues a frame for a peer without blocking; it reports false (and
// counts a drop) when the peer is unknown or its queue is full: queueLen
// frames, or queueBytes of payload (a frame larger than that alone is
// taken into an empty queue). Raft tolerates lost messages (the caller
// reports the peer unreachable, and raft probes it again); a full queue
// must not stall every group, nor hold gigabytes for a slow peer.
func (t *Transport) send(to uint64, kind byte, group uint64, payload []byte) bool {
	if t.partitioned(to) {
		t.dropped.Add(1)
		return false
	}
	t.mu.Lock()
	p := t.peers[to]
	t.mu.Unlock()
	if p == nil {
		t.dropped.Add(1)
		return false
	}
	n := int64(len(payload))
	if before := p.queued.Add(n) - n; before > 0 && before+n > t.queueBytes {
		p.queued.Add(-n)
		t.dropped.Add(1)
		return false
	}
	select {
	case p.q <- outFrame{kind, group, payload}:
		return true
	default:
		p.queued.Add(-n)
		t.dropped.Add(1)
		return false
	}
}

const (
	dialTimeout      = 2 * time.Second
	handshakeTimeout = 5 * time.Second
	redialMin        = 50 * time.Millisecond
	redialMax        = time.Second
)

func (t *Transport) sendLoop(p *peer) {
	defer t.wg.Done()
	backoff := redialMin
	for {
		conn, fw, err := t.dial(p)
		if err != nil {
			t.log.Debug("replica: dial peer", "peer", p.id, "err", err)
			if !t.dropFor(p, backoff) {
				return
			}
			backoff = min(2*backoff, redialMax)
			continue
		}
		backoff = redialMin
		err = t.pump(p, fw)
		conn.Close()
		t.mu.Lock()
		p.conn = nil
		t.mu.Unlock()
		if err == nil {
			return // stopped
		}
		t.log.Debug("replica: peer connection lost", "peer", p.id, "err", err)
	}
}

func (t *Transport) dial(p *peer) (net.Conn, *frameWriter, error) {
	conn, err := net.DialTimeout("tcp", p.addr, dialTimeout)
	if err != nil {
		return nil, nil, err
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		conn.Close()
		return nil, nil, net.ErrClosed
	}
	p.conn = conn
	t.mu.Unlock()
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	conn.SetDeadline(time.Now().Add(handshakeTimeout))
	key, err := clientHandshake(conn, t.secret, t.id, p.id)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	conn.SetDeadline(time.Time{})
	return conn, newFrameWriter(conn, key), nil
}

// dropFor discards what is queued for a peer that cannot be reached, for d;
// it reports false when the transport stops.
func (t *Transport) dropFor(p *peer, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case f := <-p.q:
			p.take(f)
			t.dropped.Add(1)
		case <-timer.C:
			return true
		case <-t.stop:
			return false
		}
	}
}

// pump writes queued frames, flushing when the queue is empty (many frames
// per write(2) under load). It returns nil when the transport stops.
func (t *Transport) pump(p *peer, fw *frameWriter) error {
	for {
		var f outFrame
		select {
		case f = <-p.q:
		case <-t.stop:
			return nil
		}
		for {
			p.take(f)
			if err := fw.write(f.kind, f.group, f.payload); err != nil {
				return err
			}
			t.framesOut.Add(1)
			select {
			case f = <-p.q:
				continue
			default:
			}
			break
		}
		if err := fw.flush(); err != nil {
			return err
		}
	}
}

func (t *Transport) acceptLoop() {
	defer t.wg.Done()
	for {
		conn, err := t.ln.Accept()
		if err != nil {
			select {
			case <-t.stop:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			t.log.Warn("replica: accept", "err", err)
			continue
		}
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			conn.Close()
			return
		}
		t.accepted[conn] = struct{}{}
		t.mu.Unlock()
		t.connsAccepted.Add(1)
		t.wg.Add(1)
		go t.serve(conn)
	}
}

func (t *Transport) serve(conn net.Conn) {
	defer t.wg.Done()
	defer func() {
		conn.Close()
		t.mu.Lock()
		delete(t.accepted, conn)
		t.mu.Unlock()
	}()
	conn.SetDeadline(time.Now().Add(handshakeTimeout))
	from, key, err := serverHandshake(conn, t.secret, t.id, t.known)
	if err != nil {
		t.authFailures.Add(1)
		t.log.Warn("replica: peer refused", "remote", conn.RemoteAddr().String(), "err", err)
		return
	}
	conn.SetDeadline(time.Time{})
	cs := &connState{}
	defer t.handle.connEnded(cs)
	fr := newFrameReader(conn, key)
	for {
		kind, group, payload, err := fr.read()
		if err != nil {
			if errors.Is(err, ErrFrameMAC) || errors.Is(err, ErrFrameSize) {
				t.macFailures.Add(1)
				t.log.Warn("replica: peer frame refused, closing", "peer", from, "err", err)
			}
			return
		}
		if t.partitioned(from) {
			continue
		}
		t.framesIn.Add(1)
		t.handle.handleFrame(cs, from, kind, group, payload)
	}
}

// stream dials a connection of its own to peer to (same handshake, same
// frames) for one long transfer, a snapshot: write sends its frames (each
// write bounded by snapIOTimeout, TCP's flow control instead of the peer
// queue's drops), then the connection is half-closed and stream waits
// until the peer has read everything and closed its side.
func (t *Transport) stream(to, group uint64, write func(send func(kind byte, payload []byte) error) (int64, error)) (int64, error) {
	if t.partitioned(to) {
		return 0, fmt.Errorf("replica: stream to %d: partitioned", to)
	}
	t.mu.Lock()
	p := t.peers[to]
	if p == nil || t.closed {
		t.mu.Unlock()
		return 0, fmt.Errorf("%w: %d", ErrUnknownPeer, to)
	}
	addr := p.addr
	t.wg.Add(1)
	t.mu.Unlock()
	defer t.wg.Done()
	conn, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return 0, net.ErrClosed
	}
	t.streams[conn] = struct{}{}
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.streams, conn)
		t.mu.Unlock()
	}()
	conn.SetDeadline(time.Now().Add(handshakeTimeout))
	key, err := clientHandshake(conn, t.secret, t.id, to)
	if err != nil {
		return 0, err
	}
	fw := newFrameWriter(conn, key)
	n, err := write(func(kind byte, payload []byte) error {
		conn.SetDeadline(time.Now().Add(snapIOTimeout))
		if t.partitioned(to) {
			return fmt.Errorf("replica: stream to %d: partitioned", to)
		}
		if err := fw.write(kind, group, payload); err != nil {
			return err
		}
		t.framesOut.Add(1)
		return nil
	})
	if err == nil {
		err = fw.flush()
	}
	if err != nil {
		return n, err
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	conn.SetDeadline(time.Now().Add(snapIOTimeout))
	if _, err := io.Copy(io.Discard, conn); err != nil {
		return n, fmt.Errorf("replica: stream to %d: waiting for the peer: %w", to, err)
	}
	return n, nil
}

// partition cuts this node off from peers (nil: heal).
func (t *Transport) partition(peers ...uint64) {
	m := map[uint64]bool{}
	for _, p := range peers {
		m[p] = true
	}
	t.cut.Store(&m)
}

func (t *Transport) partitioned(peer uint64) bool {
	m := t.cut.Load()
	return m != nil && (*m)[peer]
}

// Stats returns the transport's counters.
func (t *Transport) Stats() TransportStats {
	return TransportStats{
		AuthFailures: t.authFailures.Load(), MACFailures: t.macFailures.Load(), Dropped: t.dropped.Load(),
		FramesIn: t.framesIn.Load(), FramesOut: t.framesOut.Load(), BadMessages: t.badMessages.Load(),
		ConnsAccepted: t.connsAccepted.Load(),
	}
}

// close stops accepting, closes every connection at once (no flush: to a
// peer this looks like a node that died) and waits for the goroutines.
// Idempotent.
func (t *Transport) close() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	close(t.stop)
	t.ln.Close()
	for c := range t.accepted {
		c.Close()
	}
	for c := range t.streams {
		c.Close()
	}
	for _, p := range t.peers {
		if p.conn != nil {
			p.conn.Close()
		}
	}
	t.mu.Unlock()
	t.wg.Wait()
}
