package shard

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// seqPayload is message i's payload: its sequence number.
func seqPayload(i int) []byte { return binary.BigEndian.AppendUint32(nil, uint32(i)) }

// inOrder records the sequence numbers a subscriber receives and counts
// the ones out of order.
type inOrder struct {
	mu        sync.Mutex
	next      int
	disorder  int
	firstSeen int // the first out-of-order number, -1 none
}

func (o *inOrder) add(p []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	got := -1
	if len(p) == 4 {
		got = int(binary.BigEndian.Uint32(p))
	}
	if got != o.next && o.disorder == 0 {
		o.firstSeen = got
	}
	if got != o.next {
		o.disorder++
	}
	o.next++
}

func (o *inOrder) count() (n, disorder, first int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.next, o.disorder, o.firstSeen
}

// TestOfflineBacklogBoundedByLogNotCount: a persistent session offline
// while 30,000 QoS 1 messages are published and acknowledged (three times
// MaxQueuedMessages) gets every one of them, in order, when it returns to
// a shard with a message log (-fsync always): the log bounds its backlog,
// not a count. Without a log (memory mode) the count still bounds it: the
// first 10,000 wait, the rest are dropped and counted as queue_full.
// Real sockets, paho.mqtt.golang clients.
func TestOfflineBacklogBoundedByLogNotCount(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		durable   bool
		publish   int
		delivered int
	}{
		{name: "log", durable: true, publish: 30_000, delivered: 30_000},
		{name: "memory", durable: false, publish: 12_000, delivered: defaultMaxQueuedMessages},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts := Options{SysInterval: -1, MaxQueuedMessages: defaultMaxQueuedMessages}
			if tc.durable {
				st := openWALStore(t, t.TempDir(), wal.SyncAlways)
				opts.Store, opts.MessageLog = st, st.Messages()
			}
			b := startBroker(t, opts, ConnInfo{})
			sub := paho3(t, b, "backlog-sub", false)
			wait3(t, sub.Subscribe("backlog/t", 1, nil))
			sub.Disconnect(250)
			eventually(t, "the subscriber offline", func() bool {
				ss, ok := b.shard.SessionStats("backlog-sub")
				return ok && !ss.Connected
			})

			start := time.Now()
			pub := paho3(t, b, "backlog-pub", true)
			toks := make([]mqtt.Token, 0, tc.publish)
			for i := range tc.publish {
				toks = append(toks, pub.Publish("backlog/t", 1, false, seqPayload(i)))
			}
			for i, tok := range toks {
				if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
					t.Fatalf("PUBACK of message %d: %v", i, tok.Error())
				}
			}
			t.Logf("%d QoS 1 messages acknowledged in %v", tc.publish, time.Since(start))
			ss, _ := b.shard.SessionStats("backlog-sub")
			if p := pending(b.shard, "backlog-sub"); p != tc.delivered || ss.Dropped["queue_full"] != uint64(tc.publish-tc.delivered) {
				t.Fatalf("offline session: %d pending, %d queue_full drops; want %d and %d",
					p, ss.Dropped["queue_full"], tc.delivered, tc.publish-tc.delivered)
			}

			var got inOrder
			start = time.Now()
			paho3(t, b, "backlog-sub", false, func(o *mqtt.ClientOptions) {
				o.SetDefaultPublishHandler(func(_ mqtt.Client, m mqtt.Message) { got.add(m.Payload()) })
			})
			waitFor(t, 60*time.Second, "the backlog delivered", func() bool {
				n, _, _ := got.count()
				return n >= tc.delivered
			})
			t.Logf("backlog of %d delivered in %v", tc.delivered, time.Since(start))
			eventually(t, "the session drained", func() bool {
				ss, _ := b.shard.SessionStats("backlog-sub")
				return pending(b.shard, "backlog-sub") == 0 && ss.Inflight == 0
			})
			if n, disorder, first := got.count(); n != tc.delivered || disorder != 0 {
				t.Fatalf("received %d messages, %d out of order (first %d); want %d in order", n, disorder, first, tc.delivered)
			}
			if ss, _ := b.shard.SessionStats("backlog-sub"); ss.Dropped["queue_full"] != uint64(tc.publish-tc.delivered) {
				t.Fatalf("queue_full drops %d, want %d", ss.Dropped["queue_full"], tc.publish-tc.delivered)
			}
		})
	}
}

// pending is how many messages wait for a session, in memory or in the
// log (SessionStats.Queued counts only those in memory).
func pending(s *Shard, clientID string) int {
	s.mu.RLock()
	sess := s.sessions[clientID]
	s.mu.RUnlock()
	if sess == nil {
		return -1
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return sess.queue.len() + sess.stored.len()
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestConnectedBacklogMovesToLog: a connected persistent subscriber that
// acknowledges nothing (Receive Maximum 1) while 500 QoS 1 messages arrive
// fills its in-memory queue (MaxQueuedMessages 50); with a message log the
// queue moves to the log as offsets instead of dropping, so once it
// acknowledges it gets all 500, in order, and nothing is dropped.
func TestConnectedBacklogMovesToLog(t *testing.T) {
	t.Parallel()
	st := openWALStore(t, t.TempDir(), wal.SyncNever)
	b := startBrokerWith(t, New(Options{Store: st, MessageLog: st.Messages(), SysInterval: -1,
		MaxQueuedMessages: 50, SlowConsumerTimeout: time.Minute}))
	sub := dialRaw(t, b.addr, packet.Version5)
	cp := sessionConnect("spill", 3600, true)
	cp.Props.Has.Set(packet.PropReceiveMaximum)
	cp.Props.ReceiveMaximum = 1
	if ack := sub.connect(cp); ack.Reason != packet.CodeSuccess {
		t.Fatalf("CONNACK %v", ack.Reason)
	}
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("spill/t"), QoS: 1})

	const n = 500
	pub := v5Client(t, b, "spill-pub")
	for i := range n {
		pub.send(&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: []byte("spill/t"), Payload: seqPayload(i)})
		pub.ack(packet.TypePuback)
	}
	ss, _ := b.shard.SessionStats("spill")
	if ss.Dropped["queue_full"] != 0 {
		t.Fatalf("%d queue_full drops with a message log, want 0", ss.Dropped["queue_full"])
	}
	var got inOrder
	for range n {
		p := sub.publish()
		got.add(p.Payload)
		sub.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
	}
	if n, disorder, first := got.count(); disorder != 0 {
		t.Fatalf("%d messages, %d out of order (first %d)", n, disorder, first)
	}
	eventually(t, "the session drained", func() bool {
		ss, _ := b.shard.SessionStats("spill")
		return pending(b.shard, "spill") == 0 && ss.Inflight == 0
	})
	if ss, _ := b.shard.SessionStats("spill"); ss.Dropped["queue_full"] != 0 {
		t.Fatalf("drops %v, want none", ss.Dropped)
	}
	sub.expectSilence(50 * time.Millisecond)
}
