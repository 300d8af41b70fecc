package shard

import (
	"syscall"

	"berth.dev/broker/internal/wal"
)

// maxFileParts bounds the stored messages of one batch.
const maxFileParts = 64

// filePart is a payload sent from a log segment file.
type filePart struct {
	at  int          // send after vec[:at]
	loc wal.Location // holds the segment until Released
}

// readyStored is a stored entry read ahead: its message (payload left in
// the file) and the location holding the segment.
type readyStored struct {
	off uint64
	m   *message
	loc wal.Location
	err error
}

// prefetchStored reads the headers and keys of the next stored entries
// from the log without holding the session lock; fill then only pairs
// them with the ring's front. Only this writer pops the ring while the
// connection lives, so the front it saw is still the front, unless the
// session ended (fill then finds a mismatch and drops what was read).
func (c *conn) prefetchStored() {
	s, w, sess := c.shard, c.w.b, c.sess
	w.prefetch = false
	if s.log == nil || len(w.ready) > 0 {
		return
	}
	sess.mu.Lock()
	w.want = w.want[:0]
	for i := range min(sess.stored.len(), maxFileParts) {
		w.want = append(w.want, *sess.stored.at(i))
	}
	sess.mu.Unlock()
	for _, e := range w.want {
		if err := s.waitReadable(e.off); err != nil {
			w.ready = append(w.ready, readyStored{off: e.off, err: err})
			continue
		}
		m, loc, err := w.sr.load(s.log, e.off)
		w.ready = append(w.ready, readyStored{off: e.off, m: m, loc: loc, err: err})
	}
}

// releaseStored gives back what the writer still holds of the log.
func (c *conn) releaseStored() {
	w := c.w.b
	for i := range w.ready {
		w.ready[i].loc.Release()
	}
	clear(w.ready)
	w.ready = w.ready[:0]
	w.sr.close()
}

// fillStoredLocked adds stored messages (payload in the log) to the
// batch: the per-subscriber header goes into the vectors, the payload is
// sent from the segment file after it. It returns the batch bytes. It
// takes only entries prefetchStored read ahead, so no file is read under
// sess.mu; when those run out it asks the write loop to read more.
func (c *conn) fillStoredLocked(bytes int, now int64) int {
	sess, w := c.sess, c.w.b
	used := 0
	defer func() {
		n := copy(w.ready, w.ready[used:])
		clear(w.ready[n:])
		w.ready = w.ready[:n]
	}()
	for sess.stored.len() > 0 && bytes < maxBatchBytes && len(w.vec) < maxBatchVecs-1 && len(w.files) < maxFileParts {
		if e := sess.stored.peek(); e.qos > 0 && len(sess.inflight) >= int(c.window) {
			break // [MQTT-4.9.0-2]
		}
		if used == len(w.ready) {
			w.prefetch = true
			break
		}
		r := w.ready[used]
		used++
		if r.off != sess.stored.peek().off {
			// The ring changed under the read-ahead: drop it, read again.
			r.loc.Release()
			for _, rest := range w.ready[used:] {
				rest.loc.Release()
			}
			used = len(w.ready)
			w.prefetch = true
			break
		}
		e := sess.stored.pop()
		sess.dirty = true
		m, loc := r.m, r.loc
		if r.err != nil {
			c.logger().Warn("stored message unreadable; dropped", "offset", e.off, "err", r.err)
			sess.dropLocked(DropExpired)
			continue
		}
		if m.expired(now) {
			loc.Release()
			sess.deadLetterLocked(DropExpired, m, e.qos) // [MQTT-3.3.2-5]
			continue
		}
		if c.shard.pastRuleRetention(m.topic, m.created, now) {
			loc.Release()
			sess.dropLocked(DropRetention) // past its topic rule's retention (topicrules.go)
			continue
		}
		dv := delivery{msg: m, qos: e.qos, retain: e.retain}
		if e.subID != 0 {
			dv.subIDs[0], dv.nSub = e.subID, 1
		}
		hdr, ok := c.appendPublishLocked(&dv, now)
		if !ok {
			loc.Release()
			sess.deadLetterLocked(DropTooLarge, m, e.qos) // [MQTT-3.1.2-25]
			continue
		}
		w.vec = append(w.vec, hdr)
		if m.payLen > 0 {
			w.files = append(w.files, filePart{at: len(w.vec), loc: loc})
		} else {
			loc.Release()
		}
		bytes += len(hdr) + m.payLen
		w.msgs++
	}
	return bytes
}

// writeWithFiles writes a batch holding stored messages: vectors with
// writev, each stored payload with sendfile(2) from its segment file at
// its explicit offset, or, when the connection is not a plain socket (TLS,
// WebSocket), through a pooled buffer.
func (c *conn) writeWithFiles() (int64, error) {
	w := c.w.b
	all, files := w.vec, w.files
	defer func() {
		for i := range files {
			files[i].loc.Release()
		}
		w.files = files[:0]
		w.vec = all
	}()
	var total int64
	prev := 0
	for _, f := range files {
		w.vec = all[prev:f.at]
		n, err := c.writeVecs()
		total += n
		if err != nil {
			return total, err
		}
		m, err := c.sendFile(f.loc)
		total += int64(m)
		if err != nil {
			return total, err
		}
		prev = f.at
	}
	w.vec = all[prev:]
	n, err := c.writeVecs()
	return total + n, err
}

// sendFile sends loc's payload to the client.
func (c *conn) sendFile(loc wal.Location) (int, error) {
	n := int(loc.PayloadSize)
	if vc := vectorConn(c.nc); vc != nil {
		if sc, ok := vc.(syscall.Conn); ok {
			if c.w.sender == nil {
				snd, err := wal.NewSender(sc)
				if err != nil {
					return 0, err
				}
				c.w.sender = snd
			}
			return c.w.sender.Send(loc.File, loc.PayloadPos(), n)
		}
	}
	return wal.SendRange(c.nc, loc.File, loc.PayloadPos(), n)
}
