package shard

import (
	"slices"

	"berth.dev/broker/internal/store"
)

// QoS 1 acknowledgements in the message log.
//
// A session's saved cursor moves every CheckpointInterval; alone, it would
// make a crash redeliver every message the session acknowledged since the
// last checkpoint. So a reader notes the log offset of each QoS 1 delivery
// of a logged message that a persistent session PUBACKs (noteAckedLocked)
// and, when it flushes its outbox (once per burst of packets read, at most
// outboxPackets apart), appends one StateAcked record with the offsets of
// the burst (logAcked):
//
//	PUBACK id 7 ─▶ inflight[7] (off 4096) gone ─▶ logAcks += 4096
//	PUBACK ...                                  ─▶ logAcks += ...
//	outbox flush ─▶ append StateAcked{client id; 4096, ...} (one write(2))
//
// The record is written like any other (fsynced by the next group commit,
// never waited for: a PUBACK needs no answer, and a record lost to a power
// failure only means those deliveries are redelivered, as QoS 1 allows). It
// costs one write per burst, about a byte per acknowledgement for a
// session reading one stream, and nothing on the publishing path. After a
// restart the scan (rebuildPending, qos2Rebuild) takes the records at or
// above each session's position and removes their offsets from the
// session's rebuilt stored ring: only what was not acknowledged is sent
// again.

// maxLogAcks bounds the offsets a reader gathers before it appends their
// record; a flush normally comes first (outboxPackets).
const maxLogAcks = outboxPackets

// noteAckedLocked notes that the connection's session PUBACKed the QoS 1
// delivery d. Only logged messages of persistent sessions are noted:
// nothing else is rebuilt after a restart. sess.mu is held.
func (c *conn) noteAckedLocked(d *delivery) {
	if c.shard.log == nil || d.msg == nil || d.msg.off == 0 || c.sess.expiry == 0 {
		return
	}
	in := c.scratch()
	if in.nlogAcks == len(in.logAcks) {
		c.logAcked()
	}
	in.logAcks[in.nlogAcks] = d.msg.off - 1
	in.nlogAcks++
}

// logAcked appends the StateAcked record of the offsets noted since the
// last call, if any. A failed append is not an error: those deliveries are
// sent again after a crash, which QoS 1 allows.
func (c *conn) logAcked() {
	in := c.in
	if in == nil || in.nlogAcks == 0 {
		return
	}
	offs := in.logAcks[:in.nlogAcks]
	in.nlogAcks = 0
	slices.Sort(offs)
	bp := keyBufs.Get().(*[]byte)
	key := store.AppendStateKey((*bp)[:0], store.StateAcked, c.sess.clientID)
	rec := store.AppendAcked(key, offs)
	_, err := c.shard.app.Append(rec[:len(key):len(key)], rec[len(key):], 1)
	*bp = rec
	keyBufs.Put(bp)
	if err != nil {
		c.debug("appending acknowledgements to the message log", "err", err)
	}
}

// acked takes the StateAcked record at off of sess: its offsets at or
// above the session's cursor are deliveries not to rebuild.
func (rb *qos2Rebuild) acked(sess *session, off uint64, payload []byte) {
	done := rb.done[sess]
	err := store.Acked(payload, func(at uint64) {
		if at < sess.cursor {
			return // below the cursor: never rebuilt anyway
		}
		if done == nil {
			done = make(map[uint64]struct{})
			if rb.done == nil {
				rb.done = make(map[*session]map[uint64]struct{})
			}
			rb.done[sess] = done
		}
		done[at] = struct{}{}
	})
	if err != nil {
		rb.s.opts.Logger.Warn("skipping undecodable acknowledgement record", "offset", off, "err", err)
	}
}

// dropAcked removes the acknowledged deliveries from the rebuilt stored
// rings, keeping the order of the rest.
func (rb *qos2Rebuild) dropAcked() {
	for sess, done := range rb.done {
		for i, n := 0, sess.stored.len(); i < n; i++ {
			e := sess.stored.pop()
			if _, ok := done[e.off]; !ok {
				sess.stored.push(e)
			}
		}
	}
}
