package shard

import (
	"context"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

// TestSlowConsumerQoS0 checks that a subscriber that never reads neither
// slows the publisher nor a fast subscriber: its QoS 0 copies are dropped
// and counted against it alone.
func TestSlowConsumerQoS0(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{MaxQueuedBytes: 256 << 10, MaxQueuedMessages: 64}, ConnInfo{})
	slow := dialRaw(t, b.addr, packet.Version5)
	_ = slow.nc.(*net.TCPConn).SetReadBuffer(4096)
	slow.connectOK("slow")
	slow.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("flood")})

	fast := v5Client(t, b, "fast")
	fast.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("flood")})
	var got atomic.Int64
	done := make(chan error, 1)
	go func() {
		for {
			_ = fast.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			fh, _, err := fast.rd.ReadPacket(0)
			if err != nil {
				done <- err
				return
			}
			if fh.Type == packet.TypePublish {
				got.Add(1)
			}
		}
	}()

	pub := v5Client(t, b, "flooder")
	payload := make([]byte, 16<<10)
	const batches, per = 100, 10
	start := time.Now()
	for i := range batches {
		for range per {
			pub.send(&packet.Publish{Topic: []byte("flood"), Payload: payload})
		}
		pub.send(&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: []byte("other"), Payload: []byte("x")})
		pub.ack(packet.TypePuback) // the publisher is never held up
		want := int64((i + 1) * per)
		eventually(t, "fast subscriber keeps up", func() bool { return got.Load() >= want })
	}
	t.Logf("%d x 16 KiB to a fast and a stalled subscriber in %v", batches*per, time.Since(start))
	st, _ := b.shard.SessionStats("slow")
	if st.Dropped["queue_full"] == 0 || !st.Connected {
		t.Fatalf("slow subscriber: %+v", st)
	}
	if fs, _ := b.shard.SessionStats("fast"); len(fs.Dropped) != 0 {
		t.Fatalf("fast subscriber dropped %v", fs.Dropped)
	}
	if got.Load() != batches*per {
		t.Fatalf("fast subscriber got %d of %d", got.Load(), batches*per)
	}
	_ = fast.nc.Close()
	<-done
}

// TestSlowConsumerDisconnected checks that a QoS 1 subscriber whose window
// and queue stay full past SlowConsumerTimeout is disconnected with 0x97,
// and that its queued messages stay in its session.
func TestSlowConsumerDisconnected(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{MaxQueuedMessages: 5, SlowConsumerTimeout: 200 * time.Millisecond}, ConnInfo{})
	stuck := dialRaw(t, b.addr, packet.Version5)
	cp := sessionConnect("stuck", 300, true)
	cp.Props.Has.Set(packet.PropReceiveMaximum)
	cp.Props.ReceiveMaximum = 1
	stuck.connect(cp)
	stuck.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("s"), QoS: 1})
	pub := v5Client(t, b, "stuck-pub")
	kicked := make(chan struct{})
	go func() {
		defer close(kicked)
		for {
			fh, body, err := stuck.next()
			if err != nil {
				return
			}
			if fh.Type == packet.TypeDisconnect {
				var d packet.Disconnect
				if d.Decode(packet.Version5, fh, body) == nil && d.Reason == packet.ErrQuotaExceeded {
					return
				}
			}
		}
	}()
	id := uint16(0)
	deadline := time.After(5 * time.Second)
loop:
	for {
		id++
		pub.send(&packet.Publish{QoS: 1, PacketID: id, Topic: []byte("s"), Payload: []byte("m")})
		pub.ack(packet.TypePuback)
		select {
		case <-kicked:
			break loop
		case <-deadline:
			t.Fatal("stuck consumer not disconnected")
		case <-time.After(20 * time.Millisecond):
		}
	}
	eventually(t, "session offline with its queue", func() bool {
		st, ok := b.shard.SessionStats("stuck")
		return ok && !st.Connected && st.Queued == 5 && st.Inflight == 1 && st.Dropped["queue_full"] > 0
	})
	again := dialRaw(t, b.addr, packet.Version5)
	if ack := again.connect(sessionConnect("stuck", 300, false)); !ack.SessionPresent {
		t.Fatal("session lost")
	}
	for range 6 {
		p := again.publish()
		again.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
	}
}

// TestClientThatDoesNotRead checks that a client which keeps sending but
// never reads its acknowledgements is disconnected once they exceed the
// bound, instead of growing the broker's memory. net.Pipe has no buffer,
// so the writer stalls at the first byte the client does not read. The
// broker goes on reading, and discarding, what the client sends for at
// most closeFlushTimeout (linger.go), so the client's writes fail soon after.
func TestClientThatDoesNotRead(t *testing.T) {
	t.Parallel()
	sh := New(Options{MaxQueuedBytes: 64 << 10, SysInterval: -1})
	t.Cleanup(func() { _ = sh.Shutdown(context.Background()) })
	client, server := net.Pipe()
	defer client.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		sh.ServeConn(server, ConnInfo{AllowAnonymous: true})
	}()
	connect, _ := (&packet.Connect{ClientID: []byte("deaf"), CleanStart: true}).Append(nil, packet.Version5)
	_ = client.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := client.Write(connect); err != nil {
		t.Fatal(err)
	}
	pings := make([]byte, 64<<10)
	for i := 0; i < len(pings); i += 2 {
		pings[i] = 0xC0 // PINGREQ
	}
	start, sent := time.Now(), 0
	var err error
	for err == nil { // bounded by the write deadline
		var n int
		n, err = client.Write(pings)
		sent += n
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the broker read %d MiB of pings in 10 s without cutting the client off", sent>>20)
	}
	t.Logf("cut off after %d KiB of pings in %v: %v", sent>>10, time.Since(start), err)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a client that never reads was not disconnected")
	}
	if _, ok := sh.SessionStats("deaf"); ok {
		t.Fatal("session kept")
	}
}
