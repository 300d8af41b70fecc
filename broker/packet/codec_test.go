package packet

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// equateEmpty treats nil and empty slices alike: decoded empty fields alias
// the buffer and are non-nil.
var equateEmpty = cmpopts.EquateEmpty()

func TestDecodeTable(t *testing.T) {
	for _, tc := range goodPackets {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeInto(nil, tc.version, mustHex(tc.raw))
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if diff := cmp.Diff(tc.want, got, equateEmpty); diff != "" {
				t.Errorf("decode mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecodeReuse decodes every packet into structs that already hold the
// previous packet of the same type, so stale fields would show.
func TestDecodeReuse(t *testing.T) {
	structs := map[Type]codec{}
	for round := 0; round < 2; round++ {
		for _, tc := range goodPackets {
			raw := mustHex(tc.raw)
			typ := Type(raw[0] >> 4)
			got, err := decodeInto(structs[typ], tc.version, raw)
			if err != nil {
				t.Fatalf("%s: decode: %v", tc.name, err)
			}
			structs[typ] = got
			if diff := cmp.Diff(tc.want, got, equateEmpty); diff != "" {
				t.Errorf("%s round %d: reused decode mismatch (-want +got):\n%s", tc.name, round, diff)
			}
		}
	}
}

func TestEncodeTable(t *testing.T) {
	for _, tc := range goodPackets {
		t.Run(tc.name, func(t *testing.T) {
			raw := mustHex(tc.raw)
			if enc, ok := reencoded[tc.name]; ok {
				raw = mustHex(enc)
			}
			got, err := tc.want.Append(nil, encodeVersion(tc.want, tc.version))
			if err != nil {
				t.Fatalf("append: %v", err)
			}
			if !bytes.Equal(got, raw) {
				t.Errorf("encoded\n got % x\nwant % x", got, raw)
			}
			// Appending keeps what dst already holds.
			prefix := []byte{0xAA, 0xBB}
			got2, err := tc.want.Append(prefix, encodeVersion(tc.want, tc.version))
			if err != nil || !bytes.Equal(got2[:2], prefix) || !bytes.Equal(got2[2:], raw) {
				t.Errorf("append after prefix: % x, %v", got2, err)
			}
		})
	}
}

func TestBadPackets(t *testing.T) {
	for _, tc := range badPackets {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeInto(nil, tc.version, mustHex(tc.raw))
			if err == nil {
				t.Fatal("decoded without error")
			}
			var code ReasonCode
			if !errors.As(err, &code) {
				t.Fatalf("error %v (%T) is not a ReasonCode", err, err)
			}
			if code != tc.want || !errors.Is(err, tc.want) {
				t.Errorf("got %v (0x%02x), want %v (0x%02x)", err, byte(code), tc.want, byte(tc.want))
			}
		})
	}
}

func TestEncodeRejects(t *testing.T) {
	tests := []struct {
		name    string
		p       codec
		version byte
		want    ReasonCode
	}{
		{"PUBLISH QoS 3", &Publish{Topic: b("a"), QoS: 3, PacketID: 1}, Version311, ErrMalformed},
		{"PUBLISH QoS 1 id 0", &Publish{Topic: b("a"), QoS: 1}, Version311, ErrProtocol},
		{"PUBLISH DUP QoS 0", &Publish{Topic: b("a"), Dup: true}, Version311, ErrMalformed},
		{"PUBLISH empty topic", &Publish{}, Version5, ErrProtocol},
		{"PUBLISH CONNACK property", &Publish{Topic: b("a"), Props: Properties{AssignedClientID: b("x")}}, Version5, ErrMalformed},
		{"SUBSCRIBE two ids", &Subscribe{PacketID: 1, Subscriptions: []Subscription{{Filter: b("a")}},
			Props: Properties{SubscriptionIDs: []uint32{1, 2}}}, Version5, ErrProtocol},
		{"SUBSCRIBE none", &Subscribe{PacketID: 1}, Version311, ErrProtocol},
		{"PUBACK id 0", &Ack{Type: TypePuback}, Version311, ErrProtocol},
		{"PUBREL bad reason", &Ack{Type: TypePubrel, PacketID: 1, Reason: CodeNoMatchingSubscribers}, Version5, ErrProtocol},
		{"CONNACK session present refused", &Connack{SessionPresent: true, Reason: ErrNotAuthorized}, Version311, ErrProtocol},
		{"AUTH in 3.1.1", &Auth{}, Version311, ErrProtocol},
		{"CONNECT version 6", &Connect{}, 6, ErrUnsupportedProtocolVersion},
		{"CONNECT 3.1.1 password only", &Connect{Password: b("x")}, Version311, ErrMalformed},
		{"topic too long", &Publish{Topic: make([]byte, 65536)}, Version311, ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := tc.p.Append([]byte{1}, tc.version)
			if !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
			if !bytes.Equal(out, []byte{1}) {
				t.Errorf("dst changed on error: % x", out)
			}
		})
	}
}

func TestReasonCodeErrors(t *testing.T) {
	err := error(errorf(ErrTopicNameInvalid, TypePublish, "wildcard in topic name"))
	if !errors.Is(err, ErrTopicNameInvalid) || errors.Is(err, ErrMalformed) {
		t.Errorf("errors.Is wrong for %v", err)
	}
	var pe *Error
	if !errors.As(err, &pe) || pe.Packet != TypePublish {
		t.Errorf("errors.As *Error: %v", err)
	}
	if got, want := err.Error(), "packet: PUBLISH: topic name invalid: wildcard in topic name"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got := ErrMalformed.Error(); got != "packet: malformed packet" {
		t.Errorf("ErrMalformed.Error() = %q", got)
	}
	if got := ReasonCode(0x7f).Error(); got != "packet: reason code 0x7f" {
		t.Errorf("unknown code text %q", got)
	}
	if !ErrUnspecified.IsFailure() || CodeGrantedQoS2.IsFailure() {
		t.Error("IsFailure wrong")
	}
}

func TestConnackV3(t *testing.T) {
	tests := []struct {
		code ReasonCode
		want byte
	}{
		{CodeSuccess, 0}, {ErrUnsupportedProtocolVersion, 1}, {ErrClientIDNotValid, 2},
		{ErrServerUnavailable, 3}, {ErrServerBusy, 3}, {ErrQuotaExceeded, 3}, {ErrMalformed, 3},
		{ErrBadUsernameOrPassword, 4}, {ErrNotAuthorized, 5}, {ErrBanned, 5},
	}
	for _, tc := range tests {
		if got := tc.code.ConnackV3(); got != tc.want {
			t.Errorf("%v.ConnackV3() = %d, want %d", tc.code, got, tc.want)
		}
	}
	for rc := byte(0); rc <= 5; rc++ {
		code, ok := ReasonFromConnackV3(rc)
		if !ok || code.ConnackV3() != rc {
			t.Errorf("return code %d does not round-trip: %v %v", rc, code, ok)
		}
	}
	if _, ok := ReasonFromConnackV3(6); ok {
		t.Error("return code 6 accepted")
	}
}

func TestValidTopics(t *testing.T) {
	tests := []struct {
		s            string
		name, filter bool
	}{
		{"a/b", true, true},
		{"/", true, true},
		{"", false, false},
		{"#", false, true},
		{"a/#", false, true},
		{"a#", false, false},
		{"a/#/b", false, false},
		{"+", false, true},
		{"a/+/b", false, true},
		{"a+/b", false, false},
		{"a/+b", false, false},
		{"+/+", false, true},
		{"caf\u00e9", true, true},
		{"a\x00b", false, false},
		{"\xed\xa0\x80", false, false}, // surrogate U+D800
		{"\xef\xbb\xbfa", true, true},  // BOM is kept [MQTT-1.5.4-3]
	}
	for _, tc := range tests {
		if got := ValidTopicName(b(tc.s)); got != tc.name {
			t.Errorf("ValidTopicName(%q) = %v", tc.s, got)
		}
		if got := ValidTopicFilter(b(tc.s)); got != tc.filter {
			t.Errorf("ValidTopicFilter(%q) = %v", tc.s, got)
		}
	}
}

func TestParseFixedHeaderShort(t *testing.T) {
	for _, raw := range [][]byte{nil, {0x30}, {0x30, 0x80}, {0x30, 0x80, 0x80, 0x80}} {
		fh, n, err := ParseFixedHeader(raw)
		if n != 0 || err != nil {
			t.Errorf("% x: got %v %d %v, want incomplete", raw, fh, n, err)
		}
	}
	fh, n, err := ParseFixedHeader([]byte{0x30, 0xff, 0xff, 0xff, 0x7f})
	if err != nil || n != 5 || fh.Remaining != MaxRemaining {
		t.Errorf("max remaining: %v %d %v", fh, n, err)
	}
}

func TestFanOut(t *testing.T) {
	p := &Publish{QoS: 1, Topic: b("fleet/7/temp"), PacketID: 1, Payload: bytes.Repeat([]byte{'x'}, 300),
		Props: Properties{SubscriptionIDs: []uint32{9}, UserProperties: []UserProperty{{b("k"), b("v")}}}}
	for _, v := range []byte{Version311, Version5} {
		whole, err := p.Append(nil, v)
		if err != nil {
			t.Fatal(err)
		}
		hdr, err := p.AppendHeader(nil, v)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(append(hdr, p.Payload...), whole) {
			t.Fatalf("v%d: header+payload differs from Append", v)
		}
		if !SetPacketID(hdr, 0xBEEF) || !SetPublishFlags(hdr, true, true) {
			t.Fatal("patch failed")
		}
		got, err := decodeInto(nil, v, append(hdr, p.Payload...))
		if err != nil {
			t.Fatal(err)
		}
		gp := got.(*Publish)
		if gp.PacketID != 0xBEEF || !gp.Dup || !gp.Retain || gp.QoS != 1 || !bytes.Equal(gp.Topic, p.Topic) {
			t.Errorf("v%d: patched packet decoded as %+v", v, gp)
		}
	}
	qos0, _ := (&Publish{Topic: b("a"), Payload: b("x")}).Append(nil, Version311)
	if _, ok := PacketIDOffset(qos0); ok {
		t.Error("QoS 0 PUBLISH has a packet id offset")
	}
	if SetPublishFlags(qos0, true, false) {
		t.Error("DUP set on QoS 0")
	}
	if SetPacketID([]byte{0x40, 0x02, 0, 1}, 5) {
		t.Error("patched a PUBACK")
	}
}
