package shard

import (
	"sync"
	"time"

	"berth.dev/broker/packet"
)

// Dead letters (Options.DeadLetters). A QoS 1/2 message that the shard
// drops for one of its subscribers is published again, within the same
// shard, to
//
//	$berth/dlq/<reason>     reason: queue_full, expired, too_large, quota_exceeded, topic_rate
//
// with the original payload and properties (but no Message Expiry) and
// three user properties appended:
//
//	berth-dlq-topic   the topic the message was published to
//	berth-dlq-client  the client id it was dropped for (the publisher's, for quota_exceeded and topic_rate)
//	berth-dlq-reason  the reason, as in the topic
//
// A '#' subscription does not see them ('$' topics, [MQTT-4.7.2-1]); a
// client subscribes to $berth/dlq/# (its ACL permitting). Clients cannot
// publish there. A dead letter is never dead-lettered itself, so nothing
// loops. Copies are made off the packet path by one goroutine; at most
// maxPendingDeadLetters wait, more are counted in Stats.DeadLettersLost.
// A message whose payload stays in the message log is read back from it
// for its copy. Drops known only by log offset (a queue overflowing while
// pending messages are rebuilt after a restart, or during a replay) are
// counted but not copied.

// DeadLetterPrefix is the topic prefix of dead letters.
const DeadLetterPrefix = "$berth/dlq/"

// isDeadLetterTopic reports whether name is under DeadLetterPrefix; the
// comparison form converts without allocating.
func isDeadLetterTopic(name []byte) bool {
	return len(name) >= len(DeadLetterPrefix) && string(name[:len(DeadLetterPrefix)]) == DeadLetterPrefix
}

const maxPendingDeadLetters = 1024

type deadLetter struct {
	msg      *message
	reason   DropReason
	clientID string
}

// deadLetters is the hand-over from the drop sites (under session locks)
// to the goroutine that publishes copies.
type deadLetters struct {
	mu      sync.Mutex
	pending []deadLetter
	lost    uint64
	wake    chan struct{}
}

// deadLetterLocked counts one undelivered copy of m and, when dead letters
// are on, queues it for $berth/dlq/<reason>. sess.mu is held (and maybe
// s.mu): it takes only the hand-over's own lock.
func (sess *session) deadLetterLocked(r DropReason, m *message, qos byte) {
	sess.dropLocked(r)
	sess.shard.deadLetter(r, m, qos, sess.clientID)
}

// deadLetter queues a copy of m for the dead-letter topic of r.
func (s *Shard) deadLetter(r DropReason, m *message, qos byte, clientID string) {
	if !s.opts.DeadLetters || qos == 0 || m == nil || m.dead || isDeadLetterTopic(m.topic) {
		return // the topic check also catches a dead letter read back from the log
	}
	d := &s.dlq
	d.mu.Lock()
	if len(d.pending) >= maxPendingDeadLetters {
		d.lost++
		d.mu.Unlock()
		return
	}
	m.ref() // the pending dead letter's (msgbuf.go)
	d.pending = append(d.pending, deadLetter{msg: m, reason: r, clientID: clientID})
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// deadLetterLoop publishes queued dead letters until Shutdown.
func (s *Shard) deadLetterLoop() {
	defer s.bgwg.Done()
	var batch []deadLetter
	for {
		select {
		case <-s.dlq.wake:
		case <-s.stopBg:
			return
		}
		s.dlq.mu.Lock()
		batch, s.dlq.pending = s.dlq.pending, batch[:0]
		s.dlq.mu.Unlock()
		for i := range batch {
			dl := &batch[i]
			held := dl.msg
			m, err := s.materialize(dl.msg) // a stored message's payload is in the log
			if err != nil {
				s.opts.Logger.Warn("dead letter unreadable", "err", err)
				s.dlq.mu.Lock()
				s.dlq.lost++
				s.dlq.mu.Unlock()
			} else {
				dl.msg = m
				s.publishInternal(deadLetterMessage(dl)) // a copy
			}
			held.unref()
			*dl = deadLetter{}
		}
	}
}

// deadLetterMessage builds the copy of dl for its dead-letter topic.
func deadLetterMessage(dl *deadLetter) *message {
	m := dl.msg
	reason := dl.reason.String()
	p := packet.Publish{QoS: m.qos, Topic: []byte(DeadLetterPrefix + reason), Payload: m.payload, Props: m.props.full()}
	p.Props.Has &^= packet.Mask(packet.PropMessageExpiry) // an expired message must not expire again at once
	p.Props.MessageExpiry = 0
	p.Props.UserProperties = append(append([]packet.UserProperty(nil), p.Props.UserProperties...),
		packet.UserProperty{Key: []byte("berth-dlq-topic"), Value: m.topic},
		packet.UserProperty{Key: []byte("berth-dlq-client"), Value: []byte(dl.clientID)},
		packet.UserProperty{Key: []byte("berth-dlq-reason"), Value: []byte(reason)})
	dead := newMessage(&p, p.Topic, time.Now(), noPublisher)
	dead.dead = true
	return dead
}

// deadLettersLost is how many dead letters were not published because too
// many were waiting.
func (s *Shard) deadLettersLost() uint64 {
	s.dlq.mu.Lock()
	defer s.dlq.mu.Unlock()
	return s.dlq.lost
}
