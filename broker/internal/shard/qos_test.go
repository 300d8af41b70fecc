package shard

import (
	"fmt"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

func sessionConnect(id string, expiry uint32, clean bool) *packet.Connect {
	c := &packet.Connect{ClientID: []byte(id), CleanStart: clean}
	if expiry > 0 {
		c.Props.Has.Set(packet.PropSessionExpiry)
		c.Props.SessionExpiry = expiry
	}
	return c
}

func TestQoS2Inbound(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	sub := v5Client(t, b, "q2-sub")
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("q2"), QoS: 2})
	pub := v5Client(t, b, "q2-pub")
	p := &packet.Publish{QoS: 2, PacketID: 7, Topic: []byte("q2"), Payload: []byte("once")}
	pub.send(p)
	if a := pub.ack(packet.TypePubrec); a.PacketID != 7 || a.Reason != packet.CodeSuccess {
		t.Fatalf("PUBREC %+v", a)
	}
	// A duplicate before PUBREL is acknowledged again, not delivered again
	// [MQTT-4.3.3-10].
	p.Dup = true
	pub.send(p)
	pub.ack(packet.TypePubrec)
	pub.send(&packet.Ack{Type: packet.TypePubrel, PacketID: 7})
	if a := pub.ack(packet.TypePubcomp); a.PacketID != 7 || a.Reason != packet.CodeSuccess {
		t.Fatalf("PUBCOMP %+v", a)
	}
	// PUBREL for an unknown id: PUBCOMP 0x92.
	pub.send(&packet.Ack{Type: packet.TypePubrel, PacketID: 8})
	if a := pub.ack(packet.TypePubcomp); a.Reason != packet.ErrPacketIDNotFound {
		t.Fatalf("PUBCOMP %+v", a)
	}

	got := sub.publish()
	if got.QoS != 2 || string(got.Payload) != "once" {
		t.Fatalf("got %+v", got)
	}
	// Outbound QoS 2 flow: PUBREC → PUBREL → PUBCOMP.
	sub.send(&packet.Ack{Type: packet.TypePubrec, PacketID: got.PacketID})
	if a := sub.ack(packet.TypePubrel); a.PacketID != got.PacketID {
		t.Fatalf("PUBREL %+v", a)
	}
	sub.send(&packet.Ack{Type: packet.TypePubcomp, PacketID: got.PacketID})
	sub.expectSilence(200 * time.Millisecond) // no second copy
	eventually(t, "inflight empty", func() bool {
		st, _ := b.shard.SessionStats("q2-sub")
		return st.Inflight == 0
	})
}

func TestRedeliveryOnReconnect(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	sub := dialRaw(t, b.addr, packet.Version5)
	sub.connect(sessionConnect("redeliver", 300, true))
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("r/#"), QoS: 2})
	pub := v5Client(t, b, "redeliver-pub")
	for i, q := range []byte{1, 2, 1} {
		pub.send(&packet.Publish{QoS: q, PacketID: uint16(i + 1), Topic: []byte("r/x"), Payload: fmt.Appendf(nil, "m%d", i)})
	}
	first := []*packet.Publish{sub.publish(), sub.publish(), sub.publish()}
	// Acknowledge the QoS 2 one halfway: PUBREC, so PUBREL is owed.
	sub.send(&packet.Ack{Type: packet.TypePubrec, PacketID: first[1].PacketID})
	sub.ack(packet.TypePubrel)
	_ = sub.nc.Close()
	eventually(t, "session offline", func() bool {
		st, ok := b.shard.SessionStats("redeliver")
		return ok && !st.Connected
	})
	// Queued while offline.
	pub.send(&packet.Publish{QoS: 1, PacketID: 9, Topic: []byte("r/x"), Payload: []byte("offline")})
	pub.ack(packet.TypePuback)

	again := dialRaw(t, b.addr, packet.Version5)
	ack := again.connect(sessionConnect("redeliver", 300, false))
	if !ack.SessionPresent {
		t.Fatal("session not present") // [MQTT-3.2.2-3]
	}
	// [MQTT-4.4.0-1] unacknowledged PUBLISH again with DUP, in order,
	// and PUBREL for the one that was PUBREC'd.
	var order []string
	for range 4 {
		fh, body := again.next2(t)
		switch fh.Type {
		case packet.TypePublish:
			var p packet.Publish
			if err := p.Decode(packet.Version5, fh, body); err != nil {
				t.Fatal(err)
			}
			order = append(order, fmt.Sprintf("%s dup=%v", p.Payload, p.Dup))
			if string(p.Payload) != "offline" && p.PacketID != first[0].PacketID && p.PacketID != first[2].PacketID {
				t.Errorf("redelivered with a new packet id %d", p.PacketID)
			}
		case packet.TypePubrel:
			order = append(order, "PUBREL")
		default:
			t.Fatalf("unexpected %v", fh.Type)
		}
	}
	want := []string{"m0 dup=true", "PUBREL", "m2 dup=true", "offline dup=false"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("redelivery %v, want %v", order, want)
	}
}

func (r *rawClient) next2(t *testing.T) (packet.FixedHeader, []byte) {
	t.Helper()
	fh, body, err := r.next()
	if err != nil {
		t.Fatal(err)
	}
	return fh, body
}

func TestCleanStartDiscardsSession(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	c := dialRaw(t, b.addr, packet.Version5)
	c.connect(sessionConnect("clean", 300, true))
	c.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("c"), QoS: 1})
	_ = c.nc.Close()
	c2 := dialRaw(t, b.addr, packet.Version5)
	if ack := c2.connect(sessionConnect("clean", 300, true)); ack.SessionPresent {
		t.Fatal("clean start resumed a session") // [MQTT-3.1.2-4]
	}
	if st, _ := b.shard.SessionStats("clean"); st.Subscriptions != 0 {
		t.Fatalf("%d subscriptions survived clean start", st.Subscriptions)
	}
}

func TestSessionExpiry(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	c := dialRaw(t, b.addr, packet.Version5)
	c.connect(sessionConnect("expires", 1, true))
	c.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("e"), QoS: 1})
	c.send(&packet.Disconnect{})
	c.expectClosed()
	if _, ok := b.shard.SessionStats("expires"); !ok {
		t.Fatal("session gone at once")
	}
	eventually(t, "session expired", func() bool {
		_, ok := b.shard.SessionStats("expires")
		return !ok
	})
	c2 := dialRaw(t, b.addr, packet.Version5)
	if ack := c2.connect(sessionConnect("expires", 0, false)); ack.SessionPresent {
		t.Fatal("expired session resumed")
	}
}

func TestReceiveMaximumOutbound(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	sub := dialRaw(t, b.addr, packet.Version5)
	cp := sessionConnect("window", 0, true)
	cp.Props.Has.Set(packet.PropReceiveMaximum)
	cp.Props.ReceiveMaximum = 2
	sub.connect(cp)
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("w"), QoS: 1})
	pub := v5Client(t, b, "window-pub")
	for i := range 5 {
		pub.send(&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: []byte("w"), Payload: []byte{byte('0' + i)}})
		pub.ack(packet.TypePuback) // acknowledged though the subscriber is slow
	}
	a, b2 := sub.publish(), sub.publish()
	sub.expectSilence(150 * time.Millisecond) // [MQTT-4.9.0-2] window of 2
	sub.send(&packet.Ack{Type: packet.TypePuback, PacketID: a.PacketID})
	if p := sub.publish(); string(p.Payload) != "2" {
		t.Fatalf("got %q after one ack", p.Payload)
	}
	sub.expectSilence(100 * time.Millisecond)
	_ = b2
}

func TestMessageExpiry(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	// An offline subscriber whose queued message expires.
	sub := dialRaw(t, b.addr, packet.Version5)
	sub.connect(sessionConnect("exp-sub", 300, true))
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("x/#"), QoS: 1})
	live := v5Client(t, b, "exp-live")
	live.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("x/#"), QoS: 1})
	sub.send(&packet.Disconnect{})
	sub.expectClosed()

	pub := v5Client(t, b, "exp-pub")
	withExpiry := func(id uint16, topic string, secs uint32) *packet.Publish {
		return &packet.Publish{QoS: 1, PacketID: id, Topic: []byte(topic), Payload: []byte(topic),
			Props: packet.Properties{Has: packet.Mask(packet.PropMessageExpiry), MessageExpiry: secs}}
	}
	pub.send(withExpiry(1, "x/short", 1))
	pub.ack(packet.TypePuback)
	pub.send(withExpiry(2, "x/long", 100))
	pub.ack(packet.TypePuback)
	// A live subscriber sees the remaining interval [MQTT-3.3.2-6].
	for _, want := range []string{"x/short", "x/long"} {
		p := live.publish()
		if string(p.Topic) != want || !p.Props.Has.Has(packet.PropMessageExpiry) || p.Props.MessageExpiry == 0 {
			t.Fatalf("live got %s expiry %v", p.Topic, p.Props.MessageExpiry)
		}
	}
	time.Sleep(1100 * time.Millisecond) // let x/short expire while queued
	again := dialRaw(t, b.addr, packet.Version5)
	again.connect(sessionConnect("exp-sub", 300, false))
	p := again.publish()
	if string(p.Topic) != "x/long" || p.Props.MessageExpiry > 99 {
		t.Fatalf("got %s expiry %d, want x/long with less than 100", p.Topic, p.Props.MessageExpiry)
	}
	again.expectSilence(100 * time.Millisecond)
	if st, _ := b.shard.SessionStats("exp-sub"); st.Dropped["expired"] != 1 {
		t.Fatalf("drops %v", st.Dropped)
	}
}

func TestTopicAliases(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	sub := dialRaw(t, b.addr, packet.Version5)
	cp := sessionConnect("alias-sub", 0, true)
	cp.Props.Has.Set(packet.PropTopicAliasMaximum)
	cp.Props.TopicAliasMaximum = 1
	sub.connect(cp)
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("al/#")})
	pub := v5Client(t, b, "alias-pub")
	alias := func(topic string, a uint16, payload string) *packet.Publish {
		return &packet.Publish{Topic: []byte(topic), Payload: []byte(payload),
			Props: packet.Properties{Has: packet.Mask(packet.PropTopicAlias), TopicAlias: a}}
	}
	pub.send(alias("al/one", 1, "1")) // sets inbound alias 1
	pub.send(alias("", 1, "2"))       // uses it
	pub.send(&packet.Publish{Topic: []byte("al/two"), Payload: []byte("3")})

	// Outbound: alias 1 assigned to al/one, then used alone; al/two gets
	// no alias (the client allows one).
	p1, p2, p3 := sub.publish(), sub.publish(), sub.publish()
	if string(p1.Topic) != "al/one" || p1.Props.TopicAlias != 1 {
		t.Fatalf("first: topic %q alias %d", p1.Topic, p1.Props.TopicAlias)
	}
	if len(p2.Topic) != 0 || p2.Props.TopicAlias != 1 || string(p2.Payload) != "2" {
		t.Fatalf("second: topic %q alias %d payload %q", p2.Topic, p2.Props.TopicAlias, p2.Payload)
	}
	if string(p3.Topic) != "al/two" || p3.Props.Has.Has(packet.PropTopicAlias) {
		t.Fatalf("third: topic %q alias %d", p3.Topic, p3.Props.TopicAlias)
	}
}

func TestMaximumPacketSizeOutbound(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	sub := dialRaw(t, b.addr, packet.Version5)
	cp := sessionConnect("small", 0, true)
	cp.Props.Has.Set(packet.PropMaximumPacketSize)
	cp.Props.MaximumPacketSize = 100
	sub.connect(cp)
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("big/#"), QoS: 1})
	pub := v5Client(t, b, "big-pub")
	pub.send(&packet.Publish{QoS: 1, PacketID: 1, Topic: []byte("big/1"), Payload: make([]byte, 200)})
	pub.ack(packet.TypePuback)
	pub.send(&packet.Publish{QoS: 1, PacketID: 2, Topic: []byte("big/2"), Payload: []byte("fits")})
	pub.ack(packet.TypePuback)
	if p := sub.publish(); string(p.Payload) != "fits" {
		t.Fatalf("got %q", p.Payload) // [MQTT-3.1.2-25] the big one is skipped
	}
	if st, _ := b.shard.SessionStats("small"); st.Dropped["too_large"] != 1 || st.Inflight != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestRetainedExpiry(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	pub := v5Client(t, b, "rexp-pub")
	pub.send(&packet.Publish{Retain: true, Topic: []byte("rexp/a"), Payload: []byte("soon gone"),
		Props: packet.Properties{Has: packet.Mask(packet.PropMessageExpiry), MessageExpiry: 1}})
	eventually(t, "retained", func() bool { return b.shard.Stats().Retained == 1 })
	time.Sleep(1100 * time.Millisecond)
	c := v5Client(t, b, "rexp-sub")
	c.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("rexp/#")})
	c.expectSilence(150 * time.Millisecond) // [MQTT-3.3.2-5]
	if n := b.shard.Stats().Retained; n != 0 {
		t.Fatalf("%d retained messages left", n)
	}
}

// TestRedeliveryHonoursNewReceiveMaximum reconnects with a smaller
// Receive Maximum than the number of unacknowledged messages: only that
// many are resent at once, the rest follow as acknowledgements arrive.
func TestRedeliveryHonoursNewReceiveMaximum(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	sub := dialRaw(t, b.addr, packet.Version5)
	sub.connect(sessionConnect("shrink", 300, true))
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("sh"), QoS: 1})
	pub := v5Client(t, b, "shrink-pub")
	for i := range 4 {
		pub.send(&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: []byte("sh"), Payload: []byte{byte('a' + i)}})
		pub.ack(packet.TypePuback)
	}
	for range 4 {
		sub.publish() // received, never acknowledged
	}
	_ = sub.nc.Close()
	eventually(t, "offline", func() bool { st, _ := b.shard.SessionStats("shrink"); return !st.Connected })

	again := dialRaw(t, b.addr, packet.Version5)
	cp := sessionConnect("shrink", 300, false)
	cp.Props.Has.Set(packet.PropReceiveMaximum)
	cp.Props.ReceiveMaximum = 2
	again.connect(cp)
	p1, p2 := again.publish(), again.publish()
	if string(p1.Payload) != "a" || string(p2.Payload) != "b" || !p1.Dup {
		t.Fatalf("resent %q %q dup=%v", p1.Payload, p2.Payload, p1.Dup)
	}
	again.expectSilence(150 * time.Millisecond)
	again.send(&packet.Ack{Type: packet.TypePuback, PacketID: p1.PacketID})
	again.send(&packet.Ack{Type: packet.TypePuback, PacketID: p2.PacketID})
	p3, p4 := again.publish(), again.publish()
	if string(p3.Payload) != "c" || string(p4.Payload) != "d" {
		t.Fatalf("then %q %q", p3.Payload, p4.Payload)
	}
}
