package shard

import (
	"strconv"
	"testing"
	"time"

	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

// TestReplayFrom: an MQTT 5 SUBSCRIBE with the berth-replay-from user
// property (a time or a log offset) first gets the stored messages
// matching its filter since then, then the live ones, in order, with no
// gap and no duplicate, while a publisher keeps publishing throughout.
func TestReplayFrom(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		from  func(mark time.Time) string
		first int // first old message expected
	}{
		{"time", func(mark time.Time) string { return mark.Format(time.RFC3339Nano) }, 5},
		{"offset zero", func(time.Time) string { return "0" }, 0},
		// Offsets: old-i is at 2i, "other" messages between them.
		{"offset", func(time.Time) string { return "4" }, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := openWALStore(t, t.TempDir(), wal.SyncInterval)
			b := startBrokerWith(t, newDurableShard(st))
			pub := v5Client(t, b, "pub")
			var mark time.Time
			for i := range 10 {
				if i == 5 {
					mark = time.Now()
				}
				pub.send(&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: []byte("h/x"), Payload: []byte("old-" + strconv.Itoa(i))})
				pub.ack(packet.TypePuback)
				// Another topic, which the replay must not deliver.
				pub.send(&packet.Publish{QoS: 1, PacketID: 1000, Topic: []byte("other"), Payload: []byte("no")})
				pub.ack(packet.TypePuback)
			}

			// Live messages race the SUBSCRIBE.
			const live = 200
			var burst []byte
			for i := range live {
				burst, _ = (&packet.Publish{QoS: 1, PacketID: uint16(100 + i), Topic: []byte("h/y"), Payload: []byte("live-" + strconv.Itoa(i))}).Append(burst, packet.Version5)
			}
			sub := v5Client(t, b, "replayer")
			go func() { _, _ = pub.nc.Write(burst) }()
			props := packet.Properties{UserProperties: []packet.UserProperty{{Key: []byte(ReplayProperty), Value: []byte(tc.from(mark))}}}
			sub.subscribe(1, props, packet.Subscription{Filter: []byte("h/#"), QoS: 1})

			// Old messages are all before the live ones in the log: the
			// expected stream is old from tc.first, then every live
			// message, but live ones published before the SUBSCRIBE are
			// replayed too; either way exactly once and in order.
			var want []string
			for i := tc.first; i < 10; i++ {
				want = append(want, "old-"+strconv.Itoa(i))
			}
			for i := range live {
				want = append(want, "live-"+strconv.Itoa(i))
			}
			for i, w := range want {
				p := sub.publish()
				if string(p.Payload) != w {
					t.Fatalf("message %d: got %q, want %q", i, p.Payload, w)
				}
				if p.QoS > 0 {
					sub.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
				}
			}
			sub.expectSilence(50 * time.Millisecond)
			for range live {
				pub.ack(packet.TypePuback)
			}
		})
	}
}

// TestReplayFromInvalid: a replay value that is neither an offset nor an
// RFC 3339 time is a protocol error.
func TestReplayFromInvalid(t *testing.T) {
	t.Parallel()
	st := openWALStore(t, t.TempDir(), wal.SyncNever)
	b := startBrokerWith(t, newDurableShard(st))
	sub := v5Client(t, b, "bad")
	props := packet.Properties{UserProperties: []packet.UserProperty{{Key: []byte(ReplayProperty), Value: []byte("yesterday")}}}
	sub.send(&packet.Subscribe{PacketID: 1, Props: props, Subscriptions: []packet.Subscription{{Filter: []byte("a")}}})
	sub.expectDisconnect(packet.ErrProtocol)
}
