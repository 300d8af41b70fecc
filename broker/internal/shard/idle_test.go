package shard

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

// TestHeldConnectionCost: a connected client that sends nothing is
// parked (park.go): it costs no goroutine, neither reader nor writer, and
// neither a read buffer (4 KiB), decoding scratch (2.3 KiB) nor, once
// quiet for two sweeps, write state: about 3.5 KiB of heap with both
// ends of the socket (conn 0.9 KiB, session 0.5 KiB, two net.Conns
// 1 KiB, channels, timers).
func TestHeldConnectionCost(t *testing.T) {
	// An info-level JSON logger, as the broker runs with: a connection
	// that does not log must not pay for its logger's attributes.
	b := startBroker(t, Options{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))}, ConnInfo{})
	const n = 1000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	goroutines := runtime.NumGoroutine()
	conns := make([]net.Conn, n)
	for i := range conns {
		nc, err := net.Dial("tcp", b.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		connect, _ := (&packet.Connect{Version: packet.Version311, CleanStart: true, KeepAlive: 60,
			ClientID: []byte(fmt.Sprintf("held-%d", i))}).Append(nil, packet.Version311)
		if _, err := nc.Write(connect); err != nil {
			t.Fatal(err)
		}
		connack := make([]byte, 4)
		if _, err := nc.Read(connack); err != nil || connack[0] != 0x20 || connack[3] != 0 {
			t.Fatalf("CONNACK %x: %v", connack, err)
		}
		conns[i] = nc
	}
	// A few may still wait out parkAfter, or be ending their goroutine.
	eventually(t, "no goroutine per connection", func() bool { return runtime.NumGoroutine() <= goroutines+n/100 })
	b.shard.sweepBatches() // they wrote their CONNACK: quiet since
	b.shard.sweepBatches()
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	perConn := (int64(after.HeapInuse) - int64(before.HeapInuse)) / n
	stack := (int64(after.StackInuse) - int64(before.StackInuse)) / n
	t.Logf("%d held connections: %d B of heap and %d B of stack each (client side included)", n, perConn, stack)
	if perConn > 5<<10 {
		t.Fatalf("a held connection costs %d B of heap", perConn)
	}
	if stack > 256 {
		t.Fatalf("a held connection keeps %d B of stack", stack)
	}
	// They still answer.
	for _, nc := range conns[:10] {
		_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := nc.Write([]byte{0xC0, 0}); err != nil { // PINGREQ
			t.Fatal(err)
		}
		resp := make([]byte, 2)
		if _, err := nc.Read(resp); err != nil || resp[0] != 0xD0 {
			t.Fatalf("PINGRESP %x: %v", resp, err)
		}
	}
}

// TestBigPacketsKeepABigReadBuffer: a client that sends one big packet at
// a time, waiting in between, reads each into a pooled big buffer instead
// of growing one from 4 KiB again (about 250 KiB of allocation for a
// 64 KiB packet).
func TestBigPacketsKeepABigReadBuffer(t *testing.T) {
	b := startBroker(t, Options{}, ConnInfo{})
	pub := v5Client(t, b, "pub")
	raw, err := (&packet.Publish{QoS: 1, PacketID: 1, Topic: []byte("big"), Payload: make([]byte, 64<<10)}).Append(nil, packet.Version5)
	if err != nil {
		t.Fatal(err)
	}
	send := func() {
		pub.sendBytes(raw)
		pub.ack(packet.TypePuback) // the reader has gone idle again
	}
	send() // the first one grows a buffer
	const n = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		send()
	}
	runtime.ReadMemStats(&after)
	perPacket := (after.TotalAlloc - before.TotalAlloc) / n
	t.Logf("%d B allocated per 64 KiB PUBLISH (the message's copy included)", perPacket)
	// Regrowing every time costs about 275 KB; the pool may still lose a
	// buffer to a collection (and, under the race detector, drops a
	// quarter of what it is given).
	if perPacket > 200<<10 {
		t.Fatalf("%d B allocated per 64 KiB PUBLISH", perPacket)
	}
}
