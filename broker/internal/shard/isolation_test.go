package shard

import (
	"testing"
	"time"

	"berth.dev/broker/packet"
)

// TestTenantIsolation runs two shards in one process: a '#' subscriber in
// one never sees the other's messages, and the same client id in both is
// two independent sessions, not a takeover.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	a := startBroker(t, Options{}, ConnInfo{TenantID: "a"})
	b := startBroker(t, Options{}, ConnInfo{TenantID: "b"})
	subA := v5Client(t, a, "device")
	subA.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("#")})
	subB := v5Client(t, b, "device") // same id, other tenant
	subB.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("#")})

	pubB := v5Client(t, b, "pub")
	pubB.send(&packet.Publish{Retain: true, Topic: []byte("b/only"), Payload: []byte("B")})
	if p := subB.publish(); string(p.Payload) != "B" {
		t.Fatalf("tenant b got %q", p.Payload)
	}
	subA.expectSilence(150 * time.Millisecond)
	if a.shard.Stats().Retained != 0 || b.shard.Stats().Retained != 1 {
		t.Fatal("retained message crossed tenants")
	}
	subA.send(&packet.Ping{Type: packet.TypePingreq}) // still connected: no takeover
	subA.read(packet.TypePingresp)
}
