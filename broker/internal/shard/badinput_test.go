package shard

import (
	"testing"

	"berth.dev/broker/packet"
)

// TestBadInput sends one bad packet after a good CONNECT and checks that
// exactly that connection is refused with the right reason (MQTT 5) or
// closed (3.1.1), while the broker goes on serving others.
func TestBadInput(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{MaxPacketSize: 1024, ReceiveMaximum: 2, TopicAliasMaximum: 4}, ConnInfo{})
	pub := func(topic string) []byte {
		return encode(t, &packet.Publish{Topic: []byte(topic), Payload: []byte("x")}, packet.Version311)
	}
	tests := []struct {
		name string
		send [][]byte
		want packet.ReasonCode
	}{
		{"second CONNECT", [][]byte{encode(t, &packet.Connect{ClientID: []byte("x")}, packet.Version5)}, packet.ErrProtocol}, // [MQTT-3.1.0-2]
		{"PUBLISH to a wildcard topic", [][]byte{pub("a/+/b")}, packet.ErrTopicNameInvalid},                                  // [MQTT-3.3.2-2]
		{"PUBLISH to a # topic", [][]byte{pub("a/#")}, packet.ErrTopicNameInvalid},
		{"invalid UTF-8 topic", [][]byte{{0x30, 0x05, 0x00, 0x02, 0xC3, 0x28, 0x00}}, packet.ErrMalformed},        // [MQTT-1.5.4-1]
		{"U+0000 in topic", [][]byte{{0x30, 0x05, 0x00, 0x02, 'a', 0x00, 0x00}}, packet.ErrMalformed},             // [MQTT-1.5.4-2]
		{"wrong SUBSCRIBE flags", [][]byte{{0x80, 0x06, 0x00, 0x01, 0x00, 0x01, 'a', 0x00}}, packet.ErrMalformed}, // [MQTT-3.8.1-1]
		{"wrong PUBREL flags", [][]byte{{0x60, 0x02, 0x00, 0x01}}, packet.ErrMalformed},                           // [MQTT-3.6.1-1]
		{"QoS 3 PUBLISH", [][]byte{{0x36, 0x05, 0x00, 0x01, 'a', 0x00, 0x01}}, packet.ErrMalformed},               // [MQTT-3.3.1-4]
		{"reserved packet type 0", [][]byte{{0x00, 0x00}}, packet.ErrMalformed},
		{"remaining length over 4 bytes", [][]byte{{0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01}}, packet.ErrMalformed}, // [MQTT-1.5.5-1]
		{"packet larger than Maximum Packet Size", [][]byte{{0x30, 0xFF, 0xFF, 0x03}}, packet.ErrPacketTooLarge},
		{"string runs past the body", [][]byte{{0x82, 0x06, 0x00, 0x01, 0x00, 0x00, 0x05, 'a'}}, packet.ErrMalformed},
		{"CONNACK from a client", [][]byte{{0x20, 0x03, 0x00, 0x00, 0x00}}, packet.ErrProtocol},
		{"AUTH without enhanced auth", [][]byte{{0xF0, 0x00}}, packet.ErrProtocol},
		{"topic alias above maximum", [][]byte{encode(t, &packet.Publish{Topic: []byte("a"),
			Props: packet.Properties{Has: packet.Mask(packet.PropTopicAlias), TopicAlias: 5}}, packet.Version5)}, packet.ErrTopicAliasInvalid},
		{"unknown topic alias", [][]byte{encode(t, &packet.Publish{
			Props: packet.Properties{Has: packet.Mask(packet.PropTopicAlias), TopicAlias: 3}}, packet.Version5)}, packet.ErrProtocol},
		{"receive maximum exceeded", [][]byte{
			encode(t, &packet.Publish{QoS: 2, PacketID: 1, Topic: []byte("q")}, packet.Version5),
			encode(t, &packet.Publish{QoS: 2, PacketID: 2, Topic: []byte("q")}, packet.Version5),
			encode(t, &packet.Publish{QoS: 2, PacketID: 3, Topic: []byte("q")}, packet.Version5),
		}, packet.ErrReceiveMaximumExceeded}, // [MQTT-3.3.4-8]
		{"session expiry set on DISCONNECT after 0", [][]byte{encode(t, &packet.Disconnect{
			Props: packet.Properties{Has: packet.Mask(packet.PropSessionExpiry), SessionExpiry: 60}}, packet.Version5)}, packet.ErrProtocol}, // [MQTT-3.14.2-2]
		{"No Local on a shared subscription", [][]byte{encode(t, &packet.Subscribe{PacketID: 1,
			Subscriptions: []packet.Subscription{{Filter: []byte("$share/g/a"), NoLocal: true}}}, packet.Version5)}, packet.ErrProtocol}, // [MQTT-3.8.3-4]
	}
	for _, tc := range tests {
		t.Run("v5 "+tc.name, func(t *testing.T) {
			t.Parallel()
			c := v5Client(t, b, "bad5-"+tc.name)
			for _, p := range tc.send {
				c.sendBytes(p)
			}
			c.expectDisconnect(tc.want)
		})
		if tc.want == packet.ErrTopicAliasInvalid || tc.name == "unknown topic alias" || tc.want == packet.ErrReceiveMaximumExceeded ||
			tc.name == "AUTH without enhanced auth" || tc.name == "session expiry set on DISCONNECT after 0" || tc.name == "No Local on a shared subscription" {
			continue // MQTT 5 only
		}
		t.Run("v3 "+tc.name, func(t *testing.T) {
			t.Parallel()
			c := dialRaw(t, b.addr, packet.Version311)
			c.connectOK("bad3-" + tc.name)
			for _, p := range tc.send {
				c.sendBytes(p)
			}
			c.expectClosed() // [MQTT-4.8.0-1]
		})
	}
	t.Run("before CONNECT", func(t *testing.T) {
		t.Parallel()
		c := dialRaw(t, b.addr, packet.Version5)
		c.sendBytes(pub("a")) // [MQTT-3.1.0-1]
		c.expectClosed()
	})
	t.Run("garbage instead of CONNECT", func(t *testing.T) {
		t.Parallel()
		c := dialRaw(t, b.addr, packet.Version5)
		c.sendBytes([]byte("GET / HTTP/1.1\r\n\r\n"))
		c.expectClosed()
	})
	t.Run("broker goes on", func(t *testing.T) {
		t.Parallel()
		sub := v5Client(t, b, "survivor-sub")
		sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("alive"), QoS: 1})
		p := v5Client(t, b, "survivor-pub")
		p.send(&packet.Publish{QoS: 1, PacketID: 9, Topic: []byte("alive"), Payload: []byte("yes")})
		if a := p.ack(packet.TypePuback); a.PacketID != 9 || a.Reason != packet.CodeSuccess {
			t.Fatalf("PUBACK %+v", a)
		}
		if got := sub.publish(); string(got.Payload) != "yes" {
			t.Fatalf("payload %q", got.Payload)
		}
	})
}
