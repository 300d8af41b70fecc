package shard

import (
	"context"
	"testing"
	"time"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/packet"
)

// TestStateSurvivesShardRestart runs two shards, one after the other, on
// the same Store: persistent sessions (with their subscriptions) and
// retained messages come back.
func TestStateSurvivesShardRestart(t *testing.T) {
	t.Parallel()
	st := store.NewMemory()
	t.Cleanup(func() { _ = st.Close() })

	first := New(Options{Store: st, SysInterval: -1})
	b1 := startBrokerWith(t, first)
	c := dialRaw(t, b1.addr, packet.Version5)
	c.connect(sessionConnect("keeper", 3600, true))
	c.subscribe(1, packet.Properties{SubscriptionIDs: []uint32{5}}, packet.Subscription{Filter: []byte("keep/#"), QoS: 1})
	c.send(&packet.Publish{QoS: 1, PacketID: 2, Retain: true, Topic: []byte("keep/r"), Payload: []byte("R")})
	// Its own message comes back to it; PUBACK and PUBLISH in either order.
	for range 2 {
		if fh, _ := c.next2(t); fh.Type != packet.TypePuback && fh.Type != packet.TypePublish {
			t.Fatalf("unexpected %v", fh.Type)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := first.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	second := New(Options{Store: st, SysInterval: -1})
	b2 := startBrokerWith(t, second)
	if _, ok := second.SessionStats("keeper"); !ok {
		t.Fatal("session not restored")
	}
	again := dialRaw(t, b2.addr, packet.Version5)
	if ack := again.connect(sessionConnect("keeper", 3600, false)); !ack.SessionPresent {
		t.Fatal("session not present after restart")
	}
	pub := v5Client(t, b2, "keeper-pub")
	pub.send(&packet.Publish{Topic: []byte("keep/live"), Payload: []byte("L")})
	p := again.publish()
	if string(p.Payload) != "L" || len(p.Props.SubscriptionIDs) != 1 || p.Props.SubscriptionIDs[0] != 5 {
		t.Fatalf("got %q ids %v", p.Payload, p.Props.SubscriptionIDs)
	}
	late := v5Client(t, b2, "late")
	late.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("keep/r")})
	if p := late.publish(); string(p.Payload) != "R" || !p.Retain {
		t.Fatalf("retained after restart: %q", p.Payload)
	}
}
