package store

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"berth.dev/broker/packet"
)

// A message record of an inbound QoS 2 PUBLISH carries its origin (meta
// version 2); a version 1 meta, as written before, decodes as before,
// with none.
func TestMetaOrigin(t *testing.T) {
	props := packet.Properties{Has: packet.Mask(packet.PropContentType), ContentType: []byte("text/plain")}
	v1 := AppendMeta(nil, []byte("a/b"), 2, false, 10, 0, &props)
	var m Meta
	n, err := DecodeMeta(v1, &m)
	if err != nil || n != len(v1) || m.Origin != nil || m.OriginID != 0 {
		t.Fatalf("version 1: n=%d err=%v origin=%q/%d", n, err, m.Origin, m.OriginID)
	}
	v2 := AppendOrigin(append([]byte(nil), v1...), 0, "dev-1", 7)
	if v2[0] != 2 {
		t.Fatalf("version byte %d, want 2", v2[0])
	}
	n, err = DecodeMeta(v2, &m)
	if err != nil || n != len(v2) {
		t.Fatalf("version 2: n=%d of %d, err=%v", n, len(v2), err)
	}
	if string(m.Origin) != "dev-1" || m.OriginID != 7 || string(m.Topic) != "a/b" || m.QoS != 2 || string(m.Props.ContentType) != "text/plain" {
		t.Fatalf("version 2 decoded as %+v", m)
	}
	if IsStateKey(v1) || IsStateKey(v2) {
		t.Fatal("a message key taken for a state record")
	}
	if _, err := DecodeMeta(v2[:len(v2)-1], &m); err == nil {
		t.Fatal("a cut origin decoded")
	}
}

// State records: kind and client id in the key, packet ids or (offset,
// packet id) entries in the payload; message metas never start with a
// state kind.
func TestStateRecords(t *testing.T) {
	for _, kind := range []byte{StateInReleased, StateOutSent, StateOutReleased, StateOutCompleted, StateAcked, StateInAwaiting} {
		key := AppendStateKey(nil, kind, "sub-1")
		if !IsStateKey(key) {
			t.Fatalf("%#x: not a state key", kind)
		}
		k, id, err := DecodeStateKey(key)
		if err != nil || k != kind || string(id) != "sub-1" {
			t.Fatalf("%#x: decoded %#x %q %v", kind, k, id, err)
		}
	}
	if _, _, err := DecodeStateKey(AppendStateKey(nil, 0x90, "x")); err == nil {
		t.Fatal("unknown kind decoded")
	}
	if id, err := PacketID(AppendPacketID(nil, 65535)); err != nil || id != 65535 {
		t.Fatalf("packet id %d %v", id, err)
	}
	if _, err := PacketID([]byte{1}); err == nil {
		t.Fatal("short packet id decoded")
	}
	var pl []byte
	pl = AppendSent(pl, 1<<40, 3)
	pl = AppendSent(pl, 9, 65535)
	type entry struct {
		Off uint64
		ID  uint16
	}
	var got []entry
	if err := Sent(pl, func(off uint64, id uint16) { got = append(got, entry{off, id}) }); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]entry{{1 << 40, 3}, {9, 65535}}, got); d != "" {
		t.Fatalf("sent entries (-want +got):\n%s", d)
	}
	if err := Sent(pl[:15], func(uint64, uint16) {}); err == nil {
		t.Fatal("cut sent payload decoded")
	}
}

// A StateAcked payload holds ascending offsets as uvarint deltas: a run
// of nearby offsets costs about a byte each; a cut or overflowing
// payload is refused.
func TestAckedRecord(t *testing.T) {
	offs := []uint64{0, 1, 2, 130, 1 << 40, 1<<40 + 1, 1<<40 + 1}
	pl := AppendAcked(nil, offs)
	if len(pl) > 16 {
		t.Fatalf("%d offsets took %d bytes", len(offs), len(pl))
	}
	var got []uint64
	if err := Acked(pl, func(off uint64) { got = append(got, off) }); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(offs, got); d != "" {
		t.Fatalf("acked offsets (-want +got):\n%s", d)
	}
	if err := Acked(pl[:len(pl)-3], func(uint64) {}); err == nil {
		t.Fatal("cut acked payload decoded")
	}
	over := binary.AppendUvarint(binary.AppendUvarint(nil, 1<<63), 1<<63)
	if err := Acked(over, func(uint64) {}); err == nil {
		t.Fatal("overflowing acked payload decoded")
	}
}

// A session record keeps its QoS 2 position in an extension after the
// subscriptions, written only when it lies below the cursor; a decoder
// skips extensions it does not know, and records without one read as
// before.
func TestSessionQoS2From(t *testing.T) {
	disc := time.Unix(1700000000, 0)
	subs := []Subscription{{Filter: "a/#", QoS: 2}}
	with := &Session{ClientID: "c", ExpiryInterval: 60, DisconnectedAt: disc, Cursor: 90, QoS2From: 41, Subscriptions: subs}
	b := appendSession(nil, with)
	got, err := decodeSession("c", b)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(with, got); d != "" {
		t.Fatalf("round trip (-want +got):\n%s", d)
	}
	without := *with
	without.QoS2From = 0
	plain := appendSession(nil, &without)
	if len(plain) != len(b)-11 {
		t.Fatalf("record without a QoS 2 position is %d bytes, want %d", len(plain), len(b)-11)
	}
	// An unknown extension is skipped.
	unknown := append(append([]byte(nil), plain...), 0x7f, 0, 3, 'x', 'y', 'z')
	unknown = append(unknown, b[len(plain):]...)
	if got, err := decodeSession("c", unknown); err != nil || got.QoS2From != 41 {
		t.Fatalf("with an unknown extension: %+v %v", got, err)
	}
	if _, err := decodeSession("c", append(plain, 1, 0)); err == nil {
		t.Fatal("a cut extension decoded")
	}
	// What a decoder from before reads of a record with the extension:
	// the fields it knows, in the same places.
	if binary.BigEndian.Uint64(b[1+4+8:]) != 90 {
		t.Fatal("cursor moved")
	}
}
