package shard

import (
	"slices"
	"testing"
	"time"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

// crash stops sh the way a SIGKILL would, as far as the store can tell:
// st is closed under it (what was written stays, nothing more is: no
// session saved at shutdown, no later append), and a new shard opens on
// dir. The old one is shut down when the test ends.
func crash(t *testing.T, st *store.WAL, dir string) *testBroker {
	t.Helper()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return startBrokerWith(t, newDurableShard(openWALStore(t, dir, wal.SyncAlways)))
}

// ping makes sure the broker handled everything r sent before.
func (r *rawClient) ping() {
	r.t.Helper()
	r.send(&packet.Ping{Type: packet.TypePingreq})
	r.read(packet.TypePingresp)
}

// TestQoS2InboundAcrossCrash: a QoS 2 message the broker acknowledged
// with PUBREC is delivered once even when the publisher, after a crash,
// sends it again (DUP, same packet id), and its PUBREL then gets PUBCOMP
// success; an id whose PUBREL was answered before the crash is free: a new
// message under it is delivered, not taken for a duplicate.
func TestQoS2InboundAcrossCrash(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := openWALStore(t, dir, wal.SyncAlways)
	b := startBrokerWith(t, newDurableShard(st))

	sub := dialRaw(t, b.addr, packet.Version5)
	sub.connect(sessionConnect("q2in-sub", 3600, true))
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("q/#"), QoS: 2})
	sub.send(&packet.Disconnect{})
	eventually(t, "subscriber offline", func() bool {
		ss, ok := b.shard.SessionStats("q2in-sub")
		return ok && !ss.Connected
	})

	pub := dialRaw(t, b.addr, packet.Version5)
	pub.connect(sessionConnect("q2in-pub", 3600, true))
	pub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("unused"), QoS: 0}) // saves the session
	one := &packet.Publish{QoS: 2, PacketID: 7, Topic: []byte("q/a"), Payload: []byte("one")}
	pub.send(one)
	if a := pub.ack(packet.TypePubrec); a.PacketID != 7 || a.Reason.IsFailure() {
		t.Fatalf("PUBREC %+v", a)
	}
	pub.send(&packet.Publish{QoS: 2, PacketID: 8, Topic: []byte("q/a"), Payload: []byte("two")})
	pub.ack(packet.TypePubrec)
	pub.send(&packet.Ack{Type: packet.TypePubrel, PacketID: 8})
	if a := pub.ack(packet.TypePubcomp); a.PacketID != 8 || a.Reason != packet.CodeSuccess {
		t.Fatalf("PUBCOMP %+v", a)
	}

	b2 := crash(t, st, dir)
	pub2 := dialRaw(t, b2.addr, packet.Version5)
	if ack := pub2.connect(sessionConnect("q2in-pub", 3600, false)); !ack.SessionPresent {
		t.Fatal("publisher's session not present after the crash")
	}
	one.Dup = true
	pub2.send(one) // [MQTT-4.4.0-1] the publisher had no PUBCOMP: it resends
	if a := pub2.ack(packet.TypePubrec); a.PacketID != 7 || a.Reason.IsFailure() {
		t.Fatalf("PUBREC for the resent message: %+v", a)
	}
	pub2.send(&packet.Ack{Type: packet.TypePubrel, PacketID: 7})
	if a := pub2.ack(packet.TypePubcomp); a.PacketID != 7 || a.Reason != packet.CodeSuccess {
		t.Fatalf("PUBCOMP after the crash: %+v, want success (the id was awaiting PUBREL)", a)
	}
	pub2.send(&packet.Publish{QoS: 2, PacketID: 8, Topic: []byte("q/a"), Payload: []byte("three")})
	pub2.ack(packet.TypePubrec)
	pub2.send(&packet.Ack{Type: packet.TypePubrel, PacketID: 8})
	pub2.ack(packet.TypePubcomp)

	sub2 := dialRaw(t, b2.addr, packet.Version5)
	if ack := sub2.connect(sessionConnect("q2in-sub", 3600, false)); !ack.SessionPresent {
		t.Fatal("subscriber's session not present after the crash")
	}
	got := sub2.receiveQoS2(3)
	if want := []string{"one", "two", "three"}; !slices.Equal(got, want) {
		t.Fatalf("subscriber got %q, want %q", got, want)
	}
	sub2.expectSilence(200 * time.Millisecond) // "one" exactly once
}

// receiveQoS2 plays a QoS 2 subscriber until n messages came and their
// flows completed, and returns their payloads in arrival order.
func (r *rawClient) receiveQoS2(n int) []string {
	r.t.Helper()
	var got []string
	open := 0
	for len(got) < n || open > 0 {
		fh, body, err := r.next()
		if err != nil {
			r.t.Fatalf("after %q: %v", got, err)
		}
		switch fh.Type {
		case packet.TypePublish:
			var p packet.Publish
			if err := p.Decode(r.version, fh, body); err != nil {
				r.t.Fatal(err)
			}
			got = append(got, string(p.Payload))
			open++
			r.send(&packet.Ack{Type: packet.TypePubrec, PacketID: p.PacketID})
		case packet.TypePubrel:
			var a packet.Ack
			if err := a.Decode(r.version, fh, body); err != nil {
				r.t.Fatal(err)
			}
			open--
			r.send(&packet.Ack{Type: packet.TypePubcomp, PacketID: a.PacketID})
		default:
			r.t.Fatalf("unexpected %v", fh.Type)
		}
	}
	return got
}

// TestQoS2OutboundAcrossCrash: after a crash a persistent subscriber gets
// PUBREL (same packet id) for a message it had PUBREC'd, the PUBLISH again
// with DUP and the same packet id for one it had not, and nothing for one
// whose flow it completed; none of the three comes as a new message.
func TestQoS2OutboundAcrossCrash(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := openWALStore(t, dir, wal.SyncAlways)
	b := startBrokerWith(t, newDurableShard(st))

	sub := dialRaw(t, b.addr, packet.Version5)
	sub.connect(sessionConnect("q2out-sub", 3600, true))
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("q/#"), QoS: 2})
	pub := v5Client(t, b, "q2out-pub")
	for i, payload := range []string{"a", "b", "c"} {
		id := uint16(i + 1)
		pub.send(&packet.Publish{QoS: 2, PacketID: id, Topic: []byte("q/x"), Payload: []byte(payload)})
		pub.ack(packet.TypePubrec)
		pub.send(&packet.Ack{Type: packet.TypePubrel, PacketID: id})
		pub.ack(packet.TypePubcomp)
	}
	got := map[string]*packet.Publish{}
	for range 3 {
		p := sub.publish()
		got[string(p.Payload)] = p
	}
	a, bm, c := got["a"], got["b"], got["c"]
	if a == nil || bm == nil || c == nil {
		t.Fatalf("deliveries %v", got)
	}
	sub.send(&packet.Ack{Type: packet.TypePubrec, PacketID: a.PacketID})
	if r := sub.ack(packet.TypePubrel); r.PacketID != a.PacketID {
		t.Fatalf("PUBREL %d, want %d", r.PacketID, a.PacketID)
	}
	sub.send(&packet.Ack{Type: packet.TypePubrec, PacketID: bm.PacketID})
	sub.ack(packet.TypePubrel)
	sub.send(&packet.Ack{Type: packet.TypePubcomp, PacketID: bm.PacketID})
	sub.ping()

	b2 := crash(t, st, dir)
	sub2 := dialRaw(t, b2.addr, packet.Version5)
	if ack := sub2.connect(sessionConnect("q2out-sub", 3600, false)); !ack.SessionPresent {
		t.Fatal("session not present after the crash")
	}
	// [MQTT-4.4.0-1] PUBREL for a, PUBLISH c (MQTT orders PUBLISH
	// packets among themselves and PUBREL packets among themselves only).
	var rel *packet.Ack
	var p *packet.Publish
	for rel == nil || p == nil {
		fh, body, err := sub2.next()
		if err != nil {
			t.Fatalf("after the crash: %v", err)
		}
		if fh.Type == packet.TypePubrel && rel == nil {
			rel = new(packet.Ack)
			if err := rel.Decode(packet.Version5, fh, body); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if fh.Type != packet.TypePublish || p != nil {
			t.Fatalf("after the crash: unexpected %v", fh.Type)
		}
		p = new(packet.Publish)
		if err := p.Decode(packet.Version5, fh, body); err != nil {
			t.Fatal(err)
		}
	}
	if rel.PacketID != a.PacketID {
		t.Fatalf("PUBREL %d after the crash, want %d (a)", rel.PacketID, a.PacketID)
	}
	if string(p.Payload) != "c" || !p.Dup || p.PacketID != c.PacketID || p.QoS != 2 {
		t.Fatalf("after the crash got %q dup=%v id=%d qos=%d, want c resent with DUP and id %d",
			p.Payload, p.Dup, p.PacketID, p.QoS, c.PacketID)
	}
	sub2.send(&packet.Ack{Type: packet.TypePubcomp, PacketID: a.PacketID})
	sub2.send(&packet.Ack{Type: packet.TypePubrec, PacketID: c.PacketID})
	sub2.ack(packet.TypePubrel)
	sub2.send(&packet.Ack{Type: packet.TypePubcomp, PacketID: c.PacketID})
	sub2.expectSilence(200 * time.Millisecond) // no a, b or c as a new message
	eventually(t, "inflight empty", func() bool {
		ss, _ := b2.shard.SessionStats("q2out-sub")
		return ss.Inflight == 0 && ss.Queued == 0
	})
}
