package replica

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"

	pb "go.etcd.io/raft/v3/raftpb"
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
// snapshot streams it carries (snapin.go). The connection's goroutine
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
	BytesIn       uint64 // bytes of verified frames received (header, body and MAC)
	BytesOut      uint64 // bytes of frames written (header, body and MAC)
	BadMessages   uint64 // verified frames whose content was refused (wrong from/to, bad encoding)
	ConnsAccepted uint64
	// Snapshot streams (snapstream.go, snapin.go): started to followers, received
	// whole, and installed into the state machine.
	SnapshotsSent, SnapshotsReceived, SnapshotsInstalled uint64
}

// frameBytes is what one frame of payload n takes on the wire.
func frameBytes(n int) uint64 { return uint64(frameHeaderSize + frameBodyHeader + n + macSize) }

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
	bytesIn, bytesOut                                                                   atomic.Uint64
}

// outFrame is a frame queued for a peer: its payload, or a raft message the
// peer's sender marshals straight into its frame buffer (the Ready loop
// neither encodes nor allocates for it). size is what it counts against
// QueueBytes.
type outFrame struct {
	kind    byte
	group   uint64
	payload []byte
	msg     *pb.Message
	size    int64
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
func (p *peer) take(f outFrame) { p.queued.Add(-f.size) }

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
	return t.enqueue(to, outFrame{kind: kind, group: group, payload: payload, size: int64(len(payload))})
}

// sendMsg is send for a raft message, encoded by the peer's sender. Raft
// does not change a message, nor the entries it carries, once it handed
// them out in a Ready (etcd's own transport encodes them on its senders
// too). It counts msgSize(m) against QueueBytes.
func (t *Transport) sendMsg(to uint64, kind byte, group uint64, m *pb.Message) bool {
	return t.enqueue(to, outFrame{kind: kind, group: group, msg: m, size: msgSize(m)})
}

// msgSize is about what m takes encoded, at least its entries' and
// snapshot's data, without encoding it.
func msgSize(m *pb.Message) int64 {
	n := int64(64 + len(m.GetContext()) + len(m.GetSnapshot().GetData()))
	for _, e := range m.GetEntries() {
		n += int64(32 + len(e.GetData()))
	}
	return n
}

func (t *Transport) enqueue(to uint64, f outFrame) bool {
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
	n := f.size
	if before := p.queued.Add(n) - n; before > 0 && before+n > t.queueBytes {
		p.queued.Add(-n)
		t.dropped.Add(1)
		return false
	}
	select {
	case p.q <- f:
		return true
	default:
		p.queued.Add(-n)
		t.dropped.Add(1)
		return false
	}
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
		ConnsAccepted: t.connsAccepted.Load(), BytesIn: t.bytesIn.Load(), BytesOut: t.bytesOut.Load(),
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
