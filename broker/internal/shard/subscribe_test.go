package shard

import (
	"slices"
	"strings"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

func TestSubackReasons(t *testing.T) {
	t.Parallel()
	deny := denyAuthorizer{sub: "private/"}
	b := startBroker(t, Options{MaxSubscriptionsPerClient: 6}, ConnInfo{Authorizer: deny})
	subs := []packet.Subscription{
		{Filter: []byte("a/b"), QoS: 0},
		{Filter: []byte("a/+"), QoS: 1},
		{Filter: []byte("a/#"), QoS: 2},
		{Filter: []byte("a/#/b"), QoS: 1}, // [MQTT-4.7.1-1]
		{Filter: []byte("a+"), QoS: 1},    // [MQTT-4.7.1-2]
		{Filter: []byte("$share/g/s/+"), QoS: 1},
		{Filter: []byte("$share/g+/x"), QoS: 1}, // bad share name [MQTT-4.8.2-1]
		{Filter: []byte("private/x"), QoS: 1},
	}
	c5 := v5Client(t, b, "suback5")
	got := c5.subscribe(1, packet.Properties{}, subs...)
	want := []packet.ReasonCode{0, 1, 2, 0x8F, 0x8F, 1, 0x8F, 0x87}
	if !slices.Equal(got, want) {
		t.Fatalf("v5 SUBACK %x, want %x", got, want)
	}
	c3 := dialRaw(t, b.addr, packet.Version311)
	c3.connectOK("suback3")
	got = c3.subscribe(1, packet.Properties{}, subs...)
	want = []packet.ReasonCode{0, 1, 2, 0x80, 0x80, 1, 0x80, 0x80}
	if !slices.Equal(got, want) {
		t.Fatalf("v3 SUBACK %x, want %x", got, want)
	}
	// Quota: 4 held, 6 allowed.
	got = c5.subscribe(2, packet.Properties{}, packet.Subscription{Filter: []byte("q/1")},
		packet.Subscription{Filter: []byte("q/2")}, packet.Subscription{Filter: []byte("q/3")})
	if !slices.Equal(got, []packet.ReasonCode{0, 0, packet.ErrQuotaExceeded}) {
		t.Fatalf("quota SUBACK %x", got)
	}
}

// denyAuthorizer refuses topics and filters under the given prefixes.
type denyAuthorizer struct{ pub, sub string }

func (d denyAuthorizer) CanPublish(topic []byte) bool {
	return d.pub == "" || !strings.HasPrefix(string(topic), d.pub)
}

func (d denyAuthorizer) CanSubscribe(filter string) bool {
	return d.sub == "" || !strings.HasPrefix(filter, d.sub)
}

func TestPublishNotAuthorized(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{Authorizer: denyAuthorizer{pub: "secret/"}})
	watcher := v5Client(t, b, "acl-watch")
	watcher.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("#"), QoS: 1})
	c5 := v5Client(t, b, "acl5")
	c5.send(&packet.Publish{QoS: 1, PacketID: 1, Topic: []byte("secret/x"), Payload: []byte("no")})
	if a := c5.ack(packet.TypePuback); a.Reason != packet.ErrNotAuthorized {
		t.Fatalf("PUBACK %v", a.Reason)
	}
	c3 := dialRaw(t, b.addr, packet.Version311)
	c3.connectOK("acl3")
	c3.send(&packet.Publish{QoS: 1, PacketID: 1, Topic: []byte("secret/y"), Payload: []byte("no")})
	c3.ack(packet.TypePuback) // [MQTT-3.3.5-2] acknowledged, not delivered
	c5.send(&packet.Publish{QoS: 1, PacketID: 2, Topic: []byte("$SYS/fake"), Payload: []byte("no")})
	if a := c5.ack(packet.TypePuback); a.Reason != packet.ErrNotAuthorized {
		t.Fatalf("PUBACK to $SYS %v", a.Reason)
	}
	c5.send(&packet.Publish{QoS: 1, PacketID: 3, Topic: []byte("public"), Payload: []byte("yes")})
	c5.ack(packet.TypePuback)
	if p := watcher.publish(); string(p.Topic) != "public" {
		t.Fatalf("watcher got %s", p.Topic)
	}
	if n := b.shard.Stats().Dropped["not_authorized"]; n != 3 {
		t.Fatalf("not_authorized drops %d", n)
	}
}

func TestSubscriptionOptions(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	c := v5Client(t, b, "opts")
	sid := func(id uint32) packet.Properties {
		return packet.Properties{SubscriptionIDs: []uint32{id}}
	}
	c.subscribe(1, sid(11), packet.Subscription{Filter: []byte("o/+"), QoS: 1})
	c.subscribe(2, sid(22), packet.Subscription{Filter: []byte("o/#"), QoS: 0, RetainAsPublished: true})
	c.subscribe(3, packet.Properties{}, packet.Subscription{Filter: []byte("own"), NoLocal: true})

	// Overlapping subscriptions: one copy, max QoS, both identifiers
	// [MQTT-3.3.4-2] [MQTT-3.3.4-3], RETAIN kept by Retain As Published.
	c.send(&packet.Publish{QoS: 1, PacketID: 5, Retain: true, Topic: []byte("o/x"), Payload: []byte("v")})
	var p *packet.Publish
	for acked := false; p == nil || !acked; {
		fh, body := c.next2(t)
		switch fh.Type {
		case packet.TypePuback:
			acked = true
		case packet.TypePublish:
			p = new(packet.Publish)
			if err := p.Decode(packet.Version5, fh, body); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("unexpected %v", fh.Type)
		}
	}
	ids := slices.Sorted(slices.Values(p.Props.SubscriptionIDs))
	if p.QoS != 1 || !slices.Equal(ids, []uint32{11, 22}) || !p.Retain {
		t.Fatalf("got qos %d ids %v retain %v", p.QoS, ids, p.Retain)
	}
	c.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})

	// No Local: our own message on "own" does not come back [MQTT-3.8.3-3].
	c.send(&packet.Publish{Topic: []byte("own"), Payload: []byte("me")})
	c.expectSilence(150 * time.Millisecond)
	other := v5Client(t, b, "opts-other")
	other.send(&packet.Publish{Topic: []byte("own"), Payload: []byte("you")})
	if p := c.publish(); string(p.Payload) != "you" {
		t.Fatalf("got %q", p.Payload)
	}
}

func TestRetained(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	pub := v5Client(t, b, "ret-pub")
	pub.send(&packet.Publish{QoS: 1, PacketID: 1, Retain: true, Topic: []byte("ret/a"), Payload: []byte("A"),
		Props: packet.Properties{ContentType: []byte("text/plain")}})
	pub.ack(packet.TypePuback)
	pub.send(&packet.Publish{QoS: 0, Retain: true, Topic: []byte("ret/b"), Payload: []byte("B")})
	pub.send(&packet.Publish{QoS: 1, PacketID: 2, Retain: true, Topic: []byte("ret/b"), Payload: nil}) // clear [MQTT-3.3.1-6]
	pub.ack(packet.TypePuback)
	eventually(t, "one retained", func() bool { return b.shard.Stats().Retained == 1 })

	tests := []struct {
		name     string
		handling byte
		repeat   bool
		want     int
	}{
		{"handling 0 sends", 0, false, 1},
		{"handling 0 sends again on resubscribe", 0, true, 1},
		{"handling 1 sends when new", 1, false, 1},
		{"handling 1 silent on resubscribe", 1, true, 0},
		{"handling 2 never", 2, false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := v5Client(t, b, "ret-"+tc.name)
			sub := packet.Subscription{Filter: []byte("ret/#"), QoS: 1, RetainHandling: tc.handling}
			c.subscribe(1, packet.Properties{}, sub)
			if tc.repeat {
				if tc.want == 1 || tc.handling != 2 {
					p := c.publish()
					c.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
				}
				c.subscribe(2, packet.Properties{}, sub)
			}
			for range tc.want {
				p := c.publish()
				if !p.Retain || string(p.Payload) != "A" || string(p.Props.ContentType) != "text/plain" {
					t.Fatalf("retained %+v", p) // [MQTT-3.3.1-8]
				}
			}
			c.expectSilence(100 * time.Millisecond)
		})
	}
	t.Run("3.1.1 retained flag and live flag", func(t *testing.T) {
		t.Parallel()
		c := dialRaw(t, b.addr, packet.Version311)
		c.connectOK("ret-v3")
		c.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("ret/a")}, packet.Subscription{Filter: []byte("live3/#")})
		if p := c.publish(); !p.Retain {
			t.Fatal("retained delivery without RETAIN")
		}
		other := dialRaw(t, b.addr, packet.Version311)
		other.connectOK("ret-v3-pub")
		other.send(&packet.Publish{Retain: true, Topic: []byte("live3/c"), Payload: []byte("C")})
		if p := c.publish(); p.Retain || string(p.Payload) != "C" {
			t.Fatalf("live delivery retain=%v payload %q", p.Retain, p.Payload) // [MQTT-3.3.1-9]
		}
	})
}

func TestSysTopics(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{SysInterval: 50 * time.Millisecond}, ConnInfo{})
	all := v5Client(t, b, "sys-all")
	all.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("#")})
	eventually(t, "$SYS retained", func() bool { return b.shard.Stats().Retained > 0 })
	sys := v5Client(t, b, "sys-sys")
	sys.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("$SYS/broker/clients/connected")})
	// The retained copy, and a live one (which may come first).
	retained := false
	for range 2 {
		p := sys.publish()
		if string(p.Topic) != "$SYS/broker/clients/connected" || len(p.Payload) == 0 {
			t.Fatalf("$SYS publish %s %q", p.Topic, p.Payload)
		}
		retained = retained || p.Retain
	}
	if !retained {
		t.Fatal("no retained $SYS message")
	}
	all.expectSilence(150 * time.Millisecond) // [MQTT-4.7.2-1]
}

func TestUnsubscribe(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	c := v5Client(t, b, "unsub")
	c.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("u/1")})
	c.send(&packet.Unsubscribe{PacketID: 2, Filters: [][]byte{[]byte("u/1"), []byte("u/2")}})
	fh, body := c.read(packet.TypeUnsuback)
	var ua packet.Unsuback
	if err := ua.Decode(packet.Version5, fh, body); err != nil {
		t.Fatal(err)
	}
	if ua.PacketID != 2 || !slices.Equal(ua.Reasons, []packet.ReasonCode{0, packet.CodeNoSubscriptionExisted}) {
		t.Fatalf("UNSUBACK %+v", ua)
	}
	c.send(&packet.Publish{Topic: []byte("u/1"), Payload: []byte("x")})
	c.expectSilence(100 * time.Millisecond)
}

func TestSharedSubscription(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	m1 := v5Client(t, b, "share-1")
	m2 := v5Client(t, b, "share-2")
	for _, m := range []*rawClient{m1, m2} {
		m.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("$share/grp/jobs/+"), QoS: 1})
	}
	pub := v5Client(t, b, "share-pub")
	const n = 10
	for i := range n {
		pub.send(&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: []byte("jobs/x"), Payload: []byte{byte(i)}})
		pub.ack(packet.TypePuback)
	}
	seen := map[byte]int{}
	count := func(c *rawClient) int {
		got := 0
		for {
			_ = c.nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			fh, body, err := c.rd.ReadPacket(0)
			if err != nil {
				return got
			}
			var p packet.Publish
			if err := p.Decode(packet.Version5, fh, body); err != nil {
				t.Fatal(err)
			}
			seen[p.Payload[0]]++
			c.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
			got++
		}
	}
	n1, n2 := count(m1), count(m2)
	if n1+n2 != n || n1 == 0 || n2 == 0 || len(seen) != n {
		t.Fatalf("member 1 got %d, member 2 got %d, distinct %d; want %d split, each once", n1, n2, len(seen), n)
	}
}
