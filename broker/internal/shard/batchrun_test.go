package shard

import (
	"testing"
	"time"
	"unsafe"

	"berth.dev/broker/packet"
)

// maxMessageSize bounds the message struct: every message of a
// small-message stream allocates, zeroes and has the collector scan it,
// so its size is most of the per-message memory cost (a 64-byte payload
// with its topic is about a third of it). The header cache (hdrCache)
// and the forwarded properties (pubProps) live out of line, for the
// messages with properties only: 280 B with the properties inline.
const maxMessageSize = 176

// TestMessageStructSize pins the message struct's size (see
// maxMessageSize).
func TestMessageStructSize(t *testing.T) {
	if n := unsafe.Sizeof(message{}); n > maxMessageSize {
		t.Errorf("message is %d B, over %d", n, maxMessageSize)
	}
	t.Logf("message %d B, its header cache %d B", unsafe.Sizeof(message{}), unsafe.Sizeof(hdrCache{}))
}

// TestSmallDeliveriesShareOneVector: a run of packets whose payloads are
// small goes into the batch as one vector, headers and payloads copied
// together; a big payload is still written from the message itself by a
// vector of its own. The copy is made while the queue's reference holds
// the message: a pooled message with a small payload may go back to its
// pool (poisoned) as soon as the batch is built, and the batch still
// sends its bytes.
func TestSmallDeliveriesShareOneVector(t *testing.T) {
	for _, version := range []byte{packet.Version311, packet.Version5} {
		s := New(Options{SysInterval: -1, poisonFreed: true})
		s.mu.Lock()
		sess := s.newSessionLocked("run-sub")
		s.mu.Unlock()
		c := &conn{shard: s, sess: sess, version: version, window: 100}
		sess.conn = c
		c.takeBatch()

		now := time.Now()
		heap := func(topic string, seq uint32, size int) *message {
			return newSimpleMessage(topic, reusePayload('a', 1, seq, size, topic), 0, false, now)
		}
		pooled := func(topic string, seq uint32, size int) *message {
			p := packet.Publish{Topic: []byte(topic), Payload: reusePayload('a', 1, seq, size, topic)}
			m := s.msgBufs.newMessage(&p, p.Topic, now, 1)
			if m.buf == nil {
				t.Fatalf("a %d-byte message was not pooled", size)
			}
			return m
		}
		small := pooled("run/pooled", 3, 100)
		big := pooled("run/big", 4, 20000)
		msgs := []*message{heap("run/a", 1, 64), heap("run/b", 2, copyPayloadMax), small, big, heap("run/c", 5, 64)}
		topics := []string{"run/a", "run/b", "run/pooled", "run/big", "run/c"}
		qos := []byte{0, 1, 0, 1, 0}
		for i, m := range msgs {
			if kick, out, _ := sess.enqueue(&delivery{msg: m, qos: qos[i]}, now); kick != nil || out != c {
				t.Fatalf("message %d not queued for the connection", i)
			}
		}

		sess.mu.Lock()
		n := c.fillLocked()
		sess.mu.Unlock()
		w := c.w.b
		// The creators let go: the small pooled message's only other
		// holder was the queue entry, which the batch ended (QoS 0).
		small.unref()
		big.unref()
		if puts := s.msgBufs.puts.Load(); puts != 1 {
			t.Fatalf("%d buffers given back after the batch was built, want the small message's 1", puts)
		}
		if small.payload[0] != poisonByte {
			t.Fatal("the small pooled message's buffer was not poisoned when given back")
		}

		// [run: a, b, small, big's header] [big's payload] [run: c]
		if n != 3 || len(w.vec) != 3 {
			t.Fatalf("v%d: %d vectors, want 3", version, len(w.vec))
		}
		if &w.vec[1][0] != &big.payload[0] || len(w.vec[1]) != len(big.payload) {
			t.Fatal("the big payload was copied, not written from the message")
		}
		if len(w.held) != 1 || w.held[0] != big {
			t.Fatalf("the batch holds %d messages, want the big one", len(w.held))
		}
		var all []byte
		for _, v := range w.vec {
			all = append(all, v...)
		}
		for i := range msgs {
			fh, hn, err := packet.ParseFixedHeader(all)
			if err != nil {
				t.Fatalf("packet %d: %v", i, err)
			}
			var p packet.Publish
			if err := p.Decode(version, fh, all[hn:hn+fh.Remaining]); err != nil {
				t.Fatalf("packet %d: %v", i, err)
			}
			if p.QoS != qos[i] || string(p.Topic) != topics[i] {
				t.Fatalf("packet %d: QoS %d topic %q, want %d %q", i, p.QoS, p.Topic, qos[i], topics[i])
			}
			if err := checkPayload('a', p.Topic, p.Payload); err != nil {
				t.Fatalf("packet %d (%s): %v", i, p.Topic, err)
			}
			all = all[hn+fh.Remaining:]
		}
		if len(all) != 0 {
			t.Fatalf("%d bytes after the last packet", len(all))
		}
		w.releaseHeld()
		if puts := s.msgBufs.puts.Load(); puts != 1 {
			t.Fatalf("%d buffers given back: the big message's inflight entry still holds it", puts)
		}
	}
}
