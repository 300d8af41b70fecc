package shard

import (
	"fmt"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/packet"
)

// QoS 2 exactly-once across a crash (with a message log).
//
// Inbound, the message record itself marks the message awaiting PUBREL
// (store.AppendOrigin: the session's client id and packet id in the
// record's key), so the marker is durable exactly when the message is and
// the PUBREC waits for both. A PUBREL appends a StateInReleased record and
// the PUBCOMP waits for its fsync: a publisher never sees PUBCOMP for an
// id the broker could still take for awaiting PUBREL after a restart.
//
// Outbound, to a persistent session, a QoS 2 PUBLISH of a logged message
// goes out only once a StateOutSent record (log offset, packet id) is
// durable; the PUBREL answering its PUBREC only once a StateOutReleased
// record is; a PUBCOMP appends StateOutCompleted (not waited for: if it is
// lost the PUBREL is sent again, which the client answers with PUBCOMP
// [MQTT-4.3.3-12]). The waits apply under wal.SyncAlways only; the other
// policies append without waiting, as they acknowledge.
//
//	PUBLISH ─▶ append message+origin ─▶ fsync ─▶ PUBREC
//	PUBREL  ─▶ append in-released     ─▶ fsync ─▶ PUBCOMP
//	append out-sent ─▶ fsync ─▶ PUBLISH ... PUBREC ─▶ append out-released ─▶ fsync ─▶ PUBREL
//	PUBCOMP ─▶ append out-completed
//
// Every checkpoint saves, with each session's cursor, the lowest log
// offset holding its QoS 2 state (q2pos: its awaiting markers and
// released records; store.Session.QoS2From). After a restart the log is
// read from there (qos2Rebuild): markers and released records rebuild
// awaitingRel; sent, released and completed records rebuild the outbound
// flows, whose messages are then resent with DUP and their packet id, or
// as PUBREL, and never again as new messages (connect.go,
// redeliverLocked).

// awaitRelease records that the inbound QoS 2 message with packet id id
// was logged at off-1 (appendLocked, under the shard's read lock, so a
// checkpoint sees the marker with the message).
func (sess *session) awaitRelease(id uint16, off uint64) {
	sess.mu.Lock()
	sess.putAwaitingRelLocked(id, off)
	sess.mu.Unlock()
}

// sentLogged reports whether the QoS 2 delivery d had a StateOutSent
// record logged for it (noteSentLocked); sess.mu is held.
func (c *conn) sentLogged(d *delivery) bool {
	return c.shard.log != nil && d.qos == 2 && d.msg != nil && d.msg.off != 0 && c.sess.expiry != 0
}

// appendQoS2Locked appends a state record of kind with payload packet id
// for the connection's session; sess.mu is held.
func (c *conn) appendQoS2Locked(kind byte, id uint16) (uint64, error) {
	off, err := c.shard.appendState(kind, c.sess.clientID, id)
	if err != nil {
		c.logger().Error("appending a QoS 2 state record", "err", err)
	}
	return off, err
}

// appendState appends a state record of kind with payload packet id for
// the session of clientID and returns its offset.
func (s *Shard) appendState(kind byte, clientID string, id uint16) (uint64, error) {
	bp := keyBufs.Get().(*[]byte)
	key := store.AppendStateKey((*bp)[:0], kind, clientID)
	var pl [2]byte
	off, err := s.app.Append(key, store.AppendPacketID(pl[:0], id), 1)
	*bp = key
	keyBufs.Put(bp)
	return off, err
}

// logQoS2Locked appends a state record of kind for packet id and, under
// wal.SyncAlways, parks the acknowledgement t until the record is durable
// (ackLoop): parked is true, the caller sends nothing. When the record
// cannot be appended under wal.SyncAlways the ack is never sent and err
// ends the connection. sess.mu is held.
func (c *conn) logQoS2Locked(kind byte, id uint16, t packet.Type, code packet.ReasonCode) (parked bool, err error) {
	s, sess := c.shard, c.sess
	off, err := c.appendQoS2Locked(kind, id)
	always := s.syncAcks
	if err != nil {
		if always {
			return false, fmt.Errorf("%w: %w", packet.ErrUnspecified, err)
		}
		return false, nil
	}
	if kind == store.StateOutReleased {
		sess.putRelAtLocked(id, off+1)
	}
	if !always {
		return false, nil
	}
	if n := len(c.pendingAcks); n > 0 {
		off = max(off, c.pendingAcks[n-1].off)
	}
	c.pendingAcks = append(c.pendingAcks, pendingAck{off: off, typ: t, id: id, code: code})
	s.waitAck(c, off)
	return true, nil
}

// completeOutLocked ends the logged outbound flow of packet id after its
// PUBCOMP; sess.mu is held.
func (c *conn) completeOutLocked(id uint16) {
	sess := c.sess
	if _, ok := sess.relAtLocked()[id]; !ok {
		return
	}
	delete(sess.aside.relAt, id)
	_, _ = c.appendQoS2Locked(store.StateOutCompleted, id)
}

// q2posLocked is the lowest log offset holding QoS 2 state the session
// still needs: its logged awaiting markers and released records; next
// when none. sess.mu is held.
func (sess *session) q2posLocked(next uint64) uint64 {
	pos := next
	for _, at := range sess.awaitingRelLocked() {
		if at != 0 {
			pos = min(pos, at-1)
		}
	}
	for _, at := range sess.relAtLocked() {
		pos = min(pos, at-1)
	}
	return pos
}

// moveQ2posLocked sets q2pos as of next and reports whether it moved.
func (sess *session) moveQ2posLocked(next uint64) bool {
	pos := sess.q2posLocked(next)
	moved := pos != sess.q2pos
	sess.q2pos = pos
	return moved
}

// hasQoS2StateLocked reports whether the session holds QoS 2 state in
// the log, which must not be removed below q2pos.
func (sess *session) hasQoS2StateLocked() bool {
	for _, at := range sess.awaitingRelLocked() {
		if at != 0 {
			return true
		}
	}
	return len(sess.relAtLocked()) > 0
}

// q2from is where the session's records are read from after a restart:
// its cursor, or its QoS 2 position when lower.
func (sess *session) q2from() uint64 { return min(sess.cursor, sess.q2pos) }

// qos2From is store.Session.QoS2From for a session: q2pos plus one when
// it lies below the cursor, else 0.
func (sess *session) qos2FromLocked() uint64 {
	if sess.q2pos < sess.cursor {
		return sess.q2pos + 1
	}
	return 0
}

// noteSentLocked adds the QoS 2 delivery dv, just given its packet id, to
// the batch's StateOutSent record when it must be logged; sess.mu is
// held.
func (c *conn) noteSentLocked(dv *delivery) {
	if dv.qos == 2 && c.sentLogged(dv) {
		w := c.w.b
		w.sent = store.AppendSent(w.sent, dv.msg.off-1, dv.id)
	}
}

// logSentLocked appends the batch's StateOutSent record, if it has one;
// under wal.SyncAlways the batch is written only once the record is
// durable (awaitSent). sess.mu is held.
func (c *conn) logSentLocked() {
	w := c.w.b
	if len(w.sent) == 0 {
		return
	}
	s := c.shard
	w.sentKey = store.AppendStateKey(w.sentKey[:0], store.StateOutSent, c.sess.clientID)
	off, err := s.app.Append(w.sentKey, w.sent, 1)
	w.sent = w.sent[:0]
	if !s.syncAcks {
		if err != nil {
			c.logger().Error("appending a QoS 2 state record", "err", err)
		}
		return
	}
	if err != nil {
		w.sentErr = err
		return
	}
	w.syncAt = max(w.syncAt, off+1)
}

// mustAwaitSent reports whether the batch waits for a StateOutSent
// record (then it is not written inline).
func (c *conn) mustAwaitSent() bool {
	w := c.w.b
	return w != nil && (w.syncAt != 0 || w.sentErr != nil)
}

// awaitSent waits until the batch's StateOutSent record is durable. It
// reports false when it is not: the batch is dropped unwritten (its
// messages stay inflight, resent on the next connection) and the
// connection closed. c.w.mu is held.
func (c *conn) awaitSent() bool {
	w := c.w.b
	if w.syncAt == 0 && w.sentErr == nil {
		return true
	}
	at, err := w.syncAt, w.sentErr
	w.syncAt, w.sentErr = 0, nil
	if err == nil {
		err = c.shard.app.WaitDurable(at - 1)
	}
	if err == nil {
		return true
	}
	c.logger().Error("QoS 2 state record not durable; closing the connection", "err", err)
	code := c.shard.unloggedCode()
	w.vec = w.vec[:0]
	for i := range w.files {
		w.files[i].loc.Release()
	}
	clear(w.files)
	w.files = w.files[:0]
	c.kick(code)
	return false
}
