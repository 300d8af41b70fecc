package shard

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

// TestMsgBufClasses checks that every pooled size gets a buffer at least
// as big and less than a quarter bigger, and that the classes are
// ordered.
func TestMsgBufClasses(t *testing.T) {
	for i := 1; i < msgBufClasses; i++ {
		if msgBufSize(i) <= msgBufSize(i-1) {
			t.Fatalf("class %d (%d bytes) not above class %d (%d)", i, msgBufSize(i), i-1, msgBufSize(i-1))
		}
	}
	if msgBufSize(msgBufClasses-1) != 1<<msgBufMaxShift {
		t.Fatalf("largest class %d bytes", msgBufSize(msgBufClasses-1))
	}
	for n := 1; n <= 1<<msgBufMaxShift; n += 1 + n/97 {
		c := msgBufClass(n)
		if c < 0 || c >= msgBufClasses {
			t.Fatalf("%d bytes: class %d", n, c)
		}
		size := msgBufSize(c)
		if size < n || n > 1<<msgBufMinShift && 4*size >= 5*n+4 {
			t.Fatalf("%d bytes: class %d of %d bytes", n, c, size)
		}
		if c > 0 && msgBufSize(c-1) >= n {
			t.Fatalf("%d bytes: class %d, but class %d (%d bytes) fits", n, c, c-1, msgBufSize(c-1))
		}
	}
	if c := msgBufClass(1<<msgBufMaxShift + 1); c != -1 {
		t.Fatalf("a buffer over the largest class got class %d", c)
	}
}

// TestMessageRefs checks the counting itself: a pooled message goes back
// to its pool, poisoned, when its last holder lets go, and not before.
func TestMessageRefs(t *testing.T) {
	pool := &msgPool{poison: true}
	payload := reusePayload('a', 1, 1, 20000, "t/1")
	m := pool.newMessage(&packet.Publish{QoS: 1, Topic: []byte("t/1"), Payload: payload}, []byte("t/1"), time.Now(), 1)
	if m.buf == nil {
		t.Fatal("a 20 KB message was not pooled")
	}
	m.ref()
	m.unref()
	if err := checkPayload('a', []byte("t/1"), m.payload); err != nil || pool.puts.Load() != 0 {
		t.Fatalf("after one of two holders let go: %v, %d buffers given back", err, pool.puts.Load())
	}
	own := m.own()
	if own == m || own.buf != nil {
		t.Fatal("own returned the pooled message itself")
	}
	m.unref()
	if pool.gets.Load() != 1 || pool.puts.Load() != 1 {
		t.Fatalf("%d buffers taken, %d given back", pool.gets.Load(), pool.puts.Load())
	}
	if m.payload[0] != poisonByte || m.payload[len(m.payload)-1] != poisonByte {
		t.Fatal("the buffer given back was not poisoned")
	}
	if err := checkPayload('a', []byte("t/1"), own.payload); err != nil {
		t.Fatalf("the owned copy: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("releasing once more than held did not panic in poisoning mode")
		}
	}()
	m.unref()
}

// TestMessageBuffersReturned runs big messages (pooled) through every
// holder, with dead letters on and small queue and inflight limits: a
// subscriber that acknowledges, a QoS 0 one, one that never acknowledges
// (its inflight window and queue fill, the rest is dead-lettered), an
// offline persistent session (its queue fills), retained messages, and a
// dead-letter subscriber that checks every copy against the original.
// Every delivery must be byte-exact in poisoning mode; once every session
// has ended, every buffer taken from the pool must have come back.
func TestMessageBuffersReturned(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{poisonFreed: true, DeadLetters: true, MaxInflight: 4, MaxQueuedMessages: 4},
		ConnInfo{TenantID: "a"})
	tenant := func() *reuseTenant { return &reuseTenant{t: t, id: 'a', addr: b.addr} }
	tnPub, tnAck, tnQ0, tnNoAck, tnPeek := tenant(), tenant(), tenant(), tenant(), tenant()
	var wg sync.WaitGroup
	defer wg.Wait()
	var conns []*reuseConn
	defer func() {
		for _, c := range conns {
			_ = c.nc.Close()
		}
	}()
	subscribe := func(tn *reuseTenant, id string, qos byte, ackOdds float64) {
		c, err := tn.dial(id, true)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if err := c.subscribe(1, qos, false); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); tn.receive(c, 1, ackOdds, false, nil) }()
	}
	subscribe(tnAck, "ack", 1, 1)
	subscribe(tnQ0, "q0", 0, 1)
	subscribe(tnNoAck, "noack", 1, 0)
	away, err := tenant().dial("away", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := away.subscribe(1, 1, false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := away.rd.ReadPacket(0); err != nil { // SUBACK
		t.Fatal(err)
	}
	_ = away.nc.Close() // offline: its messages queue
	eventually(t, "the offline session", func() bool {
		s := b.shard
		s.mu.RLock()
		defer s.mu.RUnlock()
		sess := s.sessions["away"]
		return sess != nil && !sess.online.Load()
	})
	dlq, dead := deadLetterReader(t, b.addr, &wg)
	conns = append(conns, dlq)

	p, err := tnPub.newPub(0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	const n = 48
	for i := range n {
		// 5,000, 20,000 and 65,536 bytes: all pooled.
		if err := p.publish(4+i%3, byte(i%2), i%8 == 0, i%4); err != nil {
			t.Fatal(err)
		}
		// One at a time, so that only the slow holders fill up.
		eventually(t, "the acknowledging subscriber's delivery", func() bool { return tnAck.checked.Load() > int64(i) })
	}
	eventually(t, "the QoS 0 subscriber's deliveries", func() bool { return tnQ0.checked.Load() == n })
	eventually(t, "dead letters", func() bool { return dead.Load() > 0 })
	if err := tnPeek.peek("peek", 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if tnPeek.retained.Load() == 0 {
		t.Fatal("no retained message read back")
	}
	pool := &b.shard.msgBufs
	t.Logf("%d buffers taken while %d of %d held: %d inflight and queued for noack, %d dead letters checked",
		pool.gets.Load(), pool.gets.Load()-pool.puts.Load(), n, tnNoAck.checked.Load(), dead.Load())
	if pool.gets.Load() < n {
		t.Fatalf("%d buffers taken from the pool for %d big messages", pool.gets.Load(), n)
	}
	// End every session (a clean start discards the old one); the writers
	// of the closed connections and the dead-letter goroutine let go
	// asynchronously.
	for _, id := range []string{"ack", "q0", "noack", "away", "dlq", "pub0"} {
		c, err := tenant().dial(id, true)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.nc.Close()
	}
	eventually(t, "every pooled buffer given back", func() bool { return pool.gets.Load() == pool.puts.Load() })
	for _, tn := range []*reuseTenant{tnAck, tnQ0, tnNoAck, tnPeek} {
		if tn.bad.Load() != 0 {
			t.Fatalf("%d wrong deliveries", tn.bad.Load())
		}
	}
}

// deadLetterReader subscribes to every dead letter and checks each one's
// payload against the topic it was first published to; it returns the
// connection and the count of copies checked.
func deadLetterReader(t *testing.T, addr string, wg *sync.WaitGroup) (*reuseConn, *atomic.Int64) {
	t.Helper()
	c, err := (&reuseTenant{t: t, id: 'a', addr: addr}).dial("dlq", true)
	if err != nil {
		t.Fatal(err)
	}
	err = c.send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte(DeadLetterPrefix + "#"), QoS: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	checked := new(atomic.Int64)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			_ = c.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
			fh, body, err := c.rd.ReadPacket(0)
			if err != nil {
				return
			}
			if fh.Type != packet.TypePublish {
				continue
			}
			var p packet.Publish
			if err := p.Decode(packet.Version5, fh, body); err != nil {
				t.Errorf("decoding a dead letter: %v", err)
				return
			}
			var orig []byte
			for _, up := range p.Props.UserProperties {
				if string(up.Key) == "berth-dlq-topic" {
					orig = up.Value
				}
			}
			if err := checkPayload('a', orig, p.Payload); err != nil {
				t.Errorf("dead letter on %q: %v", p.Topic, err)
			}
			checked.Add(1)
			if p.QoS == 1 && c.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID}) != nil {
				return
			}
		}
	}()
	return c, checked
}

// TestPooledPayloadOutlivesEarlyPuback has a subscriber with a tiny
// receive buffer stall the broker's writes of 64 KiB messages, then
// acknowledge every inflight one before reading any: the PUBACKs drop the
// inflight entries' references while the writer is still sending their
// payloads, which the writer's batch must keep holding. Every payload
// read afterwards must be byte-exact in poisoning mode.
func TestPooledPayloadOutlivesEarlyPuback(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{poisonFreed: true}, ConnInfo{TenantID: "a"})
	slow := &reuseTenant{t: t, id: 'a', addr: b.addr, dialer: &net.Dialer{
		Timeout: 5 * time.Second,
		Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
			if err != nil {
				return err
			}
			return serr
		},
	}}
	c, err := slow.dial("slow", true)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.nc.Close() }()
	if err := c.subscribe(1, 1, false); err != nil {
		t.Fatal(err)
	}
	if fh, _, err := c.rd.ReadPacket(0); err != nil || fh.Type != packet.TypeSuback {
		t.Fatalf("SUBACK: %v %v", fh.Type, err)
	}
	tnPub := &reuseTenant{t: t, id: 'a', addr: b.addr}
	p, err := tnPub.newPub(0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	const n = 64 // 4 MiB: more than loopback buffers take
	for range n {
		if err := p.publish(6, 1, false, 0); err != nil { // 65,536 bytes
			t.Fatal(err)
		}
	}
	s := b.shard
	var sess *session
	eventually(t, "the writer stalled behind the subscriber", func() bool {
		s.mu.RLock()
		sess = s.sessions["slow"]
		s.mu.RUnlock()
		if sess == nil {
			return false
		}
		sess.mu.Lock()
		defer sess.mu.Unlock()
		return len(sess.inflight) > 0 && sess.queue.len() > 0
	})
	sess.mu.Lock()
	acked := make(map[uint16]uint64) // packet id → send order
	for id, d := range sess.inflight {
		acked[id] = d.seq
	}
	sess.mu.Unlock()
	for id := range acked {
		if err := c.send(&packet.Ack{Type: packet.TypePuback, PacketID: id}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the early PUBACKs handled", func() bool {
		sess.mu.Lock()
		defer sess.mu.Unlock()
		for id, seq := range acked {
			if d, ok := sess.inflight[id]; ok && d.seq == seq {
				return false
			}
		}
		return true
	})
	t.Logf("%d inflight messages acknowledged before the subscriber read any", len(acked))
	done := make(chan struct{})
	go func() { defer close(done); slow.receive(c, 1, 1, false, nil) }()
	eventually(t, fmt.Sprintf("%d deliveries", n), func() bool { return slow.checked.Load() >= n })
	_ = c.nc.Close()
	<-done
	if slow.bad.Load() != 0 {
		t.Fatalf("%d of %d payloads wrong", slow.bad.Load(), n)
	}
}
