package shard

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"berth.dev/broker/internal/topic"
	"berth.dev/broker/packet"
)

// closeFlushTimeout bounds the final flush (DISCONNECT) of a connection
// being closed by the server, and the draining of its input (linger.go).
const closeFlushTimeout = 2 * time.Second

// reasonNone marks a close that sends no DISCONNECT.
const reasonNone packet.ReasonCode = 0xFF

// conn is one client network connection. The goroutine running ServeConn
// (or Serve, and after a park whichever goroutine resumed it: park.go)
// reads and handles packets; output is written by whoever holds w.mu: a
// reader writing inline (its own or a publisher's, writeInline) or the
// connection's writer goroutine, started on demand.
type conn struct {
	shard *Shard
	nc    net.Conn
	info  connInfo // what it keeps of the ConnInfo (conninfo.go)
	// info.Traffic counts what this connection read and wrote; nil for
	// none (its methods count nothing then). Atomics: the reader, the
	// writer and publishers writing inline all count into it.
	id  uint64                      // per shard, for logs
	log atomic.Pointer[slog.Logger] // made on first use (logger)
	rd  packet.Reader               // its buffer comes from Shard.readBufs

	clientID string
	sess     *session

	// Limits the client announced, packed with the small fields below
	// into 16 B (docs/idle-connections.md).
	window      uint16 // outbound inflight window (windowFor); guarded by sess.mu once attached
	recvMax     uint16 // the client's Receive Maximum (65535 when not given)
	outAliasMax uint16
	ka          uint16 // the granted Keep Alive in seconds; keepAlive derives the read deadline
	maxOut      uint32 // client's Maximum Packet Size; 0 none
	expiry0     bool   // CONNECT asked for Session Expiry 0 [MQTT-3.14.2-2]
	readsBig    bool   // the last burst needed a buffer past readBufSize; reader-owned
	version     byte
	outAliases  map[string]uint16
	inAliases   [][]byte // inbound topic aliases, index = alias; made on first use

	will *willMsg // with its Will Delay Interval (willMsg.delay)
	// rare holds the timers and the ended channel few connections ever
	// make (connrare.go); guarded by sess.mu, nil until one is needed.
	rare *connRare

	// Guarded by sess.mu.
	ctrl       []byte      // encoded non-PUBLISH packets waiting for the writer
	ctrlFull   atomic.Bool // ctrl outgrew its bound: the client does not read
	kicked     atomic.Bool // kick ran: the reader handles no more input
	flushed    atomic.Bool // the writer wrote the last packets (linger)
	closing    bool
	kickReason packet.ReasonCode
	over       bool // torn down (ended); guarded by sess.mu
	gated      bool // the writer waits for a queued message's record to be durable (deliverableLocked)
	// pendingAcks wait for their message's fsync (wal.SyncAlways), in
	// the order the PUBLISH packets came [MQTT-4.6.0-2].
	pendingAcks []pendingAck

	// wake tells the writer it has work: made by the first wakeWriter
	// (most connections write everything inline and never need it).
	wake       atomic.Pointer[chan struct{}]
	onDone     func()         // Serve's done; nil none
	park       parking        // park.key 0: the connection keeps its goroutine while idle
	pstate     atomic.Uint32  // readerRunning or readerParked (park.go)
	writing    atomic.Bool    // a writer goroutine runs (startWriter)
	writerDone sync.WaitGroup // done when the last writer has closed the socket

	// Output; guarded by w.mu.
	w writeState

	// Reader-owned.
	in  *inbound // decoding scratch and the slab of inbound messages, held while there is input (scratch)
	big *bigBuf  // holder of the read buffer when it came from Shard.bigBufs
}

// ServeConn runs one client connection to completion: CONNECT, the
// session, then packets until the client disconnects, breaks the protocol,
// is taken over or the shard shuts down. It closes nc before returning.
// The connection keeps the calling goroutine while idle; see Serve.
//
// Batches go out with one writev on a *net.TCPConn or *net.UnixConn. A
// wrapper (PROXY protocol) keeps that by exposing the connection its
// writes go to unchanged with a NetConn() net.Conn method; any other
// net.Conn gets one Write per batch.
func (s *Shard) ServeConn(nc net.Conn, info ConnInfo) {
	s.serve(nc, info, nil, nil)
}

// Serve runs one client connection like ServeConn, but returns as soon
// as the connection parks (with Options.Poller, a plain socket with
// nothing to read: park.go) or ends; done, if not nil, is called once the
// connection has ended and nc is closed, on whichever goroutine ran it
// last. With a Poller, a plain socket's Serve returns at once, waiting
// on nothing the peer does: its handshake runs on one of the shard's
// handshake workers (handshakes.go), so a listener may call it on its
// accepting goroutine. Without a Poller, or for TLS and WebSocket
// connections, it is ServeConn followed by done.
func (s *Shard) Serve(nc net.Conn, info ConnInfo, done func()) {
	s.serve(nc, info, s.opts.Poller, done)
}

func (s *Shard) serve(nc net.Conn, info ConnInfo, p Poller, done func()) {
	c := &conn{
		shard:      s,
		nc:         nc,
		info:       keptInfo(&info),
		id:         s.connSeq.Add(1),
		kickReason: reasonNone,
		onDone:     done,
	}
	c.w.raw = rawConn(nc)
	c.writerDone.Add(1)
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		_ = nc.Close()
		if done != nil {
			done()
		}
		return
	}
	s.conwg.Add(1)
	s.conns[c] = false
	s.mu.Unlock()
	c.rd.Reset(c.w.raw.reader(nc)) // ready bytes read with RawSyscall (rawio_linux.go)
	if p == nil || c.w.raw == nil {
		// ServeConn, TLS, WebSocket: the caller's goroutine throughout.
		// A listener that calls Serve on its accepting goroutine
		// (listener.Server.Inline) hands it only TCP connections, whose
		// raw socket is there.
		s.handshakeNow(c, &info, p)
		return
	}
	// A connection that can park holds no goroutine before its CONNECT
	// either, only a few handshakes run at once, and Serve returns at
	// once: a worker takes it (handshakes.go).
	s.hs.enqueue(s, &preConnect{c: c, info: info})
}

// readyLocked reports whether a share-group member can take a message
// now. Called by topic.Match under the shard's read lock.
func (s *Shard) readyLocked(id topic.SubscriberID) bool {
	sess := s.byID[id]
	return sess != nil && sess.online.Load()
}
