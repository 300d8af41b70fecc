package shard

import (
	"errors"
	"strings"
	"time"

	"berth.dev/broker/internal/topic"
	"berth.dev/broker/packet"
)

// Errors of the operator-facing methods.
var (
	ErrInvalidTopic = errors.New("shard: invalid topic name")
	ErrNoSession    = errors.New("shard: no such session")
)

// Publish publishes a message that does not come from an MQTT client (the
// HTTP publish API). topic must be a valid topic name outside $SYS; props
// are copied. It returns the number of sessions the message was handed to.
func (s *Shard) Publish(topicName string, payload []byte, qos byte, retain bool, props packet.Properties) (int, error) {
	if !packet.ValidTopicName([]byte(topicName)) || strings.HasPrefix(topicName, "$") {
		return 0, ErrInvalidTopic
	}
	if qos > 2 {
		return 0, packet.ErrQoSNotSupported
	}
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
		<-c.done
		return nil
	}
	if discard {
		s.mu.Lock()
		var will *message
		ended := s.sessions[clientID] == sess
		if ended {
			will = s.endSessionLocked(sess)
		}
		s.mu.Unlock()
		if ended {
			s.forget(clientID)
		}
		if will != nil {
			s.publishInternal(will)
		}
	}
	return nil
}
