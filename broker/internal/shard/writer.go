package shard

import (
	"net"
	"sync"
	"time"

	"berth.dev/broker/internal/wal"
)

// Batch bounds of one writev.
const (
	maxBatchBytes = 256 << 10
	maxBatchVecs  = 512 // below IOV_MAX (1024), two vectors per PUBLISH
	maxBatchMsgs  = 256 // as many PUBLISH packets as two vectors each allow
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
	used    bool        // b was used since the last sweep
	raw     *rawIO      // the socket under vectorConn, for inline writes; nil none
	sender  *wal.Sender // sendfile(2) to the raw socket, made on first use
	subIDs  []uint32    // scratch for variant headers; guarded by sess.mu
	ctrlOut []byte      // control packets being written (swapped with conn.ctrl)
	b       *batch      // the batch state, held only while writing (batch)
}

// batch is the state of building and writing batches. A connection takes
// one when it first has output and keeps it while it writes; once it has
// not written for a sweep (Shard.sweepBatches) the batch goes back to
// Shard.batches with its buffers, so a quiet connection keeps none.
type batch struct {
	vec     [][]byte      // the batch being built
	bufs    net.Buffers   // consumed by WriteTo; vec is copied in
	backing [][]byte      // the storage of bufs, kept because WriteTo advances bufs
	arena   []byte        // per-subscriber PUBLISH headers, and small payloads, of this batch
	msgs    int           // PUBLISH packets in the batch
	stamps  []int64       // read times of the batch's live deliveries (Latency)
	traced  []tracedWrite // the batch's live deliveries of traced messages
	flat    []byte        // the batch in one piece, for connections without writev
	// held are the pooled messages whose payloads the batch's vectors
	// point at, one reference each, released once the batch is written
	// or abandoned (msgbuf.go): an inflight entry's PUBACK may come
	// before that.
	held []*message

	// run is the index plus one of the last vector when it is a run of
	// whole packets in the arena (addArena), 0 none; runAt is where it
	// starts in the arena.
	run, runAt int

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

// writerFinished ends the writer's role once the last packets are out:
// the write side is shut (the reader closes the socket, linger.go).
func (c *conn) writerFinished() {
	c.shutWrite()
	c.flushed.Store(true)
	c.writerDone.Done()
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
		c.attachLocked() // a connection parked without its net.Conn gets one (detach.go)
		c.takeBatch()
		done := c.writeAll()
		if done {
			c.releaseStored()
			c.putBatch()
		}
		c.w.mu.Unlock()
		if done {
			c.writerFinished()
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
