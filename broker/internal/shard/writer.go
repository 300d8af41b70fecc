package shard

import (
	"crypto/tls"
	"net"
	"sync"
	"syscall"
	"time"

	"berth.dev/broker/internal/wal"

	"berth.dev/broker/packet"
)

// Batch bounds of one writev.
const (
	maxBatchBytes = 256 << 10
	maxBatchVecs  = 512 // below IOV_MAX (1024), two vectors per PUBLISH
)

// writeState is the output side of one connection, owned by whoever
// holds mu: the writer goroutine, or a publisher writing inline
// (writeInline). All its buffers are reused, so a steady stream of
// deliveries allocates nothing.
type writeState struct {
	mu sync.Mutex
	// pending: vec is the unwritten rest of a batch an inline write
	// began; the writer sends it before anything else.
	pending bool
	raw     *rawIO      // the socket under vectorConn, for inline writes; nil none
	sender  *wal.Sender // sendfile(2) to the raw socket, made on first use
	subIDs  []uint32    // scratch for variant headers; guarded by sess.mu
	ctrlOut []byte      // control packets being written (swapped with conn.ctrl)
	b       *batch      // the batch state, held only while writing (batch)
	used    bool        // b was used since the last sweep
}

// batch is the state of building and writing batches. A connection takes
// one when it first has output and keeps it while it writes; once it has
// not written for a sweep (Shard.sweepBatches) the batch goes back to
// Shard.batches with its buffers, so a quiet connection keeps none.
type batch struct {
	vec     [][]byte      // the batch being built
	bufs    net.Buffers   // consumed by WriteTo; vec is copied in
	backing [][]byte      // the storage of bufs, kept because WriteTo advances bufs
	arena   []byte        // per-subscriber PUBLISH headers of this batch
	msgs    int           // PUBLISH packets in the batch
	stamps  []int64       // read times of the batch's live deliveries (Latency)
	traced  []tracedWrite // the batch's live deliveries of traced messages
	flat    []byte        // the batch in one piece, for connections without writev
	// held are the pooled messages whose payloads the batch's vectors
	// point at, one reference each, released once the batch is written
	// or abandoned (msgbuf.go): an inflight entry's PUBACK may come
	// before that.
	held []*message

	// Stored messages: their payloads go from the log's segment files to
	// the socket, each after the vectors before files[i].at.
	files []filePart
	sr    storedReader
	// Stored messages read ahead of the batch, without the session lock.
	want     []storedEntry
	ready    []readyStored
	prefetch bool // fill stopped at the end of ready: read more ahead

	// The batch's QoS 2 StateOutSent record (qos2.go): its payload and
	// key scratch, and, under wal.SyncAlways, the offset plus one that
	// must be durable before the batch is written, or why it cannot be.
	sent, sentKey []byte
	syncAt        uint64
	sentErr       error
}

// writeBatch writes w.vec: with one writev where the connection supports
// it (TCP, Unix), else copied into one buffer so that, for example, a
// WebSocket connection sends one frame per batch, not one per vector.
func (c *conn) writeBatch() (int64, error) {
	if len(c.w.b.files) > 0 {
		return c.writeWithFiles()
	}
	return c.writeVecs()
}

// writeVecs writes w.vec (see writeBatch).
func (c *conn) writeVecs() (int64, error) {
	w := c.w.b
	if len(w.vec) == 0 {
		return 0, nil
	}
	if vc := vectorConn(c.nc); vc != nil {
		w.backing = append(w.backing[:0], w.vec...)
		w.bufs = w.backing
		return w.bufs.WriteTo(vc)
	}
	w.flat = w.flat[:0]
	for _, v := range w.vec {
		w.flat = append(w.flat, v...)
	}
	n, err := c.nc.Write(w.flat)
	if cap(w.flat) > 4*maxBatchBytes {
		w.flat = nil // do not keep a huge buffer after a big payload
	}
	return int64(n), err
}

// writeLoop is the connection's writer goroutine (at most one runs,
// startWriter). It sleeps until woken, gathers control packets and queued
// deliveries into one batch under the session lock, writes the batch with
// one writev outside the lock, and exits after writerIdle without work.
// It writes what inline writers leave: blocking writes, stored messages,
// the rest of a batch the socket did not take, the final flush.
func (c *conn) writeLoop() {
	idle := time.NewTimer(writerIdle)
	defer idle.Stop()
	wake := c.wakeChan()
	for {
		c.w.mu.Lock()
		c.takeBatch()
		done := c.writeAll()
		if done {
			c.releaseStored()
			c.putBatch()
		}
		c.w.mu.Unlock()
		if done {
			c.shutWrite() // the reader closes the socket (linger.go)
			c.flushed.Store(true)
			c.writerDone.Done()
			return
		}
		idle.Reset(writerIdle)
		select {
		case <-wake: // new output, or closing (kick)
		case <-idle.C:
			if !c.keepWriting() {
				return
			}
		}
	}
}

// takeBatch gives the connection batch state; c.w.mu is held. It keeps
// it while it writes; Shard.sweepBatches takes it back once unused.
func (c *conn) takeBatch() {
	if c.w.b == nil {
		c.w.b = c.shard.batches.Get().(*batch)
	}
	c.w.used = true
}

// putBatch gives the batch state back to the pool unless it is still in
// use: the rest of a batch waits for the writer (pending), or stored
// messages are read ahead. Nothing it holds may point at this
// connection's data any more: the vectors (payloads, headers) are
// cleared, an oversized buffer is dropped. c.w.mu is held.
func (c *conn) putBatch() {
	b := c.w.b
	if b == nil || c.w.pending || len(b.ready) > 0 || b.prefetch || len(b.files) > 0 {
		return
	}
	b.sr.close()
	b.releaseHeld()
	clear(b.vec[:cap(b.vec)])
	b.vec = b.vec[:0]
	clear(b.backing[:cap(b.backing)])
	b.backing, b.bufs = b.backing[:0], nil
	if cap(b.arena) > maxBatchBytes {
		b.arena = nil
	}
	c.shard.poison(b.arena[:cap(b.arena)])
	if cap(c.w.ctrlOut) > maxBatchBytes {
		c.w.ctrlOut = nil // a burst of acks long gone
	}
	b.flat = nil
	b.want = b.want[:0]
	c.w.b = nil
	c.shard.batches.Put(b)
}

// writerIdle is how long a writer goroutine waits for work before it
// exits; the next wakeWriter starts a new one.
const writerIdle = 2 * time.Second

// keepWriting is an idle writer's way out: it gives up the writer role
// and reports whether it must take it back because work came in
// meanwhile (and no new writer took it first).
func (c *conn) keepWriting() bool {
	c.writing.Store(false)
	if len(c.wakeChan()) == 0 {
		return false
	}
	return c.writing.CompareAndSwap(false, true)
}

// writeAll writes until nothing is left to send, and reports whether the
// connection is done: closed, or its final packets flushed. c.w.mu is held.
func (c *conn) writeAll() (done bool) {
	s := c.shard
	if c.w.pending {
		c.w.pending = false
		if !c.awaitSent() {
			return false // kicked: the next round flushes the DISCONNECT
		}
		ok := c.writeOut(s.opts.WriteTimeout, true)
		c.w.b.releaseHeld()
		if !ok {
			return true
		}
		c.recordDeliveries() // the rest of an inline write
	}
	for {
		c.prefetchStored()
		n, closing := c.fill()
		if n == 0 {
			if closing {
				return true
			}
			if c.w.b.prefetch {
				continue
			}
			return false
		}
		timeout := s.opts.WriteTimeout
		if closing {
			timeout = closeFlushTimeout
		}
		if !c.awaitSent() {
			return false // kicked: the next round flushes the DISCONNECT
		}
		ok := c.writeOut(timeout, false)
		c.w.b.releaseHeld()
		if !ok {
			return true
		}
		c.recordDeliveries()
		s.stats.msgsOut.Add(uint64(c.w.b.msgs))
		c.info.Traffic.addMessagesOut(uint64(c.w.b.msgs))
	}
}

// writeOut writes the batch, or only the rest an inline write left in
// w.vec, within timeout. A failed write kicks the connection: ok is false.
func (c *conn) writeOut(timeout time.Duration, rest bool) (ok bool) {
	_ = c.nc.SetWriteDeadline(time.Now().Add(timeout))
	var written int64
	var err error
	if rest {
		written, err = c.writeVecs()
	} else {
		written, err = c.writeBatch()
	}
	c.shard.stats.bytesOut.Add(uint64(written))
	c.info.Traffic.addBytesOut(uint64(written))
	if err != nil {
		c.debug("write failed", "err", err)
		c.kick(reasonNone)
		return false
	}
	return true
}

// inlineFanout is the widest publish whose subscribers go into the
// publisher's outbox (Shard.publishVia).
const inlineFanout = 4

// writeInline sends what is queued for c from the calling goroutine (a
// publisher's reader) instead of waking c's writer, saving a goroutine
// hand-off. It only does so when the writer is idle and the socket takes
// the whole batch at once; it never blocks on c's client. It reports
// whether nothing is left for the writer; false means wake it.
func (c *conn) writeInline() bool {
	if c.w.raw == nil || !c.w.mu.TryLock() {
		return false
	}
	defer c.w.mu.Unlock()
	if c.w.pending || c.w.b != nil && len(c.w.b.ready) > 0 {
		return false
	}
	s, sess := c.shard, c.sess
	sess.mu.Lock()
	if c.closing || sess.conn != c || s.log != nil && (sess.stored.len() > 0 || sess.replaying > 0) {
		sess.mu.Unlock()
		return false // closing, and stored messages, are the writer's
	}
	if c.w.b == nil && sess.queue.len() == 0 {
		return c.writeCtrlInline() // unlocks sess.mu
	}
	c.takeBatch()
	w := c.w.b
	n := c.fillLocked()
	c.logSentLocked()
	sess.mu.Unlock()
	if n == 0 {
		return true
	}
	if c.mustAwaitSent() {
		s.stats.msgsOut.Add(uint64(w.msgs))
		c.info.Traffic.addMessagesOut(uint64(w.msgs))
		c.w.pending = true // the writer waits for the fsync, then writes (qos2.go)
		return false
	}
	written, err := c.w.raw.tryWritev(w.vec)
	s.stats.bytesOut.Add(uint64(written))
	s.stats.msgsOut.Add(uint64(w.msgs))
	c.info.Traffic.addBytesOut(uint64(written))
	c.info.Traffic.addMessagesOut(uint64(w.msgs))
	rest := w.vec
	for len(rest) > 0 && written >= len(rest[0]) {
		written -= len(rest[0])
		rest = rest[1:]
	}
	if len(rest) == 0 && err == nil {
		w.releaseHeld()
		c.recordDeliveries()
		return true
	}
	if len(rest) > 0 {
		rest[0] = rest[0][written:]
	}
	w.vec = w.vec[:copy(w.vec, rest)]
	c.w.pending = true // the writer sends the rest, or meets the error
	return false
}

// writeCtrlInline is writeInline for a connection with only control
// packets to send (acknowledgements, CONNACK, PINGRESP): one write, no
// batch state, so a device that only publishes never takes any. c.w.mu
// and sess.mu are held; it unlocks sess.mu.
func (c *conn) writeCtrlInline() bool {
	if len(c.ctrl) == 0 {
		c.sess.mu.Unlock()
		return true
	}
	c.w.ctrlOut, c.ctrl = c.ctrl, c.w.ctrlOut[:0]
	c.sess.mu.Unlock()
	one := [1][]byte{c.w.ctrlOut}
	written, err := c.w.raw.tryWritev(one[:])
	c.shard.stats.bytesOut.Add(uint64(written))
	c.info.Traffic.addBytesOut(uint64(written))
	if written == len(c.w.ctrlOut) && err == nil {
		return true
	}
	// The socket took part: the writer sends the rest (or meets the error).
	c.takeBatch()
	c.w.b.vec = append(c.w.b.vec[:0], c.w.ctrlOut[written:])
	c.w.pending = true
	return false
}

// fill builds the next batch in c.w.vec and returns its number of
// vectors, and whether the connection is closing (then only control
// packets, such as the final DISCONNECT, are written).
func (c *conn) fill() (n int, closing bool) {
	sess := c.sess
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if c.closing || sess.conn != c {
		c.startBatchLocked()
		return len(c.w.b.vec), true
	}
	n = c.fillLocked()
	c.logSentLocked()
	return n, false
}

// startBatchLocked empties the batch and puts the waiting control packets
// first in it; sess.mu is held.
func (c *conn) startBatchLocked() {
	w := c.w.b
	w.releaseHeld() // the last batch is written, or abandoned
	w.vec = w.vec[:0]
	w.arena = w.arena[:0]
	w.msgs = 0
	w.stamps = w.stamps[:0]
	clear(w.traced)
	w.traced = w.traced[:0]
	if len(c.ctrl) > 0 {
		c.w.ctrlOut, c.ctrl = c.ctrl, c.w.ctrlOut[:0]
		w.vec = append(w.vec, c.w.ctrlOut)
	}
}

// fillLocked builds the batch of a connection that is not closing:
// control packets, stored messages, queued messages. It returns the
// number of vectors; sess.mu is held.
func (c *conn) fillLocked() int {
	c.startBatchLocked()
	sess, w := c.sess, c.w.b
	now := time.Now().UnixNano()
	bytes := 0
	if len(w.vec) > 0 {
		bytes = len(w.vec[0]) // the control packets
	}
	s := c.shard
	if s.log != nil && (sess.stored.len() > 0 || sess.replaying > 0) {
		bytes = c.fillStoredLocked(bytes, now)
		if sess.stored.len() > 0 || sess.replaying > 0 {
			return len(w.vec) // newer queued messages wait for these
		}
	}
	for sess.queue.len() > 0 && bytes < maxBatchBytes && len(w.vec) < maxBatchVecs {
		d := sess.queue.peek()
		if d.qos > 0 && len(sess.inflight) >= c.window {
			break // [MQTT-4.9.0-2] the client's Receive Maximum
		}
		if s.syncAcks && !c.deliverableLocked(d.msg) {
			break // its record is not durable yet: the ack loop wakes the writer
		}
		dv := sess.queue.pop()
		sess.queuedBytes -= dv.msg.size
		live := dv.live
		dv.live = false // a redelivery is no sample
		if dv.msg.expired(now) {
			sess.deadLetterLocked(DropExpired, dv.msg, dv.qos) // [MQTT-3.3.2-5]
			dv.msg.unref()
			continue
		}
		hdr, ok := c.appendPublishLocked(&dv, now)
		if !ok {
			sess.deadLetterLocked(DropTooLarge, dv.msg, dv.qos) // [MQTT-3.1.2-25]
			dv.msg.unref()
			continue
		}
		w.vec = append(w.vec, hdr)
		if len(dv.msg.payload) > 0 {
			w.vec = append(w.vec, dv.msg.payload)
			if dv.msg.buf != nil {
				dv.msg.ref() // the batch's, until written
				w.held = append(w.held, dv.msg)
			}
		}

		if live {
			w.stamps = append(w.stamps, dv.msg.readAt)
			if tr := dv.msg.trace; tr != nil {
				w.traced = append(w.traced, tracedWrite{tr: tr, qos: dv.qos, id: dv.id})
				if dv.qos > 0 {
					sess.traceInflightLocked(dv.id, dv.qos, tr)
				}
			}
		}
		bytes += len(hdr) + len(dv.msg.payload)
		w.msgs++
		if dv.qos == 0 {
			// The queue entry's reference ends here; a QoS 1/2 one
			// passed to the inflight entry (appendPublishLocked).
			dv.msg.unref()
		}
	}
	if !sess.fullSince.IsZero() && sess.queue.len() < s.opts.MaxQueuedMessages && int64(sess.queuedBytes) < s.maxQueuedBytes.Load() {
		sess.fullSince = time.Time{}
	}
	return len(w.vec)
}

// appendPublishLocked gives dv a packet id (QoS > 0), encodes its
// per-subscriber PUBLISH header into the batch arena and records it as
// inflight. It returns the header, or false, leaving the arena as it was,
// when the message exceeds the client's Maximum Packet Size.
func (c *conn) appendPublishLocked(dv *delivery, now int64) ([]byte, bool) {
	sess, w := c.sess, c.w.b
	if dv.qos > 0 {
		dv.id = sess.nextIDLocked()
		dv.state = statePublish
		sess.seq++
		dv.seq = sess.seq
		if len(sess.traced) > 0 {
			delete(sess.traced, dv.id) // a stale trace must not end at this copy's ack
		}
	}
	start := len(w.arena)
	var ok bool
	w.arena, ok = c.encodePublishLocked(w.arena, dv, false, now)
	if !ok {
		w.arena = w.arena[:start]
		return nil, false
	}
	if dv.qos > 0 {
		sess.putInflightLocked(dv.id, dv)
		c.noteSentLocked(dv)
	}
	return w.arena[start:len(w.arena):len(w.arena)], true
}

// vectorConn returns the connection to write vectors to with writev: nc
// itself when it is a TCP or Unix connection, or the connection a wrapper
// exposes with NetConn() (as crypto/tls does) when that is one. A wrapper
// must only expose a connection its writes go to unchanged (a PROXY
// protocol wrapper, not TLS). nil means no writev.
func vectorConn(nc net.Conn) net.Conn {
	for range 4 {
		switch nc.(type) {
		case *net.TCPConn, *net.UnixConn:
			return nc
		}
		u, ok := nc.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		if _, isTLS := nc.(interface{ ConnectionState() tls.ConnectionState }); isTLS {
			return nil // TLS encrypts: its writes are not the bytes below
		}
		nc = u.NetConn()
	}
	return nil
}

// rawConn is the socket under vectorConn(nc), for inline writes and idle
// waits; nil when there is none.
func rawConn(nc net.Conn) *rawIO {
	sc, ok := vectorConn(nc).(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return newRawIO(rc)
}

// encodePublishLocked appends the PUBLISH header for d to dst. The common
// case copies the message's cached header and patches packet id and
// flags; a header that differs per subscriber (subscription identifiers,
// a topic alias, a remaining expiry) is encoded as a variant. ok is false
// when the packet exceeds the client's Maximum Packet Size (dst is then
// unusable past its original length).
func (c *conn) encodePublishLocked(dst []byte, d *delivery, dup bool, now int64) ([]byte, bool) {
	m := d.msg
	v5 := c.version == packet.Version5
	start := len(dst)
	var alias uint16
	newAlias := false
	if v5 && c.outAliasMax > 0 {
		alias, newAlias = c.outAlias(m.topic)
	}
	if v5 && (d.nSub > 0 || alias != 0 || m.expireAt != 0) {
		p := packet.Publish{QoS: d.qos, Topic: m.topic, Payload: m.payload, Props: m.props.full()}
		if d.qos > 0 {
			p.PacketID = d.id
		}
		if alias != 0 {
			p.Props.Has.Set(packet.PropTopicAlias)
			p.Props.TopicAlias = alias
			if !newAlias {
				p.Topic = nil // [MQTT-3.3.2-12] the alias stands for the topic
			}
		}
		if m.expireAt != 0 {
			p.Props.MessageExpiry = m.remainingExpiry(now) // [MQTT-3.3.2-6]
		}
		if d.nSub > 0 {
			c.w.subIDs = d.appendSubIDs(c.w.subIDs[:0]) // [MQTT-3.3.4-3]
			p.Props.SubscriptionIDs = c.w.subIDs
		}
		var err error
		if dst, err = p.AppendHeader(dst, c.version); err != nil {
			c.logger().Error("encoding PUBLISH", "err", err)
			return dst, false
		}
		if m.stored {
			dst = addRemaining(dst, start, m.payLen)
		}
	} else {
		h, err := m.header(c.version, d.qos)
		if err != nil {
			c.logger().Error("encoding PUBLISH", "err", err)
			return dst, false
		}
		dst = append(dst, h...)
		if d.qos > 0 {
			packet.SetPacketID(dst[start:], d.id)
		}
	}
	packet.SetPublishFlags(dst[start:], dup && d.qos > 0, d.retain)
	if c.maxOut > 0 && len(dst)-start+m.payloadLen() > c.maxOut {
		if newAlias {
			delete(c.outAliases, string(m.topic))
		}
		return dst, false
	}
	return dst, true
}

// outAlias returns the outbound topic alias for name, assigning the next
// free one while the client's Topic Alias Maximum allows; isNew reports a
// fresh assignment (the topic must then be sent with the alias).
func (c *conn) outAlias(name []byte) (alias uint16, isNew bool) {
	if a, ok := c.outAliases[string(name)]; ok {
		return a, false
	}
	if len(c.outAliases) >= int(c.outAliasMax) {
		return 0, false
	}
	if c.outAliases == nil {
		c.outAliases = make(map[string]uint16)
	}
	a := uint16(len(c.outAliases) + 1)
	c.outAliases[string(name)] = a
	return a, true
}

// batchSweepInterval is how often the batch state of connections that
// stopped writing is taken back: after one to two intervals unused.
const batchSweepInterval = 5 * time.Second

// sweepBatches gives the batch state of every connection that has not
// written since the last sweep back to the pool, so that a connection
// that went quiet keeps no write buffers, while one that writes keeps
// its state and costs the pool nothing. A connection being written to is
// skipped (its lock is only tried).
func (s *Shard) sweepBatches() {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for c := range s.conns {
		if !c.w.mu.TryLock() {
			continue
		}
		if c.w.used {
			c.w.used = false
		} else {
			c.putBatch()
		}
		c.w.mu.Unlock()
	}
}
