package shard

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

// parked reports whether clientID's connection is parked: no goroutine
// reads it (park.go).
func (b *testBroker) parked(clientID string) bool {
	s := b.shard
	s.mu.RLock()
	defer s.mu.RUnlock()
	for c, attached := range s.conns {
		if attached && c.clientID == clientID {
			return c.pstate.Load() == readerParked
		}
	}
	return false
}

func waitParked(t testing.TB, b *testBroker, clientID string) {
	t.Helper()
	eventually(t, clientID+" parked", func() bool { return b.parked(clientID) })
}

func ping(c *rawClient) {
	c.t.Helper()
	c.send(&packet.Ping{Type: packet.TypePingreq})
	c.read(packet.TypePingresp)
}

// TestParkedConnectionServed: a parked connection is woken by its input
// (PINGREQ, PUBLISH), gets deliveries while parked, and parks again.
func TestParkedConnectionServed(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	sub := v5Client(t, b, "park-sub")
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("p/#"), QoS: 1})
	pub := v5Client(t, b, "park-pub")
	for i := range 3 {
		waitParked(t, b, "park-sub")
		waitParked(t, b, "park-pub")
		ping(sub)
		waitParked(t, b, "park-pub")
		pub.send(&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: []byte("p/x"), Payload: []byte{byte(i)}})
		pub.ack(packet.TypePuback)
		p := sub.publish()
		if len(p.Payload) != 1 || p.Payload[0] != byte(i) {
			t.Fatalf("delivery %d: payload %x", i, p.Payload)
		}
		sub.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
	}
}

// TestParkedConnectionEnds: every way a connection ends reaches a
// parked one, with its reason: keep alive (1.5 x, 0x8D), token expiry
// (0xA0), an administrative kick (0x98), a takeover (0x8E), a server
// shutdown (0x8B), a client that goes away (its will).
func TestParkedConnectionEnds(t *testing.T) {
	t.Parallel()
	t.Run("keep alive v5", func(t *testing.T) {
		t.Parallel()
		b := startBroker(t, Options{}, ConnInfo{})
		c := dialRaw(t, b.addr, packet.Version5)
		start := time.Now()
		c.connect(&packet.Connect{ClientID: []byte("ka5"), CleanStart: true, KeepAlive: 1})
		waitParked(t, b, "ka5")
		c.expectDisconnect(packet.ErrKeepAliveTimeout) // [MQTT-3.1.2-22]
		el := time.Since(start)
		t.Logf("closed %v after CONNECT (keep alive 1 s)", el)
		if el < 1400*time.Millisecond {
			t.Fatalf("closed after %v, before 1.5 x keep alive", el)
		}
	})
	t.Run("keep alive v3", func(t *testing.T) {
		t.Parallel()
		b := startBroker(t, Options{}, ConnInfo{})
		c := dialRaw(t, b.addr, packet.Version311)
		start := time.Now()
		c.connect(&packet.Connect{ClientID: []byte("ka3"), CleanStart: true, KeepAlive: 1})
		waitParked(t, b, "ka3")
		c.expectClosed() // [MQTT-3.1.2-24]
		if el := time.Since(start); el < 1400*time.Millisecond {
			t.Fatalf("closed after %v, before 1.5 x keep alive", el)
		}
	})
	t.Run("keep alive kept by pings", func(t *testing.T) {
		t.Parallel()
		b := startBroker(t, Options{}, ConnInfo{})
		c := dialRaw(t, b.addr, packet.Version311)
		c.connect(&packet.Connect{ClientID: []byte("ka-ping"), CleanStart: true, KeepAlive: 1})
		for range 4 { // 2.4 s, past 1.5 x keep alive since CONNECT
			waitParked(t, b, "ka-ping")
			time.Sleep(600 * time.Millisecond)
			ping(c)
		}
	})
	parkedEnds(t, "", waitParked)
	t.Run("will", func(t *testing.T) {
		t.Parallel()
		b := startBroker(t, Options{}, ConnInfo{})
		watch := v5Client(t, b, "watch")
		watch.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("will/#"), QoS: 1})
		for _, delay := range []uint32{0, 1} {
			id := fmt.Sprintf("gone%d", delay)
			c := dialRaw(t, b.addr, packet.Version5)
			c.connect(willConnect(id, packet.Version5, delay, 60))
			waitParked(t, b, id)
			closed := time.Now()
			_ = c.nc.Close()
			p := watch.publish()
			el := time.Since(closed)
			if string(p.Topic) != "will/"+id {
				t.Fatalf("will on %q, want will/%s", p.Topic, id)
			}
			watch.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
			t.Logf("will delay %d s: will published %v after the close", delay, el)
			if delay > 0 && el < 900*time.Millisecond {
				t.Fatalf("will with delay %d s published after %v", delay, el)
			}
		}
	})
}

// parkedEnds runs the ways a connection ends that TestParkedConnectionEnds
// and TestDetachedConnectionEnds share, each on a connection wait has
// seen parked (or detached): token expiry (0xA0), an administrative kick
// (0x98), a takeover (0x8E) and a server shutdown (0x8B; 3.1.1 closed).
// Client ids start with prefix.
func parkedEnds(t *testing.T, prefix string, wait func(testing.TB, *testBroker, string)) {
	t.Run("token expiry", func(t *testing.T) {
		t.Parallel()
		b := startBroker(t, Options{}, ConnInfo{Deadline: time.Now().Add(time.Second)})
		c := v5Client(t, b, prefix+"expiring")
		wait(t, b, prefix+"expiring")
		c.expectDisconnect(packet.ErrMaximumConnectTime)
	})
	t.Run("kick", func(t *testing.T) {
		t.Parallel()
		b := startBroker(t, Options{}, ConnInfo{})
		c := v5Client(t, b, prefix+"kicked")
		wait(t, b, prefix+"kicked")
		if err := b.shard.Kick(prefix+"kicked", false); err != nil {
			t.Fatal(err)
		}
		c.expectDisconnect(packet.ErrAdministrativeAction)
	})
	t.Run("takeover", func(t *testing.T) {
		t.Parallel()
		b := startBroker(t, Options{}, ConnInfo{})
		old := v5Client(t, b, prefix+"dup")
		wait(t, b, prefix+"dup")
		nw := v5Client(t, b, prefix+"dup")
		old.expectDisconnect(packet.ErrSessionTakenOver)
		ping(nw)
	})
	t.Run("shutdown", func(t *testing.T) {
		t.Parallel()
		b := startBroker(t, Options{}, ConnInfo{})
		c5 := v5Client(t, b, prefix+"s5")
		c3 := dialRaw(t, b.addr, packet.Version311)
		c3.connectOK(prefix + "s3")
		wait(t, b, prefix+"s5")
		wait(t, b, prefix+"s3")
		if err := b.shard.Shutdown(t.Context()); err != nil {
			t.Fatal(err)
		}
		c5.expectDisconnect(packet.ErrServerShuttingDown)
		c3.expectClosed()
	})
}

// TestParkingRace: connections whose input comes just before, while or
// just after they park (parkAfter) each get every answer: input arriving
// while a reader parks is never lost, and no two goroutines read one
// connection (the race detector watches).
func TestParkingRace(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	const conns, rounds = 100, 15
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := range conns {
		c := dialRaw(t, b.addr, packet.Version311)
		c.connectOK(fmt.Sprintf("race-%d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				time.Sleep(parkAfter/2 + rand.N(parkAfter)) // around the park
				b, _ := (&packet.Ping{Type: packet.TypePingreq}).Append(nil, packet.Version311)
				if _, err := c.nc.Write(b); err != nil {
					errs <- err
					return
				}
				fh, _, err := c.next()
				if err == nil && fh.Type != packet.TypePingresp {
					err = fmt.Errorf("got %v, want PINGRESP", fh.Type)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
