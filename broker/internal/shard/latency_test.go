package shard

import (
	"fmt"
	"testing"
	"time"

	"berth.dev/broker/internal/topic"
	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

// latencyCounts is the number of samples in each histogram, taken.
func latencyCounts(s *Shard) (delivery, ack, connect uint64) {
	l := s.Latency()
	return l.Delivery.Take().Count, l.Ack.Take().Count, l.Connect.Take().Count
}

// TestLatencySamples: every live delivery, every accepted QoS 1/2
// acknowledgement and every accepted CONNECT is one sample; a retained
// message sent on SUBSCRIBE is none. Under SyncAlways too, where acks
// wait for the group commit.
func TestLatencySamples(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("durable=%v", durable), func(t *testing.T) {
			var b *testBroker
			if durable {
				b = startBrokerWith(t, newDurableShard(openWALStore(t, t.TempDir(), wal.SyncAlways)))
			} else {
				b = startBroker(t, Options{}, ConnInfo{})
			}
			pub := v5Client(t, b, "pub")
			// A retained message before anyone subscribes: no delivery.
			pub.send(&packet.Publish{QoS: 1, PacketID: 500, Topic: []byte("lat/r"), Retain: true, Payload: []byte("r")})
			pub.ack(packet.TypePuback) // routed before anyone subscribes
			subs := []*rawClient{v5Client(t, b, "sub0"), v5Client(t, b, "sub1")}
			for i, sc := range subs {
				sc.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("lat/#"), QoS: byte(i)})
				if p := sc.publish(); string(p.Payload) != "r" || !p.Retain {
					t.Fatalf("want the retained message first, got %q", p.Payload)
				}
			}
			// The three connects and the retained message's ack, and no
			// delivery. A sample is recorded after its packet is written
			// (flushOut), so the client can read the PUBACK before the
			// reader records it: wait for them rather than take them once,
			// or a late one lands in the counts below.
			var d0, a0, c0 uint64
			eventually(t, "the connects and the retained message's ack recorded", func() bool {
				dd, aa, cc := latencyCounts(b.shard)
				d0, a0, c0 = d0+dd, a0+aa, c0+cc
				if d0 != 0 || a0 > 1 || c0 > 3 {
					t.Fatalf("%d delivery, %d ack and %d connect samples, want 0, 1 and 3", d0, a0, c0)
				}
				return a0 == 1 && c0 == 3
			})
			const n = 50
			for i := range n {
				pub.send(&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: []byte("lat/x"), Payload: []byte("m")})
			}
			for range n {
				pub.ack(packet.TypePuback)
				for _, sc := range subs {
					sc.publish()
				}
			}
			pub.send(&packet.Publish{QoS: 2, PacketID: 999, Topic: []byte("other"), Payload: []byte("q2")})
			pub.ack(packet.TypePubrec)
			var d, a uint64
			eventually(t, "every sample recorded", func() bool {
				dd, aa, _ := latencyCounts(b.shard)
				d, a = d+dd, a+aa
				if d > 2*n || a > n+1 {
					t.Fatalf("%d delivery and %d ack samples, want %d and %d", d, a, 2*n, n+1)
				}
				return d == 2*n && a == n+1
			})
			t.Logf("deliveries %d, acks %d", d, a)
			extra := v5Client(t, b, "late")
			extra.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("lat/#")})
			extra.publish() // the retained message: no sample
			eventually(t, "the connect recorded", func() bool {
				dd, aa, cc := latencyCounts(b.shard)
				if dd != 0 || aa != 0 {
					t.Fatalf("%d deliveries and %d acks more, want none", dd, aa)
				}
				return cc == 1
			})
		})
	}
}

// TestLatencyRecordingAllocations pins the recording path at zero
// allocations per message: a live message routed to a connected
// subscriber, written inline with its delivery sample, and the
// acknowledgement sample of the reader's outbox flush.
func TestLatencyRecordingAllocations(t *testing.T) {
	b := startBroker(t, Options{}, ConnInfo{})
	sub := v5Client(t, b, "sub")
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("t")})
	pubc := &conn{shard: b.shard, in: new(inbound)} // a reader's scratch
	var out outbox
	var mt topic.Matches
	m := newSimpleMessage("t", []byte("inline"), 0, false, time.Now())
	m.readAt = monoNow()
	const runs = 100 // a few KB: the socket takes them all unread
	send := func() {
		b.shard.publishVia(m, &mt, &out)
		out.flush()
		pubc.noteAck(m.readAt)
		pubc.recordSent()
	}
	send()
	allocs := testing.AllocsPerRun(runs, send)
	if allocs != 0 {
		t.Fatalf("a delivery with its latency samples allocates %v times", allocs)
	}
	for range runs + 2 {
		if p := sub.publish(); string(p.Payload) != "inline" {
			t.Fatalf("got %q", p.Payload)
		}
	}
	// Every send is one delivery and one ack sample. A delivery the writer
	// goroutine took over (the subscriber's SUBACK may still hold it when
	// the first sends run) is recorded when its write ends, which can be
	// after the subscriber has read it: wait for the count, do not assume it.
	var d, a uint64
	eventually(t, "a delivery and an ack sample per send", func() bool {
		dd, aa, _ := latencyCounts(b.shard)
		d, a = d+dd, a+aa
		if d > runs+2 || a > runs+2 {
			t.Fatalf("%d delivery and %d ack samples, want %d each", d, a, runs+2)
		}
		return d == runs+2 && a == runs+2
	})
}
