package shard

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/broker/internal/topic"
	"berth.dev/broker/packet"
)

// offlineFanout builds a shard with n persistent, offline sessions
// subscribed at QoS 1 to "bench/+", for measuring routing in-process.
func offlineFanout(tb testing.TB, n int) *Shard {
	tb.Helper()
	s := New(Options{SysInterval: -1, MaxQueuedMessages: 1 << 20, MaxQueuedBytes: 1 << 30})
	addOfflineSessions(tb, s, n, func(i int) uint32 {
		if i%2 == 0 {
			return uint32(i + 1)
		}
		return 0
	})
	return s
}

// addOfflineSessions adds n persistent, offline sessions to s, session i
// subscribed at QoS 1 to "bench/+" with subscription identifier subID(i)
// (0: none).
func addOfflineSessions(tb testing.TB, s *Shard, n int, subID func(i int) uint32) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range n {
		sess := s.newSessionLocked(fmt.Sprintf("sub-%d", i))
		sess.expiry = neverExpires
		if _, err := s.tree.Subscribe(sess.id, "bench/+", topic.Options{QoS: 1, SubscriptionID: subID(i)}); err != nil {
			tb.Fatal(err)
		}
	}
}

// drain empties every session queue, as the writers would.
func drain(s *Shard) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, sess := range s.sessions {
		sess.mu.Lock()
		for sess.queue.len() > 0 {
			d := sess.queue.pop()
			sess.queuedBytes -= d.msg.size
		}
		sess.mu.Unlock()
	}
}

// TestRouteAllocations pins the fan-out path at zero allocations per
// message: matching, aggregating subscription ids and queueing one
// delivery in each of 100 sessions.
func TestRouteAllocations(t *testing.T) {
	s := offlineFanout(t, 100)
	m := newSimpleMessage("bench/x", make([]byte, 64), 1, false, time.Now())
	var mt topic.Matches
	for range 3 { // grow the buffers
		if n := s.publish(m, &mt); n != 100 {
			t.Fatalf("routed to %d sessions", n)
		}
		drain(s)
	}
	allocs := testing.AllocsPerRun(200, func() {
		s.publish(m, &mt)
		drain(s)
	})
	if allocs != 0 {
		t.Fatalf("routing one message to 100 sessions allocates %v times", allocs)
	}
}

// TestEncodeAllocations pins the writer's per-subscriber header work
// (cached header copy + packet id patch, and a variant with a
// subscription identifier) at zero allocations.
func TestEncodeAllocations(t *testing.T) {
	s := New(Options{SysInterval: -1})
	c := &conn{shard: s, version: packet.Version5}
	m := newSimpleMessage("bench/x", make([]byte, 64), 1, false, time.Now())
	plain := delivery{msg: m, qos: 1, id: 9}
	withID := delivery{msg: m, qos: 1, id: 10}
	withID.setSubIDs([]uint32{42})
	arena := make([]byte, 0, 1024)
	for _, d := range []*delivery{&plain, &withID} {
		if _, ok := c.encodePublishLocked(arena, d, false, 0); !ok {
			t.Fatal("encode failed")
		}
	}
	allocs := testing.AllocsPerRun(1000, func() {
		arena = arena[:0]
		arena, _ = c.encodePublishLocked(arena, &plain, false, 0)
		arena, _ = c.encodePublishLocked(arena, &withID, true, 0)
	})
	if allocs != 0 {
		t.Fatalf("encoding allocates %v times", allocs)
	}
	// The patched header plus the shared payload is a valid PUBLISH.
	for _, d := range []*delivery{&plain, &withID} {
		hdr, _ := c.encodePublishLocked(nil, d, false, 0)
		whole := append(hdr, m.payload...)
		fh, n, err := packet.ParseFixedHeader(whole)
		if err != nil {
			t.Fatal(err)
		}
		var p packet.Publish
		if err := p.Decode(packet.Version5, fh, whole[n:]); err != nil || p.PacketID != d.id || string(p.Topic) != "bench/x" || len(p.Payload) != 64 {
			t.Fatalf("decoded %+v: %v", p, err)
		}
		if d.nSub > 0 && (len(p.Props.SubscriptionIDs) != 1 || p.Props.SubscriptionIDs[0] != 42) {
			t.Fatalf("subscription ids %v", p.Props.SubscriptionIDs)
		}
	}
}

// BenchmarkRoute measures routing one publish into 100 session queues.
func BenchmarkRoute(b *testing.B) {
	s := offlineFanout(b, 100)
	m := newSimpleMessage("bench/x", make([]byte, 64), 1, false, time.Now())
	var mt topic.Matches
	b.ReportAllocs()
	b.SetBytes(int64(len(m.payload)) * 100)
	for b.Loop() {
		s.publish(m, &mt)
		drain(s)
	}
	b.ReportMetric(float64(b.N)*100/b.Elapsed().Seconds(), "deliveries/s")
}

// BenchmarkFanout100 publishes over a real loopback socket to 100
// subscribers, each on its own socket, and waits until every subscriber
// has read every message.
func BenchmarkFanout100(b *testing.B) {
	for _, qos := range []byte{0, 1} {
		b.Run(fmt.Sprintf("qos%d", qos), func(b *testing.B) {
			br := startBroker(b, Options{MaxQueuedMessages: 1 << 20, MaxQueuedBytes: 1 << 30, MaxInflight: 65535}, ConnInfo{})
			benchFanout(b, br.addr, 100, qos)
			if d := br.shard.stats.totalDropped(); d != 0 {
				b.Fatalf("%d messages dropped", d)
			}
		})
	}
}

// BenchmarkFanout100Mosquitto runs the QoS 0 load against a mosquitto
// broker on loopback, the peer the numbers are compared with.
func BenchmarkFanout100Mosquitto(b *testing.B) {
	b.Run("qos0", func(b *testing.B) { benchFanout(b, startMosquitto(b), 100, 0) })
}

// startMosquitto runs /usr/sbin/mosquitto on a free loopback port with
// unbounded queues, for the duration of the benchmark.
func startMosquitto(b *testing.B) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	_ = ln.Close()
	conf := filepath.Join(b.TempDir(), "mosquitto.conf")
	cfg := "listener " + port + " 127.0.0.1\nallow_anonymous true\nmax_queued_messages 1000000\nset_tcp_nodelay true\n"
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("/usr/sbin/mosquitto", "-c", conf)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	eventually(b, "mosquitto listening", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
	return addr
}

func benchFanout(b *testing.B, addr string, subs int, qos byte) {
	var received atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range subs {
		c := dialRaw(b, addr, packet.Version5)
		c.connectOK(fmt.Sprintf("bench-sub-%d", i))
		c.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("bench/+"), QoS: qos})
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ack packet.Ack
			var pub packet.Publish
			out := make([]byte, 0, 64<<10)
			for {
				_ = c.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
				fh, body, err := c.rd.ReadPacket(0)
				if err != nil {
					return
				}
				if fh.Type != packet.TypePublish {
					continue
				}
				received.Add(1)
				if qos > 0 {
					if err := pub.Decode(packet.Version5, fh, body); err != nil {
						return
					}
					ack = packet.Ack{Type: packet.TypePuback, PacketID: pub.PacketID}
					out, _ = ack.Append(out, packet.Version5)
					if c.rd.Buffered() == 0 || len(out) > 60<<10 {
						if _, err := c.nc.Write(out); err != nil {
							return
						}
						out = out[:0]
					}
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	pub := dialRaw(b, addr, packet.Version5)
	pub.connectOK("bench-pub")
	go func() { // discard the publisher's PUBACKs
		for {
			if _, _, err := pub.rd.ReadPacket(0); err != nil {
				return
			}
		}
	}()
	const burst = 256
	one := &packet.Publish{QoS: qos, Topic: []byte("bench/x"), Payload: make([]byte, 64)}
	var batch []byte
	nextID := uint16(0)
	fillBatch := func() {
		batch = batch[:0]
		for range burst {
			if qos > 0 {
				nextID++
				if nextID == 0 {
					nextID = 1
				}
				one.PacketID = nextID
			}
			batch, _ = one.Append(batch, packet.Version5)
		}
	}
	fillBatch()
	msgLen := len(batch) / burst
	b.ReportAllocs()
	b.SetBytes(int64(64 * subs))
	b.ResetTimer()
	sent := 0
	for sent < b.N {
		n := min(burst, b.N-sent)
		_ = pub.nc.SetReadDeadline(time.Now().Add(time.Minute))
		pub.sendBytes(batch[:n*msgLen])
		if qos > 0 {
			fillBatch() // fresh packet ids
		}
		sent += n
		// Keep at most a few bursts in flight so queues stay bounded.
		for received.Load() < int64(subs)*int64(max(0, sent-4*burst)) {
			time.Sleep(50 * time.Microsecond)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for received.Load() < int64(subs)*int64(b.N) {
		if time.Now().After(deadline) {
			b.Fatalf("received %d of %d", received.Load(), subs*b.N)
		}
		time.Sleep(50 * time.Microsecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(received.Load())/b.Elapsed().Seconds(), "msgs_delivered/s")
	close(stop)
}
