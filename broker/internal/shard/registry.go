package shard

import (
	"time"

	"berth.dev/broker/internal/store"
)

// saveSessions writes every persistent session to the store, with its
// cursor as of now.
func (s *Shard) saveSessions() {
	var list []*session
	s.mu.Lock()
	var next uint64
	if s.log != nil {
		next = s.nextOffset()
	}
	for _, sess := range s.sessions {
		sess.mu.Lock()
		if sess.expiry != 0 {
			if s.log != nil {
				sess.cursor = sess.cursorLocked(next)
				sess.moveQ2posLocked(next)
			}
			list = append(list, sess)
		}
		sess.mu.Unlock()
	}
	s.mu.Unlock()
	s.saveCursors(list) // one batch, one fsync
}

// saveSession writes the record of sess (subscriptions as of now, its
// last cursor). Records are written one at a time, so a record built
// before a subscription change never lands after one built after it.
func (s *Shard) saveSession(sess *session) error {
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	if !s.current(sess) {
		return nil // ended meanwhile: its deletion must stay the last word
	}
	rec := s.sessionRecord(sess)
	if err := s.store.SaveSession(rec); err != nil {
		s.opts.Logger.Warn("saving session", "client_id", rec.ClientID, "err", err)
		return err
	}
	return nil
}

// sessionRecord builds the stored form of sess.
func (s *Shard) sessionRecord(sess *session) *store.Session {
	subs := s.tree.Subscriptions(sess.id, nil)
	sess.mu.Lock()
	rec := &store.Session{ClientID: sess.clientID, Owner: sess.owner, ExpiryInterval: sess.expiry, DisconnectedAt: time.Now(), Cursor: sess.cursor, QoS2From: sess.qos2FromLocked()}
	sess.mu.Unlock()
	for _, sub := range subs {
		rec.Subscriptions = append(rec.Subscriptions, store.Subscription{
			Filter: sub.Filter.Raw, QoS: sub.Options.QoS, NoLocal: sub.Options.NoLocal,
			RetainAsPublished: sub.Options.RetainAsPublished, RetainHandling: byte(sub.Options.RetainHandling),
			SubscriptionID: sub.Options.SubscriptionID,
		})
	}
	return rec
}

// newSessionLocked creates and registers an empty session. s.mu is held.
func (s *Shard) newSessionLocked(clientID string) *session {
	s.nextID++
	sess := newSession(s, s.nextID, clientID)
	if s.log != nil {
		sess.cursor = s.nextOffset() // s.mu is held: nothing is half-routed
		sess.q2pos = sess.cursor
	}
	s.sessions[clientID] = sess
	s.byID[sess.id] = sess
	return sess
}

// endSessionLocked removes sess and its subscriptions [MQTT-3.1.2-4]. It
// returns a will message whose delay was pending: the session ending
// publishes it now, which the caller does after unlocking. s.mu is held.
func (s *Shard) endSessionLocked(sess *session) *willMsg {
	if s.sessions[sess.clientID] == sess {
		delete(s.sessions, sess.clientID)
	}
	delete(s.byID, sess.id)
	s.tree.RemoveClient(sess.id)
	sess.mu.Lock()
	will := sess.takePendingWillLocked()
	sess.stopTimersLocked()
	sess.dropAllLocked()
	sess.mu.Unlock()
	return will
}

// current reports whether sess is still the session of its client id.
func (s *Shard) current(sess *session) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.sessions[sess.clientID] == sess
}

// forget removes an ended session from the store; called without locks.
func (s *Shard) forget(clientID string) {
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	if err := s.store.DeleteSession(clientID); err != nil {
		s.opts.Logger.Warn("deleting session", "client_id", clientID, "err", err)
	}
}

// expireFunc returns the timer callback that ends sess when its Session
// Expiry Interval has passed while it stayed offline.
func (s *Shard) expireFunc(sess *session, gen uint64) func() {
	return func() {
		s.mu.Lock()
		if s.closing || s.sessions[sess.clientID] != sess {
			s.mu.Unlock()
			return
		}
		sess.mu.Lock()
		live := sess.conn != nil || sess.gen != gen
		sess.mu.Unlock()
		var will *willMsg
		if !live {
			will = s.endSessionLocked(sess)
		}
		s.mu.Unlock()
		if !live {
			s.forget(sess.clientID)
		}
		if will != nil {
			s.publishWill(will)
		}
	}
}

// willFunc returns the timer callback that publishes a will after its
// Will Delay Interval [MQTT-3.1.3-9].
func (s *Shard) willFunc(sess *session, gen uint64) func() {
	return func() {
		s.mu.RLock()
		closing := s.closing
		s.mu.RUnlock()
		sess.mu.Lock()
		var will *willMsg
		if sess.gen == gen && sess.conn == nil {
			will = sess.takePendingWillLocked()
		}
		sess.mu.Unlock()
		if will != nil && !closing {
			s.publishWill(will)
		}
	}
}
