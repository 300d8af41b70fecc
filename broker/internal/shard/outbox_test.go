package shard

import (
	"encoding/binary"
	"net"
	"testing"
	"time"

	"berth.dev/broker/internal/topic"
	"berth.dev/broker/packet"
)

// TestInlineWrite: a delivery to a subscriber whose writer is idle is
// written by the publishing goroutine itself, and arrives.
func TestInlineWrite(t *testing.T) {
	b := startBroker(t, Options{}, ConnInfo{})
	sub := v5Client(t, b, "sub")
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("t")})

	waitWriterIdle(t, b.shard, "sub") // the SUBACK's write may still hold it

	var out outbox
	var mt topic.Matches
	m := newSimpleMessage("t", []byte("inline"), 0, false, time.Now())
	if n := b.shard.publishVia(m, &mt, &out); n != 1 || out.n != 1 {
		t.Fatalf("routed to %d sessions, %d in the outbox", n, out.n)
	}
	if !out.conns[0].writeInline() {
		t.Fatal("the inline write left output for the writer")
	}
	if p := sub.publish(); string(p.Payload) != "inline" {
		t.Fatalf("got %q", p.Payload)
	}

	// The inline path allocates nothing: routing, the outbox, the batch
	// and the non-blocking writev.
	const runs = 100 // a few KB: the socket takes them all unread
	allocs := testing.AllocsPerRun(runs, func() {
		b.shard.publishVia(m, &mt, &out)
		out.flush()
	})
	if allocs != 0 {
		t.Fatalf("an inline delivery allocates %v times", allocs)
	}
	for range runs + 1 {
		if p := sub.publish(); string(p.Payload) != "inline" {
			t.Fatalf("got %q", p.Payload)
		}
	}
}

// waitWriterIdle waits until the connection of clientID has no write in
// progress or pending: a client can read a packet (the SUBACK) before the
// writer that wrote it has let go of its connection.
func waitWriterIdle(t *testing.T, s *Shard, clientID string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.RLock()
		sess := s.sessions[clientID]
		s.mu.RUnlock()
		var c *conn
		if sess != nil {
			sess.mu.Lock()
			c = sess.conn
			sess.mu.Unlock()
		}
		if c != nil && c.w.mu.TryLock() {
			idle := !c.w.pending && (c.w.b == nil || len(c.w.b.ready) == 0)
			c.w.mu.Unlock()
			if idle {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the writer of %s is still busy after 5 s", clientID)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestInlineWriteHandsOverToTheWriter: a subscriber that stops reading
// fills its socket mid-batch; the writer takes over the rest, and once it
// reads again every message arrives, in order.
func TestInlineWriteHandsOverToTheWriter(t *testing.T) {
	b := startBroker(t, Options{MaxQueuedMessages: 1 << 20, MaxQueuedBytes: 1 << 30}, ConnInfo{})
	sub := v5Client(t, b, "sub")
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("seq")})
	pub := v5Client(t, b, "pub")

	const n = 16000 // 16 MB, more than both socket buffers hold
	payload := make([]byte, 1024)
	var burst []byte
	for i := range n {
		binary.BigEndian.PutUint32(payload, uint32(i))
		var err error
		if burst, err = (&packet.Publish{Topic: []byte("seq"), Payload: payload}).Append(burst, packet.Version5); err != nil {
			t.Fatal(err)
		}
		if len(burst) > 64<<10 || i == n-1 {
			pub.sendBytes(burst)
			burst = burst[:0]
		}
	}
	_ = sub.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	for i := range n {
		p := sub.publish()
		if got := binary.BigEndian.Uint32(p.Payload); got != uint32(i) {
			t.Fatalf("message %d arrived as number %d", got, i)
		}
	}
	if d := b.shard.stats.totalDropped(); d != 0 {
		t.Fatalf("%d dropped", d)
	}
}

// TestQuietConnectionGivesBackItsBatch: control packets alone go out
// without batch state; a connection that was sent messages keeps its
// batch state while it writes, and gives it back after a sweep without
// writing.
func TestQuietConnectionGivesBackItsBatch(t *testing.T) {
	b := startBroker(t, Options{}, ConnInfo{})
	sub := v5Client(t, b, "sub")
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("t")})
	var c *conn
	b.shard.mu.RLock()
	for x := range b.shard.conns {
		c = x
	}
	b.shard.mu.RUnlock()
	holds := func() bool {
		c.w.mu.Lock()
		defer c.w.mu.Unlock()
		return c.w.b != nil
	}
	if holds() {
		t.Fatal("CONNACK and SUBACK took batch state")
	}
	var out outbox
	var mt topic.Matches
	send := func(payload string) {
		b.shard.publishVia(newSimpleMessage("t", []byte(payload), 0, false, time.Now()), &mt, &out)
		out.flush()
		if p := sub.publish(); string(p.Payload) != payload {
			t.Fatalf("got %q", p.Payload)
		}
	}
	send("first")
	if !holds() {
		t.Fatal("no batch state after writing a PUBLISH")
	}
	b.shard.sweepBatches() // written since the last sweep: kept
	if !holds() {
		t.Fatal("the batch state of a connection that just wrote was taken")
	}
	b.shard.sweepBatches()
	if holds() {
		t.Fatal("a quiet connection kept its batch state")
	}
	send("again") // with batch state from the pool
}

// TestClientThatDoesNotReadOverTCP is TestClientThatDoesNotRead on a real
// socket, where answers are written inline until the socket stops taking
// them and the writer takes over: the client is still disconnected once
// its unread answers exceed the bound, by the bound alone. The writer
// blocked on the full socket holds the connection's write lock
// (WriteTimeout, made longer than the wait here, would end it too): a
// reader that waited for that lock, to park say, would stop reading and
// never see the bound exceeded.
func TestClientThatDoesNotReadOverTCP(t *testing.T) {
	sh := New(Options{MaxQueuedBytes: 64 << 10, WriteTimeout: 10 * time.Minute, SysInterval: -1, Poller: newTestPoller(t)})
	addr := serveHooked(t, sh, ConnInfo{AllowAnonymous: true}, func(nc net.Conn) {
		// Fixed buffers, not autotuned: a send buffer of 256 KiB, so that
		// a few MiB of answers are past it (up to 4 MiB when autotuned:
		// 4 million PINGREQs to handle under -race); a receive buffer
		// that holds the flood while a reader slowed by a loaded machine
		// catches up (a full one drops loopback's 64 KiB segments, and the
		// client's retransmissions back off for seconds).
		tc := nc.(*net.TCPConn)
		if err := tc.SetWriteBuffer(256 << 10); err != nil {
			t.Error(err)
		}
		if err := tc.SetReadBuffer(2 << 20); err != nil {
			t.Error(err)
		}
	})
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// A small receive buffer, but not below loopback's 64 KiB segments:
	// smaller ones make TCP itself stall for seconds in retransmission
	// backoff (segments dropped at the receiver, acks with them).
	if err := nc.(*net.TCPConn).SetReadBuffer(256 << 10); err != nil {
		t.Fatal(err)
	}
	connect, _ := (&packet.Connect{ClientID: []byte("deaf"), CleanStart: true}).Append(nil, packet.Version5)
	flood := connect
	for len(flood) < 3<<20 {
		flood = append(flood, 0xC0, 0x00) // PINGREQ
	}
	// 3 MiB of answers: more than the broker's send buffer and the
	// client's receive buffer hold (512 KiB each, as the kernel counts
	// them), the writer's batch in hand and the 64 KiB of answers
	// the broker keeps waiting beyond them. Neither the client's write
	// nor the wait is what fails when the broker is slow: only a session
	// left open fails.
	_ = nc.SetWriteDeadline(time.Now().Add(2 * time.Minute))
	go func() { _, _ = nc.Write(flood) }()
	eventuallyWithin(t, time.Minute, "the session of a client that never reads to end", func() bool {
		_, ok := sh.SessionStats("deaf")
		return !ok
	})
}
