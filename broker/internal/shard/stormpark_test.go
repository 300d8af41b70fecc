package shard

import (
	"fmt"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

// TestStormParksAtOnce: in a connect storm (handshakes waiting in the
// queue) a connection quiet since its CONNECT parks at once, on the
// handshake worker (no goroutine of its own) and without its
// parkAfterConnect wait, and no more readers than the shard's handshake
// workers are in that wait at once; a client that
// connects alone, before and after the storm, still waits
// parkAfterConnect (docs/idle-connections.md, "Parked at once in a
// storm"). Counts, not times: the shard's probe counts the waits. The old
// shard gave every one of the storm's connections its wait.
func TestStormParksAtOnce(t *testing.T) {
	pr := new(probe)
	const slots, n = 1, 500
	b := startBroker(t, Options{probe: pr, handshakes: slots, ConnectTimeout: time.Minute}, ConnInfo{})

	alone := func(id string) {
		t.Helper()
		before := pr.connectWaitsAll.Load()
		c := dialRaw(t, b.addr, packet.Version311)
		c.connectOK(id)
		waitDetached(t, b, id)
		if got := pr.connectWaitsAll.Load() - before; got != 1 {
			t.Errorf("%s, connecting alone: %d parkAfterConnect waits, want 1", id, got)
		}
	}
	alone("before")

	ncs := dialSilent(t, b, n)
	before := pr.connectWaitsAll.Load()
	connectAtOnce(t, ncs, "storm")
	for i := range n {
		waitDetached(t, b, fmt.Sprintf("storm-%d", i))
	}
	waits := pr.connectWaitsAll.Load() - before
	t.Logf("storm of %d CONNECTs on %d worker: %d parkAfterConnect waits, at most %d at once; %d parked on the worker",
		n, slots, waits, pr.connectWaitsPeak.Load(), pr.parkedNows.Load())
	if got := pr.parkedNows.Load(); got < n/2 {
		t.Errorf("%d of the storm's %d readers parked on the handshake worker, want at least %d: the rest started a goroutine each", got, n, n/2)
	}
	if waits > n/10 {
		t.Errorf("%d of the storm's %d connections waited parkAfterConnect on a goroutine, want at most %d", waits, n, n/10)
	}
	if got := pr.connectWaitsPeak.Load(); got > slots {
		t.Errorf("%d readers in their parkAfterConnect wait at once, want at most %d", got, slots)
	}

	alone("after") // the storm's waits all ended: the count is back to none

	// A storm's connection still answers what it is sent next.
	c := dialRaw(t, b.addr, packet.Version311)
	c.connectOK("sub")
	if got := c.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("storm/#")}); len(got) != 1 || got[0] != 0 {
		t.Fatalf("SUBACK %v, want granted QoS 0", got)
	}
	s0 := &rawClient{t: t, nc: ncs[0], rd: packet.NewReader(ncs[0], 1024), version: packet.Version311}
	s0.send(&packet.Publish{Topic: []byte("storm/x"), Payload: []byte("from the storm")})
	fh, body := c.read(packet.TypePublish)
	var p packet.Publish
	if err := p.Decode(c.version, fh, body); err != nil || string(p.Payload) != "from the storm" {
		t.Fatalf("delivery %q, %v", p.Payload, err)
	}
}
