package store

import (
	"errors"
	"time"

	"berth.dev/broker/packet"
)

// ErrClosed is returned by every method of a closed store.
var ErrClosed = errors.New("store: closed")

// Message is one stored PUBLISH. Byte slices are owned by the message and
// never modified after it is handed to a Store.
type Message struct {
	Topic   string
	Payload []byte
	QoS     byte
	// Props are the MQTT 5 properties of the PUBLISH as the publisher
	// sent them, without Topic Alias and Subscription Identifier (those
	// belong to one connection); their byte slices are owned copies.
	Props packet.Properties
	// Created is when the broker received the message; ExpiresAt is when
	// its Message Expiry Interval ends (zero: never).
	Created   time.Time
	ExpiresAt time.Time
}

// Subscription is one stored subscription of a session.
type Subscription struct {
	Filter            string // as the client sent it, $share/... included
	QoS               byte
	NoLocal           bool
	RetainAsPublished bool
	RetainHandling    byte
	SubscriptionID    uint32
}

// Session is the stored part of a persistent session.
type Session struct {
	ClientID string
	// Owner is the credential id that created the session (empty: none,
	// in standalone mode, or a record written before owners were kept).
	Owner string
	// ExpiryInterval is the Session Expiry Interval in seconds;
	// 0xFFFFFFFF never expires.
	ExpiryInterval uint32
	// DisconnectedAt is when the last connection of the session ended
	// (zero while connected).
	DisconnectedAt time.Time
	Subscriptions  []Subscription
	// Cursor is the message-log offset from which the session's pending
	// messages are rebuilt after a restart: every message below it was
	// delivered and acknowledged (or never matched). 0 means the start.
	Cursor uint64
	// QoS2From is the message-log offset plus one from which the
	// session's QoS 2 state (its inbound messages awaiting PUBREL, its
	// outbound flows past PUBREC) is rebuilt after a restart, when that
	// lies below Cursor; 0: from Cursor.
	QoS2From uint64
}

// Store persists the state of one tenant shard. Implementations are safe
// for concurrent use.
type Store interface {
	// SetRetained stores m as the retained message of m.Topic,
	// replacing any previous one.
	SetRetained(m *Message) error
	// DeleteRetained removes the retained message of topic, if any.
	DeleteRetained(topic string) error
	// Retained calls fn for every retained message until fn returns false.
	Retained(fn func(*Message) bool) error
	// SaveSession stores s, replacing the session of s.ClientID.
	SaveSession(s *Session) error
	// DeleteSession removes the session of clientID, if any.
	DeleteSession(clientID string) error
	// Sessions calls fn for every stored session until fn returns false.
	Sessions(fn func(*Session) bool) error
	// Close releases the store; later calls return ErrClosed.
	Close() error
}
