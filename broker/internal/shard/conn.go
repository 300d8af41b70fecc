package shard

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
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
	info  ConnInfo
	// traffic is what this connection read and wrote: info.Traffic, or
	// own when that is nil. Atomics: the reader, the writer and
	// publishers writing inline all count into it.
	traffic *Traffic
	own     Traffic
	id      uint64                      // per shard, for logs
	log     atomic.Pointer[slog.Logger] // made on first use (logger)
	rd      packet.Reader               // its buffer comes from Shard.readBufs

	version   byte
	clientID  string
	sess      *session
	keepAlive time.Duration // read deadline per packet; 0 none

	// Limits the client announced.
	window      int // outbound inflight window; guarded by sess.mu once attached
	recvMax     int // the client's Receive Maximum (65535 when not given)
	maxOut      int // client's Maximum Packet Size; 0 none
	outAliasMax uint16
	outAliases  map[string]uint16
	inAliases   [][]byte // inbound topic aliases, index = alias

	// deadline fires at the credential's expiry (ConnInfo.Deadline);
	// reader-owned, moved by a re-authentication.
	deadline *time.Timer

	will      *willMsg
	willDelay uint32
	expiry0   bool // CONNECT asked for Session Expiry 0 [MQTT-3.14.2-2]

	// Guarded by sess.mu.
	ctrl       []byte      // encoded non-PUBLISH packets waiting for the writer
	ctrlFull   atomic.Bool // ctrl outgrew its bound: the client does not read
	kicked     atomic.Bool // kick ran: the reader handles no more input
	flushed    atomic.Bool // the writer wrote the last packets (linger)
	closing    bool
	kickReason packet.ReasonCode
	gated      bool // the writer waits for a queued message's record to be durable (deliverableLocked)
	// pendingAcks wait for their message's fsync (wal.SyncAlways), in
	// the order the PUBLISH packets came [MQTT-4.6.0-2].
	pendingAcks []pendingAck

	wake       chan struct{}
	onDone     func()         // Serve's done; nil none
	park       *parking       // nil: the connection keeps its goroutine while idle
	pstate     atomic.Uint32  // readerRunning or readerParked (park.go)
	writing    atomic.Bool    // a writer goroutine runs (startWriter)
	writerDone sync.WaitGroup // done when the last writer has closed the socket
	done       chan struct{}  // closed when the connection is fully torn down
	killTimer  *time.Timer    // closes the socket if the final flush hangs

	// Output; guarded by w.mu.
	w writeState

	// Reader-owned.
	in       *inbound // decoding scratch, held while there is input (scratch)
	big      *bigBuf  // holder of the read buffer when it came from Shard.bigBufs
	readsBig bool     // the last burst needed a buffer past readBufSize
	slab     slab     // inbound messages
	out      outbox   // connections with output from the packets being read
	connRead int64    // monoOf the CONNECT's read until its CONNACK is sent; 0 none
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
// last. Without a Poller, or for TLS and WebSocket connections, it is
// ServeConn followed by done.
func (s *Shard) Serve(nc net.Conn, info ConnInfo, done func()) {
	s.serve(nc, info, s.opts.Poller, done)
}

func (s *Shard) serve(nc net.Conn, info ConnInfo, p Poller, done func()) {
	c := &conn{
		shard:      s,
		nc:         nc,
		info:       info,
		id:         s.connSeq.Add(1),
		kickReason: reasonNone,
		wake:       make(chan struct{}, 1),
		done:       make(chan struct{}),
		onDone:     done,
	}
	c.traffic = info.Traffic
	if c.traffic == nil {
		c.traffic = &c.own
	}
	c.w.raw = rawConn(nc)
	c.slab.pool = &s.msgBufs
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
	c.rd.Reset(nc)
	c.rd.Use(s.readBufs.Get().(*[readBufSize]byte)[:])
	present, ok := c.handshake()
	if !ok {
		close(c.done)
		c.end()
		return
	}
	s.stats.connected.Add(1)
	s.stats.connections.Add(1)
	c.debug("client connected", "version", c.version, "session_present", present)
	c.out.add(c) // a resumed session may have messages waiting
	c.setDeadline(c.info.Deadline)
	c.canPark(p)
	c.loop()
}

func (c *conn) kickReasonValue() packet.ReasonCode {
	c.sess.mu.Lock()
	defer c.sess.mu.Unlock()
	return c.kickReason
}

// readLoop reads and handles packets until the connection ends. It
// reports whether the will message must be published: every end but a
// DISCONNECT with reason 0x00 [MQTT-3.14.4-3] [MQTT-3.1.2-8]; and
// whether the server ends it while the client may still be sending, so
// that its input must be drained before the socket is closed (linger.go).
// parked is true instead when the reader parked (park.go): a wake-up
// resumes the loop on another goroutine.
func (c *conn) readLoop() (sendWill, drain, parked bool) {
	sendWill, drain, parked = c.readPackets()
	if !parked {
		// A parked reader flushed before it parked, and no longer owns
		// its outbox.
		c.flushOut()
	}
	return sendWill, drain, parked
}

// readPackets is readLoop's loop.
func (c *conn) readPackets() (sendWill, drain, parked bool) {
	s := c.shard
	if c.park != nil && c.park.expired {
		// Resumed by the keep-alive timer: silent too long while parked.
		c.park.expired = false
		return true, c.readFailed(os.ErrDeadlineExceeded), false
	}
	for {
		var start time.Time
		if !c.rd.Ready() {
			// The next read may wait on the socket: only then is the clock
			// read and the deadline moved (a burst already buffered is
			// handled without either).
			if c.keepAlive > 0 || c.park != nil {
				start = time.Now()
			}
			if c.keepAlive > 0 {
				// [MQTT-3.1.2-22] (3.1.1: [MQTT-3.1.2-24]) one and a half
				// times the Keep Alive.
				_ = c.nc.SetReadDeadline(start.Add(c.keepAlive))
			}
		}
		if c.kicked.Load() {
			return true, true, false // after the deadline: kick moved it to now
		}
		if c.out.n > 0 && (c.out.packets >= outboxPackets || !c.rd.Ready()) {
			c.flushOut() // before waiting for input, or after a long burst
		}
		if c.rd.Buffered() == 0 {
			c.slab.release() // about to wait: an idle connection holds no chunk
			if c.w.raw != nil {
				park, err := c.idle(start)
				if err != nil {
					return true, c.readFailed(err), false
				}
				if park && c.parkReader(start) {
					return false, false, true
				}
			}
		}
		fh, body, err := c.rd.ReadPacket(s.maxPacketSize())
		if err != nil {
			return true, c.readFailed(err), false
		}
		c.out.packets++
		s.stats.bytesIn.Add(uint64(fh.Size())) // the whole packet: fixed header and body
		c.traffic.BytesIn.Add(uint64(fh.Size()))
		err = c.handle(fh, body)
		switch {
		case err == nil:
			if c.ctrlFull.Load() {
				// Acknowledgements pile up unread: stop handling more.
				c.fail(packet.ErrQuotaExceeded, nil)
				return true, true, false
			}
			continue
		case errors.Is(err, errDisconnect):
			return false, false, false
		case errors.Is(err, errDisconnectWithWill):
			return true, false, false
		default:
			c.fail(reasonOf(err), err)
			return true, true, false
		}
	}
}

// readFailed ends the connection after a failed read or wait for input
// and reports whether the client may still be sending: not when it
// closed its side or stayed silent past its keep alive.
func (c *conn) readFailed(err error) (drain bool) {
	if c.kicked.Load() {
		return true // kick interrupted the read; its reason stands
	}
	reason := readErrorReason(err)
	c.fail(reason, err)
	return reason != reasonNone && reason != packet.ErrKeepAliveTimeout
}

// readErrorReason maps a read failure to the DISCONNECT reason.
func readErrorReason(err error) packet.ReasonCode {
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), errors.Is(err, io.ErrUnexpectedEOF):
		return reasonNone
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return packet.ErrKeepAliveTimeout // [MQTT-3.1.2-22]
	case errors.Is(err, packet.ErrPacketTooLarge):
		return packet.ErrPacketTooLarge // MQTT 5.0 section 3.1.2.11.4
	}
	var code packet.ReasonCode
	if errors.As(err, &code) && code.IsFailure() {
		return code
	}
	return reasonNone
}

// reasonOf extracts the reason code an error carries, or 0x80.
func reasonOf(err error) packet.ReasonCode {
	var code packet.ReasonCode
	if errors.As(err, &code) && code.IsFailure() {
		return code
	}
	return packet.ErrUnspecified
}

// fail ends the connection because of err: MQTT 5 clients get a
// DISCONNECT with the reason [MQTT-4.13.1-1]; 3.1.1 clients are just
// closed [MQTT-4.8.0-1].
func (c *conn) fail(reason packet.ReasonCode, err error) {
	if reason != reasonNone {
		c.debug("closing connection", "reason", reason, "err", err)
	}
	c.kick(reason)
}

// kick starts closing the connection from any goroutine: it queues a
// DISCONNECT with reason for an MQTT 5 client (none for reasonNone or a
// 3.1.1 client), stops further PUBLISH output and input, and lets the
// writer flush and half-close the socket (shutWrite). The first reason
// wins.
func (c *conn) kick(reason packet.ReasonCode) {
	sess := c.sess // set by attach before anyone can reach c
	sess.mu.Lock()
	if c.closing {
		sess.mu.Unlock()
		return
	}
	c.closing = true
	c.kickReason = reason
	if c.version == packet.Version5 && reason != reasonNone {
		d := packet.Disconnect{Reason: reason}
		var err error
		if c.ctrl, err = d.Append(c.ctrl, packet.Version5); err != nil {
			// Not a DISCONNECT reason code: say "unspecified error" rather
			// than close without a word.
			d.Reason = packet.ErrUnspecified
			c.ctrl, _ = d.Append(c.ctrl, packet.Version5)
		}
	}
	c.killTimer = time.AfterFunc(closeFlushTimeout, func() { _ = c.nc.Close() })
	sess.mu.Unlock()
	// The reader handles no more input: from now on it only drains it
	// (linger.go), so a client that does not read is not left blocked in
	// its writes while the final packets wait for it to read.
	c.kicked.Store(true)
	_ = c.nc.SetReadDeadline(time.Now())
	c.wakeParked() // a parked reader resumes to end
	c.wakeWriter() // it flushes the last packets and half-closes the socket
}

func (c *conn) stopKillTimer() {
	c.sess.mu.Lock()
	if c.killTimer != nil {
		c.killTimer.Stop()
	}
	c.sess.mu.Unlock()
}

// logger returns the connection's logger, made on first use: most
// connections never log, and a logger's preformatted attributes cost
// about 400 bytes a connection.
func (c *conn) logger() *slog.Logger {
	if l := c.log.Load(); l != nil {
		return l
	}
	l := c.shard.opts.Logger.With("tenant_id", c.info.TenantID, "conn_id", c.id,
		"remote_addr", c.info.RemoteAddr)
	if c.clientID == "" {
		return l // still in CONNECT: keep none without the client id
	}
	l = l.With("client_id", c.clientID)
	if !c.log.CompareAndSwap(nil, l) {
		return c.log.Load()
	}
	return l
}

// debug logs at debug level, making the connection's logger only if that
// level is on.
func (c *conn) debug(msg string, args ...any) {
	if c.shard.opts.Logger.Enabled(context.Background(), slog.LevelDebug) {
		c.logger().Debug(msg, args...)
	}
}

// wakeWriter tells the writer there is something to send, starting it if
// none runs.
func (c *conn) wakeWriter() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
	c.startWriter()
}

// startWriter starts the writer goroutine unless one runs. A writer exits
// after writerIdle without work, so an idle connection costs no writer.
func (c *conn) startWriter() {
	if c.writing.CompareAndSwap(false, true) {
		go c.writeLoop()
	}
}

// sendLocked queues an encoded control packet; sess.mu is held.
func (c *conn) sendLocked(p interface {
	Append([]byte, byte) ([]byte, error)
}) {
	if c.closing {
		return
	}
	var err error
	c.ctrl, err = p.Append(c.ctrl, c.version)
	c.queuedLocked(err)
}

// sendAckLocked queues a PUBACK, PUBREC, PUBREL or PUBCOMP; sess.mu is
// held. Unlike sendLocked it needs no packet value that outlives it.
func (c *conn) sendAckLocked(t packet.Type, id uint16, code packet.ReasonCode) {
	if c.closing {
		return
	}
	a := packet.Ack{Type: t, PacketID: id, Reason: code}
	var err error
	c.ctrl, err = a.Append(c.ctrl, c.version)
	c.queuedLocked(err)
}

// queuedLocked checks a control packet just appended to c.ctrl.
func (c *conn) queuedLocked(err error) {
	if err != nil {
		c.logger().Error("encoding packet", "err", err)
	}
	if len(c.ctrl) > c.shard.maxCtrlBytes() {
		c.ctrlFull.Store(true)
	}
}

// maxCtrlBytes bounds the control packets (acks, PINGRESP) waiting for a
// client that does not read: a quarter of the queue bound, at least 64 KiB.
func (s *Shard) maxCtrlBytes() int { return max(64<<10, int(s.maxQueuedBytes.Load())/4) }

// send queues a control packet for the reader's outbox; reader only.
func (c *conn) send(p interface {
	Append([]byte, byte) ([]byte, error)
}) {
	c.sess.mu.Lock()
	c.sendLocked(p)
	c.sess.mu.Unlock()
	c.out.add(c)
}

// readyLocked reports whether a share-group member can take a message
// now. Called by topic.Match under the shard's read lock.
func (s *Shard) readyLocked(id topic.SubscriberID) bool {
	sess := s.byID[id]
	return sess != nil && sess.online.Load()
}
