package shard

import (
	"errors"
	"sort"
	"strings"
	"time"

	"berth.dev/broker/internal/topic"
	"berth.dev/broker/packet"
)

// Errors of the operator-facing methods.
var (
	ErrInvalidTopic = errors.New("shard: invalid topic name")
	ErrNoSession    = errors.New("shard: no such session")
	// ErrRetainedQuota refuses a retained message over the tenant's
	// retained-messages quota (count or bytes).
	ErrRetainedQuota = errors.New("shard: retained message quota reached")
)

// Publish publishes a message that does not come from an MQTT client (the
// HTTP publish API), without quotas; see PublishLimited.
func (s *Shard) Publish(topicName string, payload []byte, qos byte, retain bool, props packet.Properties) (int, error) {
	return s.PublishLimited(topicName, payload, qos, retain, props, nil)
}

// PublishLimited publishes a message that does not come from an MQTT
// client (the HTTP publish API) after the admission a device's PUBLISH
// passes: the topic's rule (a refusal is a *RuleRefusal), l's size, rate
// and monthly quotas (asked as of an MQTT 5 client, so never throttled),
// then the retained quota. topic must be a valid topic name outside $SYS;
// props are copied. A refusal by l is its reason code as the error
// (packet.ErrQuotaExceeded, packet.ErrPacketTooLarge, ...); over the
// retained quota it is ErrRetainedQuota. An accepted message counts one
// message in and accepted, its payload in bytes in, and in its topic's
// traffic. It returns the number of sessions the message was handed to.
func (s *Shard) PublishLimited(topicName string, payload []byte, qos byte, retain bool, props packet.Properties, l Limiter) (int, error) {
	if !packet.ValidTopicName([]byte(topicName)) || strings.HasPrefix(topicName, "$") {
		return 0, ErrInvalidTopic
	}
	if qos > 2 {
		return 0, packet.ErrQoSNotSupported
	}
	if err := s.admitRuleHTTP([]byte(topicName), len(payload), retain); err != nil {
		return 0, err // a *RuleRefusal
	}
	if l != nil {
		if code, _ := l.AdmitPublish(len(payload), packet.Version5); code != packet.CodeSuccess {
			return 0, code
		}
		if retain && s.overRetained(l, topicName, len(payload)) {
			refund(l)
			return 0, ErrRetainedQuota
		}
	}
	s.stats.msgsIn.Add(1)
	s.stats.msgsAccept.Add(1)
	s.stats.bytesIn.Add(uint64(len(payload)))
	s.topics.add([]byte(topicName), len(payload), time.Now().Unix())
	p := packet.Publish{QoS: qos, Retain: retain, Topic: []byte(topicName), Payload: payload, Props: props}
	m := newMessage(&p, p.Topic, time.Now(), noPublisher)
	mt := s.matches.Get().(*topic.Matches)
	defer s.matches.Put(mt)
	return s.publish(m, mt), nil
}

// Kick disconnects the client with clientID (MQTT 5: DISCONNECT 0x98,
// administrative action) and, when discard is set, ends its session so
// that its subscriptions and queued messages are gone. It waits for the
// connection to finish.
func (s *Shard) Kick(clientID string, discard bool) error {
	s.mu.RLock()
	sess := s.sessions[clientID]
	s.mu.RUnlock()
	if sess == nil {
		return ErrNoSession
	}
	sess.mu.Lock()
	c := sess.conn
	if discard {
		sess.expiry = 0 // the session ends with the connection
	}
	sess.mu.Unlock()
	if c != nil {
		c.kick(packet.ErrAdministrativeAction)
		<-c.ended()
		return nil
	}
	if discard {
		s.mu.Lock()
		var will *willMsg
		ended := s.sessions[clientID] == sess
		if ended {
			will = s.endSessionLocked(sess)
		}
		s.mu.Unlock()
		if ended {
			s.forget(clientID)
		}
		if will != nil {
			s.publishWill(will)
		}
	}
	return nil
}

// EndSessionsOf ends every session owned by the credential cred, live or
// offline, as a revocation does: a connected one is disconnected with
// reason (MQTT 5: DISCONNECT reason, 3.1.1: closed) and its session ends
// with the connection; an offline one ends now. Their subscriptions,
// queued and inflight messages go, and their records are deleted from the
// store; a pending will is published as when any session ends
// [MQTT-3.1.3-9]. It waits (a bounded time) for the connections to finish
// and returns how many sessions it ended. An empty cred ends nothing.
func (s *Shard) EndSessionsOf(cred string, reason packet.ReasonCode) int {
	if cred == "" {
		return 0
	}
	var live []*conn
	var ended []string
	var wills []*willMsg
	s.mu.Lock()
	for _, sess := range s.sessions {
		if sess.owner != cred {
			continue
		}
		sess.mu.Lock()
		c := sess.conn
		if c != nil {
			sess.expiry = 0 // the session ends with the connection (detach)
		}
		sess.mu.Unlock()
		if c != nil {
			live = append(live, c)
			continue
		}
		if w := s.endSessionLocked(sess); w != nil {
			wills = append(wills, w)
		}
		ended = append(ended, sess.clientID)
	}
	s.mu.Unlock()
	for _, id := range ended {
		s.forget(id)
	}
	for _, w := range wills {
		s.publishWill(w)
	}
	for _, c := range live {
		c.kick(reason)
	}
	timeout := time.After(takeoverTimeout)
	for _, c := range live {
		select {
		case <-c.ended():
		case <-timeout:
		}
	}
	if n := len(live) + len(ended); n > 0 {
		s.opts.Logger.Info("sessions of a revoked credential ended", "sessions", n, "connected", len(live))
	}
	return len(live) + len(ended)
}

// SessionInfo is one session as the admin API shows it.
type SessionInfo struct {
	ClientID  string `json:"client_id"`
	Connected bool   `json:"connected"`
	// ProtocolVersion is that of the session's last connection (4 for
	// 3.1 and 3.1.1, 5), kept while it is offline; omitted for a session
	// restored from disk that no client has taken since the shard opened.
	ProtocolVersion byte   `json:"protocol_version,omitempty"`
	RemoteAddr      string `json:"remote_addr,omitempty"`
	Subscriptions   int    `json:"subscriptions"`
	QueuedMessages  int    `json:"queued_messages"`
	Inflight        int    `json:"inflight"`
	// ConnectedAt is when the connection that holds the session attached;
	// nil while the session is offline.
	ConnectedAt *time.Time `json:"connected_at"`
	// Dropped counts the messages the session lost, for every reason
	// (queue full, expiry, quota, retention), since the shard opened.
	Dropped uint64 `json:"dropped"`
	// CredentialID is the credential the session belongs to; omitted
	// when none (standalone, or a record from before owners were kept).
	CredentialID string `json:"credential_id,omitempty"`
	// SubscriptionsRevoked counts the subscriptions dropped, since the
	// shard opened, when the session was resumed with an ACL that no
	// longer covered them.
	SubscriptionsRevoked uint64 `json:"subscriptions_revoked"`
}

// Sessions lists every session, connected or not, sorted by client id.
func (s *Shard) Sessions() []SessionInfo {
	s.mu.RLock()
	all := make([]*session, 0, len(s.sessions))
	for _, sess := range s.sessions {
		all = append(all, sess)
	}
	s.mu.RUnlock()
	out := make([]SessionInfo, 0, len(all))
	for _, sess := range all {
		info := SessionInfo{ClientID: sess.clientID, Subscriptions: s.tree.Count(sess.id)}
		sess.mu.Lock()
		info.ProtocolVersion = sess.version
		info.CredentialID = sess.owner
		if sess.rare != nil {
			info.SubscriptionsRevoked = sess.rare.subsRevoked
		}
		if c := sess.conn; c != nil {
			info.Connected, info.RemoteAddr = true, c.info.RemoteAddr
			at := time.Unix(0, sess.attachedAt).UTC()
			info.ConnectedAt = &at
		}
		for _, n := range sess.dropCountsLocked() {
			info.Dropped += n
		}
		// Queued: in memory, and in the message log by offset (what an
		// offline persistent session holds).
		info.QueuedMessages, info.Inflight = sess.queue.len()+sess.stored.len(), len(sess.inflight)
		sess.mu.Unlock()
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ClientID < out[j].ClientID })
	return out
}

// Topics lists the topics published to since the shard opened, busiest
// first, with their rates over the last 10 seconds (a sliding window that
// reading does not disturb) and their current subscriber counts.
func (s *Shard) Topics() []TopicInfo {
	now := time.Now().Unix()
	var out []TopicInfo
	for i := range s.topics.stripes {
		st := &s.topics.stripes[i]
		st.mu.Lock()
		names := make([]string, 0, len(st.m))
		stats := make([]*topicStat, 0, len(st.m))
		for name, ts := range st.m {
			names, stats = append(names, name), append(stats, ts)
		}
		st.mu.Unlock()
		for k, ts := range stats {
			msgs, bytes, mps, bps := ts.rates(now)
			out = append(out, TopicInfo{Topic: names[k], Messages: msgs, Bytes: bytes, MsgsPerSec: mps, BytesPerSec: bps})
		}
	}
	mt := s.matches.Get().(*topic.Matches)
	for i := range out {
		s.tree.Match([]byte(out[i].Topic), noPublisher, mt)
		out[i].Subscribers = len(mt.Deliveries)
	}
	s.matches.Put(mt)
	sort.Slice(out, func(i, j int) bool {
		if out[i].Messages != out[j].Messages {
			return out[i].Messages > out[j].Messages
		}
		return out[i].Topic < out[j].Topic
	})
	return out
}

// RetainedInfo is one retained message as the admin API shows it.
type RetainedInfo struct {
	Topic    string    `json:"topic"`
	Payload  []byte    `json:"payload_base64"`
	QoS      byte      `json:"qos"`
	Size     int       `json:"size"`
	StoredAt time.Time `json:"stored_at"`
}

// RetainedMessages lists the retained messages whose topics match filter.
func (s *Shard) RetainedMessages(filter string) ([]RetainedInfo, error) {
	if !packet.ValidTopicFilter([]byte(filter)) {
		return nil, ErrInvalidTopic
	}
	var out []RetainedInfo
	err := s.retained.Match(filter, func(t string, m *message) bool {
		out = append(out, RetainedInfo{Topic: t, Payload: m.payload, QoS: m.qos, Size: len(m.payload), StoredAt: time.Unix(0, m.created).UTC()})
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Topic < out[j].Topic })
	return out, err
}

// DeleteRetained removes the retained messages whose topics match filter
// and returns how many there were.
func (s *Shard) DeleteRetained(filter string) (int, error) {
	msgs, err := s.RetainedMessages(filter)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, m := range msgs {
		if s.retained.Delete(m.Topic) {
			_ = s.store.DeleteRetained(m.Topic)
			n++
		}
	}
	return n, nil
}

// Idle reports whether the shard can be shut down now without a client
// noticing: no connection and no will waiting for its delay; and, unless
// persistent (its Store outlives it and New loads it back), no session and
// no retained message of the tenant's ($SYS aside).
func (s *Shard) Idle(persistent bool) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.conns) > 0 {
		return false
	}
	for _, sess := range s.sessions {
		sess.mu.Lock()
		will := sess.pendingWillLocked() != nil
		sess.mu.Unlock()
		if will {
			return false
		}
	}
	if persistent {
		return true
	}
	if len(s.sessions) > 0 {
		return false
	}
	msgs, _ := s.tenantRetained()
	return msgs == 0
}
