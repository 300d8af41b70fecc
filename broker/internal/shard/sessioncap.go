package shard

import (
	"sync/atomic"
	"time"

	"berth.dev/broker/packet"
)

// Session caps: how many sessions the shard holds and how long a session
// may outlive its connection. Both start from Options (MaxSessions,
// MaxSessionExpiry) and change live with SetSessionCaps; zero means no
// cap.
//
//   - MaxSessions counts every session in the shard: connected ones (a
//     clean session with expiry 0 too, while it is connected) and offline
//     persistent ones. A CONNECT whose client id has no session yet, when
//     the shard holds MaxSessions already, is refused with CONNACK 0x97
//     Quota exceeded (3.1.1: return code 3, server unavailable). The check
//     and the creation happen under Shard.mu, so two CONNECTs at the edge
//     cannot both pass. Resuming or taking over a session (clean start or
//     not) never creates one and is always allowed; a lowered cap ends no
//     session, it only refuses new ones until the count is below it.
//   - MaxSessionExpiry caps the Session Expiry Interval: a larger one in an
//     MQTT 5 CONNECT is lowered and the CONNACK says so (Session Expiry
//     Interval property, MQTT 5.0 section 3.2.2.3.2); 0xFFFFFFFF ("never")
//     and an MQTT 3.1.1 clean-session-0 session (which never expires in
//     that protocol) get the cap; a DISCONNECT's larger interval is lowered
//     too. A lowered cap applies to existing sessions at once: an offline
//     one whose interval is above it expires at most the new cap after the
//     change, a connected one at most the new cap after it disconnects.
type sessionCaps struct {
	maxSessions atomic.Int64
	maxExpiry   atomic.Uint32
}

// SetSessionCaps changes the live session caps (see sessionCaps); a value
// of 0 removes that cap.
func (s *Shard) SetSessionCaps(maxSessions int, maxExpiry uint32) {
	s.caps.maxSessions.Store(int64(max(maxSessions, 0)))
	old := s.caps.maxExpiry.Swap(maxExpiry)
	if maxExpiry != 0 && (old == 0 || maxExpiry < old) {
		s.shortenOffline(maxExpiry)
	}
}

// SessionCaps returns the live session caps (see SetSessionCaps).
func (s *Shard) SessionCaps() (maxSessions int, maxExpiry uint32) {
	return int(s.caps.maxSessions.Load()), s.caps.maxExpiry.Load()
}

// capExpiry returns expiry under the live cap, and whether the cap
// lowered it.
func (s *Shard) capExpiry(expiry uint32) (uint32, bool) {
	if mx := s.caps.maxExpiry.Load(); mx != 0 && expiry > mx {
		return mx, true
	}
	return expiry, false
}

// admitSessionLocked decides on creating one more session: nil, or
// ErrQuotaExceeded when the shard holds MaxSessions already. s.mu is held
// (for writing) until the session is registered, which makes the check
// and the creation one step.
func (s *Shard) admitSessionLocked() error {
	if mx := s.caps.maxSessions.Load(); mx > 0 && int64(len(s.sessions)) >= mx {
		return packet.ErrQuotaExceeded
	}
	return nil
}

// shortenOffline applies a lowered expiry cap to the offline sessions
// whose interval is above it: each expires maxExpiry from now, and its
// record says so. Connected sessions are capped when they detach.
func (s *Shard) shortenOffline(maxExpiry uint32) {
	var changed []*session
	s.mu.RLock() // attach and detach change sess.conn under s.mu: none is missed
	for _, sess := range s.sessions {
		sess.mu.Lock()
		if sess.conn == nil && sess.expiry > maxExpiry {
			sess.expiry = maxExpiry
			a := sess.asideLocked()
			if a.expiryTimer != nil {
				a.expiryTimer.Stop()
				a.expiryTimer = nil
			}
			if !s.closing {
				a.expiryTimer = time.AfterFunc(time.Duration(maxExpiry)*time.Second, s.expireFunc(sess, sess.gen))
			}
			changed = append(changed, sess)
		}
		sess.mu.Unlock()
	}
	s.mu.RUnlock()
	for _, sess := range changed {
		s.saveSession(sess)
	}
}
