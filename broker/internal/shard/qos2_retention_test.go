package shard

import (
	"testing"
	"time"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

// TestQoS2ExactlyOnceAcrossRetentionAndCrash: retention deletes the
// segments holding a publisher's awaiting-PUBREL mark (its message's own
// record) and a subscriber's "released" record (PUBREL owed), then the
// broker crashes. After the restart the publisher's resent PUBLISH (DUP,
// same id) is acknowledged but not routed again, its PUBREL gets PUBCOMP
// success, and the subscriber gets the PUBREL it is owed and not the
// message a second time.
func TestQoS2ExactlyOnceAcrossRetentionAndCrash(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	open := func() (*testBroker, *store.WAL) {
		st, err := store.OpenWAL(store.WALOptions{Dir: dir, Fsync: wal.SyncAlways, SegmentBytes: 256})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		sh := New(Options{Store: st, MessageLog: st.Messages(), SysInterval: -1, CheckpointInterval: time.Hour})
		return startBrokerWith(t, sh), st
	}
	b, st := open()

	sub := dialRaw(t, b.addr, packet.Version5)
	sub.connect(sessionConnect("q2r-sub", 3600, true))
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("q/#"), QoS: 2})
	pub := dialRaw(t, b.addr, packet.Version5)
	pub.connect(sessionConnect("q2r-pub", 3600, true))
	pub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("unused"), QoS: 0}) // saves the session
	msg := &packet.Publish{QoS: 2, PacketID: 7, Topic: []byte("q/a"), Payload: []byte("once")}
	pub.send(msg)
	if a := pub.ack(packet.TypePubrec); a.PacketID != 7 || a.Reason.IsFailure() {
		t.Fatalf("PUBREC %+v", a)
	}
	p := sub.publish()
	sub.send(&packet.Ack{Type: packet.TypePubrec, PacketID: p.PacketID})
	if r := sub.ack(packet.TypePubrel); r.PacketID != p.PacketID {
		t.Fatalf("PUBREL %d, want %d", r.PacketID, p.PacketID)
	}
	// No PUBREL from the publisher, no PUBCOMP from the subscriber.
	stateEnd := st.Messages().NextOffset()

	for i := range 40 {
		pub.send(&packet.Publish{QoS: 1, PacketID: uint16(100 + i), Topic: []byte("fill/x"), Payload: make([]byte, 64)})
		pub.ack(packet.TypePuback)
	}
	b.shard.SetRetention(Retention{Bytes: 600})
	b.shard.applyRetention()
	if first := st.Messages().FirstOffset(); first < stateEnd {
		t.Fatalf("retention kept the log from offset %d; the test needs the QoS 2 state below %d gone", first, stateEnd)
	}

	if err := st.Close(); err != nil { // the crash
		t.Fatal(err)
	}
	b2, _ := open()
	pub2 := dialRaw(t, b2.addr, packet.Version5)
	if ack := pub2.connect(sessionConnect("q2r-pub", 3600, false)); !ack.SessionPresent {
		t.Fatal("publisher's session not present after the crash")
	}
	msg.Dup = true
	pub2.send(msg) // [MQTT-4.4.0-1] it had no PUBCOMP: it resends
	if a := pub2.ack(packet.TypePubrec); a.PacketID != 7 || a.Reason.IsFailure() {
		t.Fatalf("PUBREC for the resent message: %+v", a)
	}
	pub2.send(&packet.Ack{Type: packet.TypePubrel, PacketID: 7})
	if a := pub2.ack(packet.TypePubcomp); a.PacketID != 7 || a.Reason != packet.CodeSuccess {
		t.Fatalf("PUBCOMP after retention and the crash: %+v, want success (the id was awaiting PUBREL)", a)
	}

	sub2 := dialRaw(t, b2.addr, packet.Version5)
	if ack := sub2.connect(sessionConnect("q2r-sub", 3600, false)); !ack.SessionPresent {
		t.Fatal("subscriber's session not present after the crash")
	}
	fh, body := sub2.read(packet.TypePubrel)
	var rel packet.Ack
	if err := rel.Decode(packet.Version5, fh, body); err != nil || rel.PacketID != p.PacketID {
		t.Fatalf("PUBREL %+v %v after the crash, want id %d", rel, err, p.PacketID)
	}
	sub2.send(&packet.Ack{Type: packet.TypePubcomp, PacketID: p.PacketID})
	sub2.expectSilence(300 * time.Millisecond) // "once" is not delivered again
}
