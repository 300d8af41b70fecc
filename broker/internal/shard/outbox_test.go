package shard

import (
	"encoding/binary"
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
