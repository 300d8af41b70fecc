package shard

import (
	"testing"

	"berth.dev/broker/packet"
)

// A PUBLISH whose Payload Format Indicator says UTF-8 must carry UTF-8;
// the broker refuses one that does not with 0x99 and passes nothing on
// [MQTT-3.3.2-4]. Binary payloads (no indicator, or 0) are never checked.
func TestPayloadFormatInvalidIsRefused(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	sub := v5Client(t, b, "sub")
	if rc := sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("pf/#"), QoS: 1}); rc[0] != 1 {
		t.Fatalf("SUBACK %v", rc)
	}
	pub := v5Client(t, b, "pub")
	utf8Props := packet.Properties{Has: packet.Mask(packet.PropPayloadFormat), PayloadFormat: 1}

	for i, tc := range []struct {
		name    string
		props   packet.Properties
		payload []byte
		want    packet.ReasonCode
	}{
		{"UTF-8 that is not", utf8Props, []byte{0xC3, 0x28}, packet.ErrPayloadFormatInvalid},
		{"UTF-8 that is", utf8Props, []byte("héllo"), packet.CodeSuccess},
		{"binary, no indicator", packet.Properties{}, []byte{0xC3, 0x28}, packet.CodeSuccess},
	} {
		id := uint16(10 + i)
		pub.send(&packet.Publish{Topic: []byte("pf/x"), QoS: 1, PacketID: id, Props: tc.props, Payload: tc.payload})
		if a := pub.ack(packet.TypePuback); a.PacketID != id || a.Reason != tc.want {
			t.Fatalf("%s: PUBACK %d %#x, want %d %#x", tc.name, a.PacketID, byte(a.Reason), id, byte(tc.want))
		}
		if tc.want != packet.CodeSuccess {
			continue
		}
		got := sub.publish()
		if string(got.Payload) != string(tc.payload) {
			t.Fatalf("%s: subscriber got %q, want %q (and nothing of the refused one)", tc.name, got.Payload, tc.payload)
		}
		sub.send(&packet.Ack{Type: packet.TypePuback, PacketID: got.PacketID})
	}
	if n := b.shard.Stats().Dropped["payload_format"]; n != 1 {
		t.Fatalf("payload_format drops = %d, want 1", n)
	}
}
