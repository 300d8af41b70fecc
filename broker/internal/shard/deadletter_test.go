package shard

import (
	"strings"
	"testing"
	"time"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

// A QoS 1 message dropped for one subscriber (here: larger than its
// Maximum Packet Size) is published to $berth/dlq/too_large, seen only by
// subscribers of that topic; the dead letter, dropped again for the same
// subscriber, is not dead-lettered a second time.
func TestDeadLetters(t *testing.T) {
	for _, on := range []bool{true, false} {
		name := map[bool]string{true: "on", false: "off"}[on]
		t.Run(name, func(t *testing.T) {
			b := startBroker(t, Options{DeadLetters: on}, ConnInfo{})
			tiny := dialRaw(t, b.addr, packet.Version5)
			cp := &packet.Connect{ClientID: []byte("tiny"), CleanStart: true}
			cp.Props.Has.Set(packet.PropMaximumPacketSize)
			cp.Props.MaximumPacketSize = 64
			if ack := tiny.connect(cp); ack.Reason != packet.CodeSuccess {
				t.Fatalf("CONNACK %v", ack.Reason)
			}
			tiny.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("jobs/#"), QoS: 1},
				packet.Subscription{Filter: []byte("$berth/dlq/#"), QoS: 1})
			watcher := v5Client(t, b, "watcher")
			watcher.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("$berth/dlq/#"), QoS: 1})
			all := v5Client(t, b, "all")
			all.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("#"), QoS: 1})

			pub := v5Client(t, b, "pub")
			payload := make([]byte, 200)
			pub.send(&packet.Publish{QoS: 1, PacketID: 1, Topic: []byte("jobs/big"), Payload: payload})
			pub.ack(packet.TypePuback)

			if p := all.publish(); string(p.Topic) != "jobs/big" {
				t.Fatalf("'#' subscriber got %q, want jobs/big", p.Topic)
			}
			if !on {
				watcher.expectSilence(300 * time.Millisecond)
				return
			}
			p := watcher.publish()
			if string(p.Topic) != "$berth/dlq/too_large" || len(p.Payload) != len(payload) || p.QoS != 1 {
				t.Fatalf("dead letter %q qos %d with %d bytes, want $berth/dlq/too_large qos 1 with %d", p.Topic, p.QoS, len(p.Payload), len(payload))
			}
			props := map[string]string{}
			for _, up := range p.Props.UserProperties {
				props[string(up.Key)] = string(up.Value)
			}
			if props["berth-dlq-topic"] != "jobs/big" || props["berth-dlq-client"] != "tiny" || props["berth-dlq-reason"] != "too_large" {
				t.Fatalf("dead letter properties %v", props)
			}
			watcher.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
			// tiny could not take the dead letter either: dropped, not looped.
			watcher.expectSilence(300 * time.Millisecond)
			all.expectSilence(100 * time.Millisecond) // '#' never matches '$' topics [MQTT-4.7.2-1]
			if n := b.shard.Stats().Dropped["too_large"]; n != 2 {
				t.Fatalf("too_large drops %d, want 2 (the message, then its dead letter)", n)
			}

			// Clients cannot forge dead letters.
			pub.send(&packet.Publish{QoS: 1, PacketID: 2, Topic: []byte("$berth/dlq/queue_full"), Payload: []byte("fake")})
			if a := pub.ack(packet.TypePuback); a.Reason != packet.ErrNotAuthorized {
				t.Fatalf("publish to $berth/dlq: PUBACK %v, want 0x87", a.Reason)
			}
			watcher.expectSilence(100 * time.Millisecond)
		})
	}
}

// The check every inbound PUBLISH pays for the dead-letter namespace
// allocates nothing, however long the topic.
func TestDeadLetterTopicCheckAllocatesNothing(t *testing.T) {
	long := []byte("devices/0123456789abcdef/telemetry/temperature/celsius")
	forged := []byte("$berth/dlq/queue_full")
	if isDeadLetterTopic(long) || !isDeadLetterTopic(forged) || isDeadLetterTopic([]byte("$berth")) {
		t.Fatal("isDeadLetterTopic misjudges")
	}
	if n := testing.AllocsPerRun(1000, func() { isDeadLetterTopic(long); isDeadLetterTopic(forged) }); n != 0 {
		t.Fatalf("%v allocations per check, want 0", n)
	}
}

// A message kept for an offline session only in the message log is read
// back from the log for its dead letter.
func TestDeadLetterOfALoggedMessage(t *testing.T) {
	st, err := store.OpenWAL(store.WALOptions{Dir: t.TempDir(), Fsync: wal.SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() }) // after the shard's shutdown
	b := startBroker(t, Options{Store: st, MessageLog: st.Messages(), DeadLetters: true}, ConnInfo{})
	tinyConnect := func(clean bool) *rawClient {
		c := dialRaw(t, b.addr, packet.Version5)
		cp := &packet.Connect{ClientID: []byte("tiny"), CleanStart: clean}
		cp.Props.Has.Set(packet.PropMaximumPacketSize)
		cp.Props.MaximumPacketSize = 64
		cp.Props.Has.Set(packet.PropSessionExpiry)
		cp.Props.SessionExpiry = 3600
		if ack := c.connect(cp); ack.Reason != packet.CodeSuccess {
			t.Fatalf("CONNACK %v", ack.Reason)
		}
		return c
	}
	tiny := tinyConnect(true)
	tiny.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("jobs/#"), QoS: 1})
	tiny.send(&packet.Disconnect{})
	tiny.expectClosed()
	eventually(t, "tiny offline", func() bool { st, _ := b.shard.SessionStats("tiny"); return !st.Connected })

	watcher := v5Client(t, b, "watcher")
	watcher.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("$berth/dlq/#"), QoS: 1})
	pub := v5Client(t, b, "pub")
	payload := []byte(strings.Repeat("x", 200))
	pub.send(&packet.Publish{QoS: 1, PacketID: 1, Topic: []byte("jobs/big"), Payload: payload})
	pub.ack(packet.TypePuback)

	tinyConnect(false) // the stored message is too large for it now
	p := watcher.publish()
	if string(p.Topic) != "$berth/dlq/too_large" || string(p.Payload) != string(payload) {
		t.Fatalf("dead letter %q with %d bytes, want $berth/dlq/too_large with the logged payload", p.Topic, len(p.Payload))
	}
}
