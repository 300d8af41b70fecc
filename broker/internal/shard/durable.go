package shard

import (
	"errors"
	"io"
	"sync"
	"time"

	"berth.dev/broker/internal/msgtrace"
	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/topic"
	"berth.dev/broker/packet"
)

// pendingAck is a PUBACK or PUBREC waiting for the fsync of the log
// record at off.
type pendingAck struct {
	off  uint64
	typ  packet.Type
	id   uint16
	code packet.ReasonCode
	read int64     // monoOf the PUBLISH's read (Latency); 0 no sample
	tr   *msgTrace // the PUBLISH's trace, ended on release; nil untraced
}

// ackSyncer pipelines acknowledgements under wal.SyncAlways: a reader
// never waits for an fsync. It parks the ack on its connection and
// registers the connection here; one goroutine per shard (ackLoop) waits
// for the log's group commit and releases every ack it covers. Records
// appended while one fsync runs are covered by the next.
type ackSyncer struct {
	mu     sync.Mutex
	conns  map[*conn]struct{}
	target uint64 // highest offset any registered ack waits for
	wake   chan struct{}
	list   []*conn // ackLoop's scratch
}

func (a *ackSyncer) init() {
	a.conns = make(map[*conn]struct{})
	a.wake = make(chan struct{}, 1)
}

// ackPublish acknowledges an accepted QoS 1/2 PUBLISH whose message is m:
// at once, or, under wal.SyncAlways, once m's log record is durable. An ack
// queued behind a pending one waits too, keeping acks in order. It fails
// when m could not be logged: a durable broker never acknowledges a
// message it could lose.
func (c *conn) ackPublish(m *message, qos byte, id uint16, code packet.ReasonCode) error {
	if m.lost {
		return packet.ErrUnspecified // whatever the fsync policy: it is not in the log
	}
	t := packet.TypePuback
	if qos == 2 {
		t = packet.TypePubrec // [MQTT-4.3.3-8]
	}
	s, sess := c.shard, c.sess
	sess.mu.Lock()
	if qos == 2 {
		sess.putAwaitingRelLocked(id, m.off) // as appendLocked set it, or 0 when not logged
	}
	always := s.syncAcks
	if !always || (m.off == 0 && len(c.pendingAcks) == 0) {
		c.sendAckLocked(t, id, code) // [MQTT-4.3.2-4]
		sess.mu.Unlock()
		c.outbox().add(c)
		c.noteAck(m.readAt)
		return nil
	}
	var off uint64
	if m.off != 0 {
		off = m.off - 1
	}
	if n := len(c.pendingAcks); n > 0 {
		off = max(off, c.pendingAcks[n-1].off)
	}
	c.pendingAcks = append(c.pendingAcks, pendingAck{off: off, typ: t, id: id, code: code, read: m.readAt, tr: m.trace})
	if m.trace != nil {
		m.trace.parked = true // the ack loop ends its root span
	}
	sess.mu.Unlock()
	s.waitAck(c, off)
	return nil
}

// waitAck registers c as having acks waiting for offset off.
func (s *Shard) waitAck(c *conn, off uint64) {
	a := &s.acks
	a.mu.Lock()
	a.conns[c] = struct{}{}
	a.target = max(a.target, off)
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// ackLoop is the shard's group-commit goroutine for acknowledgements.
func (s *Shard) ackLoop() {
	defer s.bgwg.Done()
	a := &s.acks
	for {
		select {
		case <-s.stopBg:
			return
		case <-a.wake:
		}
		for {
			a.mu.Lock()
			if len(a.conns) == 0 {
				a.mu.Unlock()
				break
			}
			target := a.target
			list := a.list[:0]
			for c := range a.conns {
				list = append(list, c)
			}
			clear(a.conns)
			a.list = list
			a.mu.Unlock()
			err := s.app.WaitDurable(target)
			durable := s.app.Durable()
			s.noteRoutable(durable)
			for _, c := range list {
				c.releaseAcks(durable, err)
			}
			clear(list)
		}
	}
}

// releaseAcks sends the pending acks whose records are below durable.
// After an fsync error nothing more is acknowledged: the connection is
// closed and the client sends its messages again.
func (c *conn) releaseAcks(durable uint64, err error) {
	sess := c.sess
	sess.mu.Lock()
	if err != nil {
		for i := range c.pendingAcks {
			if tr := c.pendingAcks[i].tr; tr != nil {
				now := time.Now()
				tr.child(msgtrace.NameFsync, tr.logged, now, err.Error())
				tr.endRoot(now, "fsync failed: not acknowledged")
			}
		}
		clear(c.pendingAcks)
		c.pendingAcks = c.pendingAcks[:0]
		c.gated = false // its queued messages are not durable, so never delivered
		sess.mu.Unlock()
		c.logger().Error("message log fsync failed; closing the connection unacknowledged", "err", err)
		c.kick(c.shard.unloggedCode())
		return
	}
	i := 0
	var now int64
	for ; i < len(c.pendingAcks) && c.pendingAcks[i].off < durable; i++ {
		pa := c.pendingAcks[i]
		c.sendAckLocked(pa.typ, pa.id, pa.code)
		if pa.read != 0 {
			if now == 0 {
				now = monoNow()
			}
			c.shard.opts.Latency.Ack.Record(now - pa.read)
		}
		if pa.tr != nil {
			end := time.Now()
			pa.tr.child(msgtrace.NameFsync, pa.tr.logged, end, "")
			pa.tr.endRoot(end, "")
		}
	}
	n := copy(c.pendingAcks, c.pendingAcks[i:])
	clear(c.pendingAcks[n:])
	c.pendingAcks = c.pendingAcks[:n]
	var next uint64
	if n > 0 {
		next = c.pendingAcks[n-1].off
	}
	gated := c.gated
	c.gated = false
	sess.mu.Unlock()
	if i > 0 || gated {
		c.wakeWriter() // acks to send, or queued messages now durable
	}
	if n > 0 {
		c.shard.waitAck(c, next)
	}
}

// checkpointLoop saves moved session cursors and deletes message-log
// segments no session needs, every CheckpointInterval.
func (s *Shard) checkpointLoop() {
	defer s.bgwg.Done()
	t := time.NewTicker(s.opts.CheckpointInterval)
	defer t.Stop()
	for tick := 1; ; tick++ {
		select {
		case <-s.stopBg:
			return
		case <-t.C:
			s.applyRetention()
			s.checkpoint(tick%fullCheckpointEvery == 0)
		}
	}
}

// fullCheckpointEvery is how many checkpoints pass between full ones,
// which visit every session (not only connected ones) and delete log
// segments no session needs.
const fullCheckpointEvery = 10

// checkpoint computes the cursors of connected (or otherwise changed)
// sessions under s.mu, so that no message is appended but not yet routed,
// and saves the persistent ones that moved. Only connected sessions move
// their cursor (offline ones got theirs at disconnect), so only they are
// visited, except by a full checkpoint, which visits every session and
// removes the log segments below every cursor. A stale cursor only means
// redelivery after a crash, never loss.
func (s *Shard) checkpoint(full bool) {
	var moved []*session
	s.mu.Lock()
	next := s.nextOffset()
	if !full {
		for c, attached := range s.conns {
			if sess := c.sess; attached && sess != nil {
				sess.mu.Lock()
				if cur, q2 := sess.cursorLocked(next), sess.moveQ2posLocked(next); cur != sess.cursor || q2 {
					sess.cursor, sess.dirty = cur, false
					if sess.expiry != 0 {
						moved = append(moved, sess)
					}
				}
				sess.mu.Unlock()
			}
		}
		s.mu.Unlock()
		s.saveCursors(moved)
		return
	}
	low := next
	for _, sess := range s.sessions {
		sess.mu.Lock()
		if sess.dirty || sess.conn != nil {
			sess.dirty = false
			if cur, q2 := sess.cursorLocked(next), sess.moveQ2posLocked(next); cur != sess.cursor || q2 {
				sess.cursor = cur
				if sess.expiry != 0 {
					moved = append(moved, sess)
				}
			}
		}
		// A session with nothing pending does not hold the log back.
		if sess.stored.len()+sess.queue.len()+len(sess.inflight) > 0 || sess.replaying > 0 {
			low = min(low, sess.cursor)
		}
		if sess.hasQoS2StateLocked() {
			low = min(low, sess.q2pos) // its QoS 2 state (qos2.go)
		}
		sess.mu.Unlock()
	}
	s.mu.Unlock()
	s.saveCursors(moved)
	var keepSince time.Time
	if s.opts.ReplayHistory > 0 {
		keepSince = time.Now().Add(-s.opts.ReplayHistory)
	}
	if _, err := s.removeBefore(low, keepSince); err != nil {
		s.opts.Logger.Warn("removing consumed log segments", "err", err)
	}
}

// batchSaver is a Store that saves many sessions with one fsync.
type batchSaver interface {
	SaveSessions([]*store.Session) error
}

// saveCursors saves the records of sessions whose cursor moved, in one
// batch when the store can.
func (s *Shard) saveCursors(list []*session) {
	if len(list) == 0 {
		return
	}
	bs, ok := s.store.(batchSaver)
	if !ok {
		for _, sess := range list {
			s.saveSession(sess)
		}
		return
	}
	if s.syncAcks {
		// The positions saved point into the message log: what lies
		// below them is durable before they are (QoS 2 state, qos2.go).
		if n := s.app.NextOffset(); n > 0 {
			_ = s.app.WaitDurable(n - 1)
		}
	}
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	recs := make([]*store.Session, 0, len(list))
	for _, sess := range list {
		if s.current(sess) {
			recs = append(recs, s.sessionRecord(sess))
		}
	}
	if err := bs.SaveSessions(recs); err != nil {
		s.opts.Logger.Warn("saving session cursors", "err", err)
	}
}

// rebuildPending refills the stored queues of persistent sessions after a
// restart: it scans the message log from the lowest session cursor and
// matches every message against the restored subscriptions. Called by
// New, before any connection.
func (s *Shard) rebuildPending() (int, error) {
	next := s.log.NextOffset()
	low := next
	for _, sess := range s.sessions {
		low = min(low, sess.q2from()) // its cursor, or its QoS 2 state below it
	}
	low = max(low, s.log.FirstOffset())
	if low >= next {
		return 0, nil
	}
	r, err := s.log.ReadFrom(low)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	var mt topic.Matches
	mt.Ready = func(topic.SubscriberID) bool { return true }
	now := time.Now().UnixNano()
	n := 0
	rb := s.newQoS2Rebuild()
	defer rb.finish()
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if store.IsStateKey(rec.Key) {
			rb.state(rec.Offset, rec.Key, rec.Payload)
			continue
		}
		var meta store.Meta
		if _, err := store.DecodeMeta(rec.Key, &meta); err != nil {
			s.opts.Logger.Warn("skipping undecodable log record", "offset", rec.Offset, "err", err)
			continue
		}
		if meta.Origin != nil {
			rb.marker(rec.Offset, meta.Origin, meta.OriginID)
		}
		if meta.Expires != 0 && now >= meta.Expires {
			continue // [MQTT-3.3.2-5]
		}
		s.tree.Match(meta.Topic, noPublisher, &mt)
		for i := range mt.Deliveries {
			md := &mt.Deliveries[i]
			sess := s.byID[md.Subscriber]
			qos := min(meta.QoS, md.QoS)
			if sess == nil || rec.Offset < sess.cursor || qos == 0 || sess.expiry == 0 {
				continue
			}
			e := storedEntry{off: rec.Offset, qos: qos, retain: meta.Retain && md.RetainAsPublished}
			if len(md.SubscriptionIDs) > 0 {
				e.subID = md.SubscriptionIDs[0]
			}
			sess.stored.push(e)
			n++
		}
	}
}

// queueBehindLocked parks a PUBACK or PUBREC behind acks still waiting
// for their fsync, so acknowledgements keep the order of the PUBLISH
// packets [MQTT-4.6.0-2]; it reports whether it did. The connection is
// already registered with the ack syncer while any ack is parked.
func (c *conn) queueBehindLocked(t packet.Type, id uint16, code packet.ReasonCode) bool {
	n := len(c.pendingAcks)
	if n == 0 || (t != packet.TypePuback && t != packet.TypePubrec) {
		return false
	}
	c.pendingAcks = append(c.pendingAcks, pendingAck{off: c.pendingAcks[n-1].off, typ: t, id: id, code: code})
	return true
}
