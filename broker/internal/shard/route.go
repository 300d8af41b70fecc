package shard

import (
	"errors"
	"syscall"
	"time"

	"berth.dev/broker/internal/topic"
	"berth.dev/broker/packet"
)

// takeoverTimeout bounds the wait for a taken-over connection to finish.
const takeoverTimeout = 5 * time.Second

// attach binds c to the session of its client id, taking over a live
// connection of the same id [MQTT-3.1.4-3] and discarding the old session
// when clean is set [MQTT-3.1.2-4]. present reports a resumed session
// [MQTT-3.2.2-2] [MQTT-3.2.2-3]. The CONNACK ack, with Session Present
// set, and the redelivery of a resumed session's inflight messages are
// queued in the same hold of the session lock that makes c its
// connection: no delivery routed to the session can go out before them
// [MQTT-3.2.0-1] [MQTT-4.4.0-1].
//
// A session belongs to the credential that created it (session.owner):
// a connection of another credential is refused with 0x85 Client
// Identifier not valid (3.1.1: return code 2), clean start or not, and the
// session and its connection are left alone. A session with no owner (a
// record from before owners were kept) goes to the first credential that
// resumes it. A resumed session keeps only the subscriptions the new
// connection's Authorizer still allows (dropSubsLocked).
func (s *Shard) attach(c *conn, clean bool, expiry uint32, ack *packet.Connack) (sess *session, present bool, err error) {
	cred := c.info.CredentialID
	for {
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			return nil, false, packet.ErrServerUnavailable
		}
		sess = s.sessions[c.clientID]
		if sess != nil {
			if sess.owner != "" && sess.owner != cred {
				s.mu.Unlock()
				c.logger().Info("connection refused: the client id's session belongs to another credential")
				return nil, false, packet.ErrClientIDNotValid
			}
			sess.mu.Lock()
			old := sess.conn
			sess.mu.Unlock()
			if old != nil {
				s.mu.Unlock()
				old.kick(packet.ErrSessionTakenOver)
				select {
				case <-old.ended():
				case <-time.After(takeoverTimeout):
					return nil, false, packet.ErrServerBusy
				}
				continue
			}
		} else if err := s.admitSessionLocked(); err != nil {
			// A new session over the tenant's sessions quota (sessioncap.go);
			// resuming or taking one over never gets here.
			s.mu.Unlock()
			c.logger().Info("connection refused: the tenant's sessions quota is reached", "max_sessions", s.caps.maxSessions.Load())
			return nil, false, err
		}
		var will *willMsg
		var ended string
		if sess != nil && clean {
			will = s.endSessionLocked(sess)
			ended = sess.clientID
			sess = nil
		}
		present = sess != nil
		if sess == nil {
			sess = s.newSessionLocked(c.clientID)
		}
		c.sess = sess
		s.conns[c] = true
		var revoked []string
		if present && c.info.Authorizer != nil {
			revoked = s.dropSubsLocked(sess, c.info.Authorizer)
		}
		sess.mu.Lock()
		adopted := sess.owner != cred // new, or an ownerless session resumed
		sess.owner = cred
		sess.conn = c
		sess.attachedAt = time.Now().UnixNano()
		sess.version = c.version
		c.window = windowFor(c.recvMax, int(s.maxInflight.Load()))
		sess.online.Store(true)
		sess.gen++
		sess.expiry = expiry
		sess.fullSince = 0
		// A reconnect before the Will Delay Interval cancels the will
		// [MQTT-3.1.3-9]; the session is no longer expiring.
		sess.takePendingWillLocked()
		sess.stopTimersLocked()
		ack.SessionPresent = present
		c.sendLocked(ack)
		s.mu.Unlock()
		if present {
			// Under sess.mu alone (redelivery may read the log or
			// dead-letter), still before any delivery can be queued.
			c.redeliverLocked()
		}
		sess.mu.Unlock()
		if ended != "" {
			s.forget(ended)
		}
		if will != nil {
			s.publishWill(will)
		}
		if len(revoked) > 0 {
			c.logger().Info("subscriptions no longer allowed by the credential dropped on resume",
				"subscriptions", len(revoked), "filters", revoked)
		}
		if present && expiry != 0 && (adopted || len(revoked) > 0) {
			s.saveSession(sess) // the new owner, the remaining subscriptions
		}
		return sess, present, nil
	}
}

// dropSubsLocked removes the subscriptions of sess that auth no longer
// allows (a resumed session whose credential's ACL narrowed), counts them
// in sess.rare.subsRevoked and returns their filters. s.mu is held, so no
// message is routed to them meanwhile.
func (s *Shard) dropSubsLocked(sess *session, auth Authorizer) []string {
	var dropped []string
	for _, sub := range s.tree.Subscriptions(sess.id, nil) {
		if auth.CanSubscribe(sub.Filter.Raw) {
			continue
		}
		if _, err := s.tree.Unsubscribe(sess.id, sub.Filter.Raw); err == nil {
			dropped = append(dropped, sub.Filter.Raw)
		}
	}
	if len(dropped) > 0 {
		sess.mu.Lock()
		sess.rareLocked().subsRevoked += uint64(len(dropped))
		sess.mu.Unlock()
		s.stats.subsRevoked.Add(uint64(len(dropped)))
	}
	return dropped
}

// detach unbinds the finished connection c from its session. The will is
// published now, or after its delay, or when the session ends, whichever
// is first [MQTT-3.1.3-9]; a session with expiry 0 ends now, a persistent
// one starts its expiry timer [MQTT-4.1.0-2].
func (s *Shard) detach(c *conn, sendWill bool) {
	sess := c.sess
	var will *willMsg
	s.mu.Lock()
	sess.mu.Lock()
	if sess.conn != c {
		sess.mu.Unlock()
		s.mu.Unlock()
		return
	}
	sess.conn = nil
	sess.online.Store(false)
	sess.caughtUpLocked() // no reader pauses for a client gone (stall.go)
	sess.endAllTracesLocked("connection closed before the acknowledgement")
	sess.expiry, _ = s.capExpiry(sess.expiry) // a cap lowered while it was connected
	expiry := sess.expiry
	if sendWill && c.will != nil {
		if c.will.delay == 0 || expiry == 0 {
			will = c.will
		} else {
			a := sess.asideLocked()
			a.pendingWill = c.will
			a.willTimer = time.AfterFunc(time.Duration(c.will.delay)*time.Second, s.willFunc(sess, sess.gen))
		}
	}
	// QoS 0 messages are not kept for an offline session.
	for i := 0; i < sess.queue.len(); {
		if sess.queue.peek().qos == 0 {
			d := sess.queue.pop()
			sess.queuedBytes -= d.msg.size
			d.msg.unref()
			sess.dropLocked(DropOffline)
			continue
		}
		// Rotate the QoS 1/2 delivery to the back, keeping order; it is
		// no longer live (see Latency).
		d := sess.queue.pop()
		d.live = false
		sess.queue.push(d)
		i++
	}
	if s.log != nil && expiry != 0 {
		sess.toStoredLocked()
		sess.cursor = sess.cursorLocked(s.nextOffset()) // s.mu is held
		sess.moveQ2posLocked(s.nextOffset())
	}
	sess.ownMessagesLocked()
	if expiry != 0 && expiry != neverExpires && !s.closing {
		sess.asideLocked().expiryTimer = time.AfterFunc(time.Duration(expiry)*time.Second, s.expireFunc(sess, sess.gen))
	}
	sess.mu.Unlock()
	if expiry == 0 {
		if w := s.endSessionLocked(sess); w != nil && will == nil {
			will = w
		}
	}
	s.mu.Unlock()
	if expiry != 0 {
		s.saveSession(sess)
	} else {
		s.forget(sess.clientID)
	}
	if will != nil {
		s.publishWill(will)
	}
}

// publish routes m to every matching session and stores it when retained.
// It returns the number of sessions it was handed to. matches is the
// caller's reusable result buffer.
func (s *Shard) publish(m *message, matches *topic.Matches) int {
	return s.publishVia(m, matches, nil)
}

// publishVia is publish for a connection's reader: the subscribers of a
// narrow fan-out go into its outbox, to be written when its input runs
// dry, rather than each waking its writer now. A wide fan-out wakes the
// writers at once, so that they write in parallel.
func (s *Shard) publishVia(m *message, matches *topic.Matches, out *outbox) int {
	return s.publishAt(m, matches, out, time.Now())
}

// publishAt is publishVia at now, the time the caller read for the
// message (handlePublish reads the clock once per PUBLISH).
//
// A retained message changes the topic's retained message only once the
// message is accepted: one that goes to the message log, after its append
// succeeded, so a PUBLISH the log refuses (a full disk, a failed fsync)
// leaves the retained message as it was (retainLogged). Either way the
// retained message is set before the message is matched against the
// subscriptions, so a subscription made meanwhile gets it one way or the
// other, never neither.
func (s *Shard) publishAt(m *message, matches *topic.Matches, out *outbox, now time.Time) int {
	logged := s.log != nil && m.qos > 0 && m.off == 0
	if m.retain && !logged {
		s.setRetained(m) // not logged: nothing can refuse it
	}
	n := 0
	var kicks [4]*conn
	nk := 0
	s.mu.RLock()
	if logged {
		err := s.appendLocked(m)
		if err != nil {
			m.lost = true
			m.full = errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
			s.opts.Logger.Error("appending to the message log", "err", err)
		}
		if m.trace != nil {
			m.trace.traceAppend(now, err)
		}
		if err != nil && m.readAt != 0 {
			// A client's PUBLISH that could not be logged is refused
			// (handlepublish.go): it must reach no one, or a refused
			// message would be delivered and sent again by its publisher.
			s.mu.RUnlock()
			return 0
		}
		if err == nil && m.retain {
			s.retainLogged(m)
		}
	}
	if m.trace != nil {
		m.trace.routed = time.Now()
	}
	s.tree.Match(m.topic, m.publisher, matches)
	track := out // a reader notes whom it queued for, however wide (stall.go)
	if len(matches.Deliveries) > inlineFanout {
		out = nil
	}
	for i := range matches.Deliveries {
		md := &matches.Deliveries[i]
		sess := s.byID[md.Subscriber]
		if sess == nil {
			continue
		}
		d := delivery{
			msg: m,
			qos: min(m.qos, md.QoS), // [MQTT-3.8.4-8]
			// [MQTT-3.3.1-12] RETAIN is cleared unless Retain As
			// Published; 3.1.1 [MQTT-3.3.1-9] always clears it.
			retain: m.retain && md.RetainAsPublished,
			live:   m.readAt != 0 && sess.online.Load(),
		}
		if len(md.SubscriptionIDs) > 0 {
			d.setSubIDs(md.SubscriptionIDs)
		}
		k, w, behind := sess.enqueue(&d, now)
		if track != nil {
			track.noteQueued(sess, behind)
		}
		if k != nil && nk < len(kicks) {
			kicks[nk] = k
			nk++
		}
		switch {
		case w == nil:
		case out != nil:
			out.add(w)
		default:
			w.wakeWriter()
		}
		n++
	}
	s.mu.RUnlock()
	if m.trace != nil {
		m.trace.traceRoute(n)
	}
	for _, k := range kicks[:nk] {
		k.logger().Info("disconnecting slow consumer")
		k.kick(packet.ErrQuotaExceeded)
	}
	return n
}

// publishInternal publishes a message that no connection reads for (a
// will, $SYS).
func (s *Shard) publishInternal(m *message) {
	mt := s.matches.Get().(*topic.Matches)
	s.publish(m, mt)
	s.matches.Put(mt)
}

// setRetained stores or clears the retained message of m's topic
// [MQTT-3.3.1-5]; an empty payload clears it and is not stored
// [MQTT-3.3.1-6] [MQTT-3.3.1-7]. The store comes first: under -fsync
// always it returns once the record is fsynced, replicated once it is
// committed, so a new subscriber is never shown a retained message (or its
// removal) that a crash or a failover could take back; when the store
// fails then, the retained messages stay as they were.
func (s *Shard) setRetained(m *message) {
	t := string(m.topic)
	if len(m.payload) == 0 {
		if _, ok := s.retained.Get(t); ok {
			if err := s.store.DeleteRetained(t); err != nil && s.syncAcks {
				s.opts.Logger.Warn("clearing retained message not durable; kept", "topic", t, "err", err)
				return
			}
			s.retained.Delete(t)
		}
		return
	}
	m = s.retainedCopy(m) // kept until replaced: no slab chunk, no pooled buffer, no log offset
	if err := s.store.SetRetained(m.toStore()); err != nil {
		s.opts.Logger.Warn("storing retained message", "topic", t, "err", err)
		if s.syncAcks {
			return // not durable: not shown
		}
	}
	s.retained.Set(t, m, m.size)
}

// retainLogged is setRetained for a message just appended to the message
// log; s.mu is read-held, between the append and the routing (it is not
// released in between: a message is never appended but not yet routed,
// see checkpoint). Under syncAcks the retained message changes only once
// the message's own record is durable too, as its PUBACK does: standalone
// under -fsync always the message log and the retained store are
// separate files, each fsynced; replicated, the retained record commits
// after the message's entry in the same group log, so its commit (which
// setRetained waits for) says as much. The wait holds s.mu read-locked:
// a retained QoS 1/2 PUBLISH under -fsync always (or replicated) delays
// the shard's connects and checkpoints by about one fsync (commit).
func (s *Shard) retainLogged(m *message) {
	if s.syncAcks && s.opts.Replication == nil {
		if err := s.app.WaitDurable(m.off - 1); err != nil {
			s.opts.Logger.Warn("retained message not durable; the retained message is kept", "topic", string(m.topic), "err", err)
			return
		}
	}
	s.setRetained(m)
}

// dropExpiredRetained removes a retained message whose expiry passed
// [MQTT-3.3.2-5], unless it was replaced meanwhile.
func (s *Shard) dropExpiredRetained(m *message) {
	t := string(m.topic)
	if cur, ok := s.retained.Get(t); ok && cur == m && s.retained.Delete(t) {
		_ = s.store.DeleteRetained(t)
	}
}
