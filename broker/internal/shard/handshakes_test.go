package shard

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

// connCount is how many connections the shard holds, handshakes included.
func (b *testBroker) connCount() int {
	b.shard.mu.RLock()
	defer b.shard.mu.RUnlock()
	return len(b.shard.conns)
}

// dialSilent opens n sockets to b that send nothing, and waits until the
// shard holds them all.
func dialSilent(t *testing.T, b *testBroker, n int) []net.Conn {
	t.Helper()
	base := b.connCount()
	ncs := make([]net.Conn, n)
	for i := range ncs {
		nc, err := net.DialTimeout("tcp", b.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = nc.Close() })
		ncs[i] = nc
	}
	eventually(t, fmt.Sprintf("%d sockets handed to the shard", n), func() bool { return b.connCount() >= base+n })
	return ncs
}

// TestHandshakesBounded: connections whose CONNECT has not come hold no
// goroutine (they wait in the poller), and when a storm's CONNECTs all
// come at once no more handshakes run at once than the shard's slots
// (docs/idle-connections.md, "Handshakes bounded"). Every client still
// gets its CONNACK. The old shard ran each handshake on the accepting
// goroutine, which waited there for the CONNECT: 600 goroutines.
func TestHandshakesBounded(t *testing.T) {
	pr := new(probe)
	const slots, n = 2, 600
	// A connect timeout longer than any wait here: what ends the silent
	// sockets' goroutines is not their timeout.
	b := startBroker(t, Options{probe: pr, handshakes: slots, ConnectTimeout: time.Minute}, ConnInfo{})
	before := runtime.NumGoroutine()
	ncs := dialSilent(t, b, n)
	// What the accepting goroutines left: each returned once its socket
	// was parked before its CONNECT.
	eventually(t, "the silent sockets' goroutines gone", func() bool {
		return runtime.NumGoroutine() < before+n/10
	})
	t.Logf("goroutines: %d before, %d with %d silent sockets", before, runtime.NumGoroutine(), n)

	connectAtOnce(t, ncs, "hs")
	if got := pr.handshakesPeak.Load(); got > slots || got < 1 {
		t.Errorf("%d handshakes ran at once, want 1 to %d", got, slots)
	}
	t.Logf("handshakes at once, peak: %d of %d slots", pr.handshakesPeak.Load(), slots)
	for i := range n {
		waitDetached(t, b, fmt.Sprintf("hs-%d", i))
	}
}

// connectAtOnce sends a CONNECT (3.1.1, clean, client id prefix-i) on
// every socket of ncs at once and checks every CONNACK.
func connectAtOnce(t *testing.T, ncs []net.Conn, prefix string) {
	t.Helper()
	var start, wg sync.WaitGroup
	start.Add(1)
	errs := make(chan error, len(ncs))
	for i, nc := range ncs {
		wg.Go(func() {
			rc := &rawClient{t: t, nc: nc, rd: packet.NewReader(nc, 1024), version: packet.Version311}
			b, err := (&packet.Connect{Version: packet.Version311, ProtocolName: []byte("MQTT"), CleanStart: true,
				ClientID: fmt.Appendf(nil, "%s-%d", prefix, i)}).Append(nil, packet.Version311)
			if err != nil {
				errs <- err
				return
			}
			start.Wait()
			_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
			if _, err := nc.Write(b); err != nil {
				errs <- err
				return
			}
			fh, body, err := rc.rd.ReadPacket(1024)
			if err != nil {
				errs <- fmt.Errorf("client %d: %w", i, err)
				return
			}
			var ack packet.Connack
			if err := ack.Decode(packet.Version311, fh, body); err != nil || ack.Reason != packet.CodeSuccess {
				errs <- fmt.Errorf("client %d: CONNACK %v, %v", i, ack.Reason, err)
			}
		})
	}
	start.Done()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestSilentSocketClosedAtConnectTimeout: a socket that never sends its
// CONNECT is closed at the connect timeout (to the poller wheel's second)
// while it holds no goroutine meanwhile; one that sends its CONNECT in
// pieces, slowly, is still answered.
func TestSilentSocketClosedAtConnectTimeout(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{ConnectTimeout: time.Second}, ConnInfo{})
	ncs := dialSilent(t, b, 20)

	slow := dialRaw(t, b.addr, packet.Version311)
	whole, err := (&packet.Connect{Version: packet.Version311, ProtocolName: []byte("MQTT"), CleanStart: true,
		ClientID: []byte("slow")}).Append(nil, packet.Version311)
	if err != nil {
		t.Fatal(err)
	}
	slow.sendBytes(whole[:3])
	eventually(t, "the slow socket handed to the shard", func() bool { return b.connCount() >= 21 })
	slow.sendBytes(whole[3:])
	slow.read(packet.TypeConnack)

	for i, nc := range ncs {
		_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		var one [1]byte
		if n, err := nc.Read(one[:]); n != 0 || err == nil {
			t.Fatalf("silent socket %d: read %d bytes, %v; want it closed", i, n, err)
		}
	}
	eventually(t, "the silent sockets gone from the shard", func() bool { return b.connCount() == 1 })
}

// TestShutdownEndsSocketsBeforeConnect: Shutdown ends the connections
// parked before their CONNECT at once (their sockets are shut down,
// which wakes them), not at their connect timeout.
func TestShutdownEndsSocketsBeforeConnect(t *testing.T) {
	t.Parallel()
	sh := New(Options{Poller: newTestPoller(t), SysInterval: -1, ConnectTimeout: time.Minute})
	b := startBrokerWith(t, sh)
	ncs := dialSilent(t, b, 20)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sh.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	for i, nc := range ncs {
		_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		var one [1]byte
		if n, err := nc.Read(one[:]); n != 0 || err == nil {
			t.Fatalf("socket %d: read %d bytes, %v; want it closed", i, n, err)
		}
	}
}
