package shard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/eclipse/paho.mqtt.golang"

	"berth.dev/broker/packet"
)

// detached reports whether clientID's connection is parked without its
// net.Conn (detach.go).
func (b *testBroker) detached(clientID string) bool {
	s := b.shard
	s.mu.RLock()
	defer s.mu.RUnlock()
	for c, attached := range s.conns {
		if attached && c.clientID == clientID {
			c.sess.mu.Lock()
			defer c.sess.mu.Unlock()
			return c.pstate.Load() == readerParked && !c.attachedLocked()
		}
	}
	return false
}

func waitDetached(t testing.TB, b *testBroker, clientID string) {
	t.Helper()
	eventually(t, clientID+" detached", func() bool { return b.detached(clientID) })
}

// openFDs counts the process's open descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// pingDetached makes a connection that had write state (a SUBACK, a
// delivery) park without its net.Conn: the batch sweeps give its write
// state back, and a PINGREQ wakes it for nothing else, so that it parks
// detached, once any writer goroutine has gone.
func pingDetached(t testing.TB, b *testBroker, c *rawClient, clientID string) {
	t.Helper()
	eventually(t, clientID+" detached after a PINGREQ", func() bool {
		b.shard.sweepBatches()
		b.shard.sweepBatches()
		ping(c)
		for range 40 {
			if b.detached(clientID) {
				return true
			}
			time.Sleep(5 * time.Millisecond)
		}
		return false
	})
}

// expectNoEOF checks that the peer of a detached connection sees neither
// an end of stream nor a reset: closing the broker's net.Conn while the
// dup holds the socket sends nothing.
func expectNoEOF(c *rawClient) {
	c.t.Helper()
	c.expectSilence(100 * time.Millisecond)
}

// TestDetachedConnectionServed: a connection quiet since CONNECT, or
// woken only by PINGREQs since, parks without its net.Conn; the client
// sees nothing of it (no FIN, no reset), its PINGREQ is answered, and a
// QoS 0 and a QoS 1 message published to it while it is detached are
// written to it inline, on the duplicated descriptor, without the
// connection being attached; its PUBACK attaches it. MQTT 3.1.1 and 5.0.
func TestDetachedConnectionServed(t *testing.T) {
	t.Parallel()
	for _, v := range []byte{packet.Version311, packet.Version5} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			t.Parallel()
			b := startBroker(t, Options{}, ConnInfo{})
			sub := dialRaw(t, b.addr, v)
			sub.connectOK("det-sub")
			waitDetached(t, b, "det-sub") // quiet since CONNECT
			expectNoEOF(sub)
			ping(sub)
			waitDetached(t, b, "det-sub")
			sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("det/#"), QoS: 1})
			pingDetached(t, b, sub, "det-sub") // woken for a PINGREQ alone: parks without its socket again
			pub := v5Client(t, b, "det-pub")
			for i, qos := range []byte{0, 1} {
				pub.send(&packet.Publish{QoS: qos, PacketID: uint16(i) * uint16(qos), Topic: []byte("det/x"), Payload: []byte{qos}})
				if qos == 1 {
					pub.ack(packet.TypePuback)
				}
				p := sub.publish()
				if p.QoS != qos || len(p.Payload) != 1 || p.Payload[0] != qos {
					t.Fatalf("delivery %d: QoS %d payload %x", i, p.QoS, p.Payload)
				}
				if !b.detached("det-sub") {
					t.Fatal("an inline delivery attached the connection")
				}
				if qos == 1 {
					sub.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
				}
			}
			waitParked(t, b, "det-sub")
			pingDetached(t, b, sub, "det-sub")
			ping(sub)
			if b.shard.Stats().ClientsConnected != 2 {
				t.Fatalf("%d connections", b.shard.Stats().ClientsConnected)
			}
		})
	}
}

// TestDetachedConnectionEnds: every way a connection ends reaches one
// parked without its net.Conn, with its reason, as TestParkedConnectionEnds
// checks for a parked one: keep alive (3.1.1 closed, 5.0 0x8D), token
// expiry (0xA0), an administrative kick (0x98), a takeover (0x8E), a
// server shutdown (0x8B), the peer's close and reset (its will).
func TestDetachedConnectionEnds(t *testing.T) {
	t.Parallel()
	t.Run("keep alive", func(t *testing.T) {
		t.Parallel()
		b := startBroker(t, Options{}, ConnInfo{})
		c5 := dialRaw(t, b.addr, packet.Version5)
		c5.connect(&packet.Connect{ClientID: []byte("dka5"), CleanStart: true, KeepAlive: 1})
		c3 := dialRaw(t, b.addr, packet.Version311)
		c3.connect(&packet.Connect{ClientID: []byte("dka3"), CleanStart: true, KeepAlive: 1})
		start := time.Now()
		waitDetached(t, b, "dka5")
		waitDetached(t, b, "dka3")
		c5.expectDisconnect(packet.ErrKeepAliveTimeout) // [MQTT-3.1.2-22]
		c3.expectClosed()                               // [MQTT-3.1.2-24]
		t.Logf("both closed %v after CONNECT (keep alive 1 s)", time.Since(start))
	})
	parkedEnds(t, "d", waitDetached)
	t.Run("peer gone", func(t *testing.T) {
		t.Parallel()
		b := startBroker(t, Options{}, ConnInfo{})
		watch := v5Client(t, b, "dwatch")
		watch.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("will/#"), QoS: 1})
		for _, reset := range []bool{false, true} {
			id := fmt.Sprintf("dgone-%v", reset)
			c := dialRaw(t, b.addr, packet.Version5)
			c.connect(willConnect(id, packet.Version5, 0, 60))
			waitDetached(t, b, id)
			if reset {
				_ = c.nc.(*net.TCPConn).SetLinger(0) // RST
			}
			_ = c.nc.Close()
			p := watch.publish()
			if string(p.Topic) != "will/"+id {
				t.Fatalf("will on %q, want will/%s", p.Topic, id)
			}
			watch.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
		}
		eventually(t, "the gone connections ended", func() bool { return b.shard.Stats().ClientsConnected == 1 })
	})
}

// TestEndFindsDetached: End finds a connection parked without its
// net.Conn by the bare socket handed to Serve, and after it was rebuilt.
func TestEndFindsDetached(t *testing.T) {
	t.Parallel()
	sh := New(Options{SysInterval: -1, Poller: newTestPoller(t)})
	addr, conns := serveCapturing(t, sh, ConnInfo{AllowAnonymous: true})
	b := &testBroker{shard: sh, addr: addr}
	for i, wake := range []bool{false, true} {
		id := fmt.Sprintf("end-det-%d", i)
		c := v5Client(t, b, id)
		nc := <-conns
		waitDetached(t, b, id)
		if wake {
			c.send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte("e/x")}}})
			c.read(packet.TypeSuback) // attached on a new net.Conn, then parked with it
			waitParked(t, b, id)
		}
		if !sh.End(nc, packet.ErrNotAuthorized) {
			t.Fatal("End did not find the connection")
		}
		c.expectDisconnect(packet.ErrNotAuthorized)
	}
}

// TestDetachPaho: real clients (paho.mqtt.golang 3.1.1, paho.golang 5.0)
// whose connections park without their net.Conn keep working: their keep
// alive PINGREQs are answered, and QoS 0 and 1 messages reach them.
func TestDetachPaho(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	got3 := make(chan mqtt.Message, 10)
	c3 := paho3(t, b, "det-paho3", true, func(o *mqtt.ClientOptions) {
		o.SetKeepAlive(time.Second).SetPingTimeout(2 * time.Second)
	})
	wait3(t, c3.Subscribe("dp/#", 1, func(_ mqtt.Client, m mqtt.Message) { got3 <- m }))
	c5, got5 := paho5(t, b, &paho.Connect{ClientID: "det-paho5", CleanStart: true, KeepAlive: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c5.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "dp/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	pub := v5Client(t, b, "det-paho-pub")
	for round := range 2 {
		// Their keep-alive pings (every second) wake them for PINGREQs
		// alone: they park without their socket once their write state
		// went back.
		eventually(t, "paho clients detached", func() bool {
			b.shard.sweepBatches()
			return b.detached("det-paho3") && b.detached("det-paho5")
		})
		for qos := range byte(2) {
			pub.send(&packet.Publish{QoS: 1, PacketID: uint16(round*2 + int(qos) + 1), Topic: []byte("dp/x"), Payload: []byte{byte(round), qos}})
			pub.ack(packet.TypePuback)
			select {
			case m := <-got3:
				if string(m.Payload()) != string([]byte{byte(round), qos}) {
					t.Fatalf("3.1.1 got %x", m.Payload())
				}
			case <-ctx.Done():
				t.Fatal("3.1.1 client got nothing")
			}
			select {
			case p := <-got5:
				if string(p.Payload) != string([]byte{byte(round), qos}) {
					t.Fatalf("5.0 got %x", p.Payload)
				}
			case <-ctx.Done():
				t.Fatal("5.0 client got nothing")
			}
		}
	}
	if !c3.IsConnectionOpen() {
		t.Fatal("the 3.1.1 client lost its connection")
	}
}

// TestDetachRace: a thousand connections parking without their net.Conn
// and attaching again in a loop (a PINGREQ around the moment each parks),
// while a publisher's messages reach them inline on the dup or through a
// writer that attaches: every PINGREQ is answered, every message
// delivered, no goroutine reads a socket another detached (the race
// detector watches), and no descriptor is left behind.
//
// Not parallel: it counts the process's descriptors.
func TestDetachRace(t *testing.T) {
	b := startBroker(t, Options{}, ConnInfo{})
	fdsBefore := openFDs(t)
	const conns, rounds, perConn = 1000, 4, 3
	clients := make([]*rawClient, conns)
	for i := range clients {
		c := dialRaw(t, b.addr, packet.Version311)
		c.connectOK(fmt.Sprintf("drace-%d", i))
		c.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte(fmt.Sprintf("drace/%d", i))})
		clients[i] = c
	}
	pub := v5Client(t, b, "drace-pub")
	// One bound for every read and write below, for a hang: the clients'
	// own (5 s from their last call) would measure how fast a thousand
	// connections are set up and served, which CI's load sets.
	end := time.Now().Add(2 * time.Minute)
	for _, c := range append(clients, pub) {
		_ = c.nc.SetDeadline(end)
	}
	var wg sync.WaitGroup
	var failed atomic.Bool
	errs := make(chan error, conns+1)
	fail := func(err error) {
		failed.Store(true)
		errs <- err
	}
	wg.Add(1)
	go func() { // QoS 0 deliveries to every client, QoS 1 from the publisher
		defer wg.Done()
		for k := range perConn {
			for i := range conns {
				if failed.Load() {
					return
				}
				b, _ := (&packet.Publish{QoS: 1, PacketID: uint16(k*conns + i + 1), Topic: []byte(fmt.Sprintf("drace/%d", i)), Payload: []byte{byte(k)}}).Append(nil, packet.Version5)
				if _, err := pub.nc.Write(b); err != nil {
					fail(err)
					return
				}
				if _, _, err := pub.rd.ReadPacket(0); err != nil { // its PUBACK
					fail(err)
					return
				}
			}
		}
	}()
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := 0
			ping, _ := (&packet.Ping{Type: packet.TypePingreq}).Append(nil, packet.Version311)
			for range rounds {
				time.Sleep(rand.N(2 * time.Millisecond)) // around the park that follows a PINGRESP
				if _, err := c.nc.Write(ping); err != nil {
					fail(err)
					return
				}
				for {
					fh, _, err := c.rd.ReadPacket(0)
					if err != nil {
						fail(err)
						return
					}
					if fh.Type == packet.TypePublish {
						got++
						continue
					}
					if fh.Type != packet.TypePingresp {
						fail(fmt.Errorf("got %v", fh.Type))
						return
					}
					break
				}
			}
			for got < perConn {
				fh, _, err := c.rd.ReadPacket(0)
				if err != nil {
					fail(fmt.Errorf("%d of %d messages: %w", got, perConn, err))
					return
				}
				if fh.Type == packet.TypePublish {
					got++
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d of %d connections detached at the end", b.shard.Detached(), conns)
	for _, c := range clients {
		_ = c.nc.Close()
	}
	_ = pub.nc.Close()
	eventually(t, "every connection ended", func() bool { return b.shard.Stats().ClientsConnected == 0 })
	eventually(t, "no descriptor left behind", func() bool { return openFDs(t) <= fdsBefore })
	t.Logf("%d descriptors open before, %d after", fdsBefore, openFDs(t))
}
