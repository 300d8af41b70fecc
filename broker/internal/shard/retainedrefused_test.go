package shard

import (
	"slices"
	"strconv"
	"testing"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

// A retained PUBLISH the message log refuses (a full disk, a failed
// fsync) is not acknowledged, so it must not become the topic's retained
// message either: a new subscription is shown the retained message from
// before (or none), and the store keeps that one.

// retainedShown subscribes a new client (id) to ret/# and returns the payloads
// of the retained messages it is sent. A PINGREQ round trip makes sure
// the SUBSCRIBE (and its retained messages) was handled; a QoS 0 marker
// published after it, queued behind them, ends the wait.
func retainedShown(t *testing.T, b *testBroker, id string) []string {
	t.Helper()
	sub := v5Client(t, b, "shown-"+id)
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("ret/#"), QoS: 1})
	var shown []string
	sub.send(&packet.Ping{Type: packet.TypePingreq})
	marker := v5Client(t, b, "marker-"+id)
	pinged := false
	for {
		fh, body, err := sub.next()
		if err != nil {
			t.Fatalf("subscriber: %v (retained so far %q)", err, shown)
		}
		switch fh.Type {
		case packet.TypePingresp:
			pinged = true
			marker.send(&packet.Publish{Topic: []byte("ret/end"), Payload: []byte("end")})
			continue
		case packet.TypePublish:
		default:
			t.Fatalf("subscriber got %v", fh.Type)
		}
		var p packet.Publish
		if err := p.Decode(packet.Version5, fh, body); err != nil {
			t.Fatal(err)
		}
		if p.QoS == 1 {
			sub.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
		}
		if pinged && string(p.Payload) == "end" && !p.Retain {
			return shown
		}
		if p.Retain {
			shown = append(shown, string(p.Payload))
		}
	}
}

// storedRetained returns the payloads of the shard's stored retained
// messages.
func storedRetained(t *testing.T, b *testBroker) []string {
	t.Helper()
	var got []string
	if err := b.shard.store.Retained(func(m *store.Message) bool {
		got = append(got, string(m.Payload))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	return got
}

// retainQoS sends a retained QoS 1/2 PUBLISH on ret/t and returns the
// reason of its PUBACK/PUBREC (completing a successful QoS 2 flow).
func retainQoS(c *rawClient, qos byte, id uint16, payload string) packet.ReasonCode {
	c.t.Helper()
	return c.publishAcked(&packet.Publish{QoS: qos, PacketID: id, Retain: true, Topic: []byte("ret/t"), Payload: []byte(payload)})
}

// TestRefusedRetainedNotRetained fills the message log's disk under a
// publisher of retained messages, with the default fsync policy and with
// -fsync always: its retained QoS 1 and QoS 2 PUBLISHes, and a retained
// removal (empty payload), are refused with 0x97, and a new subscription
// is still shown the retained message acknowledged before, which the store
// still holds. When space returns a retained PUBLISH replaces it. Before
// the fix the retained message was stored and shown ahead of the append,
// so the refused one replaced it.
func TestRefusedRetainedNotRetained(t *testing.T) {
	for _, policy := range []wal.Policy{wal.SyncInterval, wal.SyncAlways} {
		t.Run(policy.String(), func(t *testing.T) {
			t.Parallel()
			b, dfs := faultyShard(t, policy)
			pub := v5Client(t, b, "ret-pub")
			if r := retainQoS(pub, 1, 1, "kept"); r >= 0x80 {
				t.Fatalf("before the fault: %v", r)
			}
			dfs.full.Store(true)
			for i, qos := range []byte{1, 2} {
				if r := retainQoS(pub, qos, uint16(2+i), "refused-"+strconv.Itoa(int(qos))); r != packet.ErrQuotaExceeded {
					t.Fatalf("retained QoS %d PUBLISH on a full disk: %v, want 0x97", qos, r)
				}
			}
			if r := retainQoS(pub, 1, 4, ""); r != packet.ErrQuotaExceeded {
				t.Fatalf("retained removal on a full disk: %v, want 0x97", r)
			}
			if got := retainedShown(t, b, "full"); !slices.Equal(got, []string{"kept"}) {
				t.Fatalf("a new subscription is shown %q while the disk is full, want only the acknowledged [kept]", got)
			}
			if got := storedRetained(t, b); !slices.Equal(got, []string{"kept"}) {
				t.Fatalf("retained store holds %q, want [kept]", got)
			}

			dfs.full.Store(false)
			if r := retainQoS(pub, 1, 5, "after"); r >= 0x80 {
				t.Fatalf("once space returned: %v", r)
			}
			if got := retainedShown(t, b, "after"); !slices.Equal(got, []string{"after"}) {
				t.Fatalf("once space returned a new subscription is shown %q, want [after]", got)
			}
			t.Logf("FAULT disk full (%v), retained: 3 refused with 0x97, the acknowledged retained message kept, replaced once space returned", policy)
		})
	}
}

// TestRetainedFsyncErrorNotRetained: -fsync always. The message log's
// fsync fails under a retained QoS 1 PUBLISH: its publisher is
// disconnected unacknowledged (0x80), and the next retained PUBLISH is
// refused by the log (the error is sticky); a new subscription is shown
// the retained message from before the fault, never either of them.
// Before the fix the first was retained (and shown) before it was logged.
func TestRetainedFsyncErrorNotRetained(t *testing.T) {
	t.Parallel()
	b, dfs := faultyShard(t, wal.SyncAlways)
	pub := v5Client(t, b, "ret-pub")
	if r := retainQoS(pub, 1, 1, "kept"); r >= 0x80 {
		t.Fatalf("before the fault: %v", r)
	}
	dfs.syncErr.Store(true)
	pub.send(&packet.Publish{QoS: 1, PacketID: 2, Retain: true, Topic: []byte("ret/t"), Payload: []byte("unsynced")})
	if r := readUntilClosed(t, pub, "-"); r != packet.ErrUnspecified {
		t.Fatalf("publisher: DISCONNECT %v, want 0x80", r)
	}
	again := v5Client(t, b, "ret-pub-2")
	if r := retainQoS(again, 1, 1, "refused"); r != packet.ErrUnspecified {
		t.Fatalf("retained PUBLISH after the fsync error: %v, want 0x80", r)
	}
	dfs.syncErr.Store(false)
	if got := retainedShown(t, b, "eio"); !slices.Equal(got, []string{"kept"}) {
		t.Fatalf("a new subscription is shown %q, want only the acknowledged [kept]", got)
	}
	if got := storedRetained(t, b); !slices.Equal(got, []string{"kept"}) {
		t.Fatalf("retained store holds %q, want [kept]", got)
	}
}
