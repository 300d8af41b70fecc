package shard

import (
	"fmt"
	"testing"

	"berth.dev/broker/packet"
)

// TestParkedSoonAfterConnect: a connection that has sent nothing since
// its CONNECT parks (and detaches) after parkAfterConnect, without waiting
// parkAfter on its goroutine, so a connect storm keeps no goroutine per
// connection alive for parkAfter (docs/idle-connections.md, "Parked soon
// after CONNECT"). It still answers what it is sent next; a connection that
// has since sent something else waits parkAfter before parking, as a
// busy one must. Counts, not times: the shard's probe counts the waits.
func TestParkedSoonAfterConnect(t *testing.T) {
	t.Parallel()
	pr := new(probe)
	b := startBroker(t, Options{probe: pr}, ConnInfo{})
	const n = 200
	clients := connectMany(t, b, "storm", n)
	for i := range clients {
		waitDetached(t, b, fmt.Sprintf("storm-%d", i))
	}
	if got := pr.waits.Load(); got != 0 {
		t.Errorf("%d connections quiet since CONNECT waited parkAfter on their goroutine before parking, want none", got)
	}

	// The next packet wakes it as usual; it makes the connection busy.
	c := clients[0]
	if got := c.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("storm/#")}); len(got) != 1 || got[0] != 0 {
		t.Fatalf("SUBACK %v, want granted QoS 0", got)
	}
	eventually(t, "the busy reader's parkAfter wait", func() bool { return pr.waits.Load() > 0 })
	waitParked(t, b, "storm-0")
	clients[1].send(&packet.Publish{Topic: []byte("storm/x"), Payload: []byte("after the storm")})
	fh, body := c.read(packet.TypePublish)
	var p packet.Publish
	if err := p.Decode(c.version, fh, body); err != nil || string(p.Payload) != "after the storm" {
		t.Fatalf("delivery %q, %v", p.Payload, err)
	}
}
