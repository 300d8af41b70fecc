package shard

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

// floodBytes encodes n QoS 0 PUBLISH packets of 1 KiB to topic, to be
// written back to back like a fast publisher's: more than the kernel's
// socket buffers hold between the broker and a subscriber (up to 4 MiB
// each way once autotuned).
func floodBytes(t *testing.T, topic string, n int) []byte {
	t.Helper()
	var b []byte
	payload := make([]byte, 1024)
	for range n {
		var err error
		if b, err = (&packet.Publish{Topic: []byte(topic), Payload: payload}).Append(b, packet.Version5); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// TestPublisherPausesForSubscriberBehind: a publisher faster than the only
// subscriber it feeds, which does read, is held back instead of having
// its messages dropped at that subscriber's queue (stall.go). Without the
// pause the subscriber gets little more than its queue (64 messages) and
// the socket buffers hold of the 20 MiB.
func TestPublisherPausesForSubscriberBehind(t *testing.T) {
	t.Parallel()
	sh := New(Options{MaxQueuedMessages: 64, SysInterval: -1})
	addr := serveHooked(t, sh, ConnInfo{AllowAnonymous: true}, func(nc net.Conn) {
		// No autotuning: the broker's writer is woken for each 32 KiB the
		// subscriber takes, not each 2 MiB (see stallQuiet).
		_ = nc.(*net.TCPConn).SetWriteBuffer(64 << 10)
	})
	b := &testBroker{shard: sh, addr: addr}
	sub := v5Client(t, b, "behind")
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("fan/in")})
	pub := v5Client(t, b, "fast-pub")

	const n = 20_000
	// Encoded before the subscriber reads: 20 MB take seconds under -race
	// on a loaded machine, which a subscriber's wait must not count.
	flood := floodBytes(t, "fan/in", n)
	// Every message ends delivered or dropped (accounted, below): the
	// bound is for a hang, not a speed, which CI's load does not set.
	deadline := time.Now().Add(2 * time.Minute)
	var k atomic.Int64
	readDone := make(chan struct{})
	_ = sub.nc.SetReadDeadline(deadline)
	go func() {
		defer close(readDone)
		for k.Load() < n {
			fh, _, err := sub.rd.ReadPacket(0)
			if err != nil {
				return // all accounted for (below), or the bound
			}
			if fh.Type == packet.TypePublish {
				k.Add(1)
			}
			if k.Load()%20 == 0 {
				time.Sleep(time.Millisecond) // a consumer slower than the publisher: 20 MB/s at most
			}
		}
	}()
	start := time.Now()
	_ = pub.nc.SetWriteDeadline(deadline) // held back by pauses at the subscriber's pace
	if _, err := pub.nc.Write(flood); err != nil {
		t.Fatalf("the publisher's flood: %v", err)
	}
	accounted := func() bool {
		ss, _ := b.shard.SessionStats("behind")
		var dropped uint64
		for _, d := range ss.Dropped {
			dropped += d
		}
		return uint64(k.Load())+dropped >= n
	}
	for !accounted() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polled: the broker may still be routing the rest
	}
	_ = sub.nc.SetReadDeadline(time.Now()) // the subscriber waits for no dropped message
	<-readDone
	delivered := int(k.Load())
	st := b.shard.Stats()
	ss, _ := b.shard.SessionStats("behind")
	t.Logf("%d of %d delivered in %v; %d pauses, %d ended stalled; dropped %v",
		delivered, n, time.Since(start).Round(time.Millisecond), st.PublisherPauses, st.PublisherPausesStalled, ss.Dropped)
	if !accounted() {
		t.Fatalf("%d delivered and %v dropped of %d within 2 minutes", delivered, ss.Dropped, n)
	}
	if st.PublisherPauses == 0 {
		t.Fatal("the publisher never paused for its only subscriber, behind")
	}
	// A pause that outlasts stallWait (a descheduled reader under -race on
	// a loaded machine) drops until the queue drains: allow a few.
	if delivered < n*9/10 {
		t.Fatalf("%d of %d delivered: dropped %v", delivered, n, ss.Dropped)
	}
}

// TestPublisherNotHeldByStalledSubscriber: a subscriber that stopped
// reading costs its publisher stallQuiet of pauses, not one per burst for
// ever: then its copies are dropped, counted, and the publisher goes on
// at full speed.
func TestPublisherNotHeldByStalledSubscriber(t *testing.T) {
	t.Parallel()
	// The stalled subscriber stays connected however long the bursts take
	// under load: past SlowConsumerTimeout it would be disconnected
	// (slow_test.go), which is not what is checked here.
	b := startBroker(t, Options{MaxQueuedMessages: 64, SlowConsumerTimeout: time.Hour}, ConnInfo{})
	stalled := dialRaw(t, b.addr, packet.Version5)
	_ = stalled.nc.(*net.TCPConn).SetReadBuffer(4096)
	stalled.connectOK("stalled")
	stalled.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("fan/in")})
	pub := v5Client(t, b, "pub")

	const bursts, per = 150, 200
	start := time.Now()
	for i := range bursts {
		pub.sendBytes(floodBytes(t, "fan/in", per))
		// A QoS 1 PUBLISH with no subscriber: its PUBACK says the burst
		// before it was read and routed.
		pub.send(&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: []byte("elsewhere"), Payload: []byte("x")})
		pub.ack(packet.TypePuback)
	}
	st := b.shard.Stats()
	ss, _ := b.shard.SessionStats("stalled")
	t.Logf("%d bursts of %d read in %v; %d pauses, %d ended stalled; dropped %v",
		bursts, per, time.Since(start).Round(time.Millisecond), st.PublisherPauses, st.PublisherPausesStalled, ss.Dropped)
	if st.PublisherPausesStalled == 0 {
		t.Fatal("no pause ended with the subscriber marked stalled")
	}
	// At most stallQuiet/stallWait pauses before the mark (some more if
	// kernel buffers growing let the queue dip under half); a pause per
	// flush (over 450) would mean the stalled mark is ignored.
	if most := uint64(stallQuiet/stallWait) + 50; st.PublisherPauses > most {
		t.Fatalf("%d pauses for a subscriber that never reads: want at most %d", st.PublisherPauses, most)
	}
	if ss.Dropped["queue_full"] == 0 || !ss.Connected {
		t.Fatalf("stalled subscriber: %+v", ss)
	}
}

// TestBareHeaderMatchesCodec: appendBareHeader encodes what the codec
// does for a PUBLISH without properties, across remaining-length sizes.
func TestBareHeaderMatchesCodec(t *testing.T) {
	topics := [][]byte{[]byte("t"), []byte("fan/in/0123456789"), make([]byte, 300)}
	for i := range topics[2] {
		topics[2][i] = 'a' + byte(i%26)
	}
	for _, version := range []byte{packet.Version311, packet.Version5} {
		for qos := byte(0); qos <= 2; qos++ {
			for _, topic := range topics {
				for _, size := range []int{0, 64, 120, 127, 128, 16380, 16384, 70_000, 2_097_200} {
					p := packet.Publish{QoS: qos, Topic: topic, Payload: make([]byte, size)}
					if qos > 0 {
						p.PacketID = 0x1234
					}
					want, err := p.AppendHeader(nil, version)
					if err != nil {
						t.Fatal(err)
					}
					got := appendBareHeader([]byte{0xEE}, version, qos, topic, size)[1:]
					if qos > 0 {
						packet.SetPacketID(got, 0x1234)
					}
					if string(got) != string(want) {
						t.Fatalf("v%d QoS %d topic %d B payload %d B:\n got % x\nwant % x", version, qos, len(topic), size, got, want)
					}
				}
			}
		}
	}
}
