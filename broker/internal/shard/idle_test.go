package shard

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
	"unsafe"

	"berth.dev/broker/packet"
)

// The bounds TestHeldConnectionCost and TestConnStateSize pin
// (docs/idle-connections.md). Measured (go1.26, amd64, with and without
// -race): 1,000 held connections cost 2,630-2,750 B of live heap each,
// MQTT 3.1.1 and 5.0 alike, both ends of the socket included (the
// client's net.Conn is about 300 B of it); 2,850-3,000 B with the
// reader's raw socket reads (sockReader). Before conn and session were
// made smaller they cost 3,400 B, and 5.0 ones 5,060 B (a 64-alias table
// made at CONNECT).
//
// An object over 512 B that holds pointers carries an 8-byte type header
// in its allocation (Go 1.22 on), so conn fits the 768 B size class only
// at 760 B: at 768 B it took 896 B. The keep-alive deadline kept by the
// poller's wheel instead of a runtime timer (and no bound callbacks for
// the poller) took 1,000 held connections from 2,860-3,000 B to
// 2,650-2,770 B each (go1.26, with and without -race). Parked without
// their net.Conn (detach.go), quiet since CONNECT, 1,000 held
// connections cost 2,160-2,290 B each (the server side's netFD,
// addresses, TCPConn and sockReader, ~450 B, are gone; its pollDesc,
// 512 B off the heap, too); the same tree without it, 2,610-2,750 B.
// With conn keeping only what it needs of its ConnInfo past CONNECT
// (conninfo.go: 736 → 680 B, the 704 B size class) and a detached
// rawIO without its three bound callbacks (48 B), 2,030-2,060 B; the
// same tree without them, 2,130-2,160 B. With conn in the 576 B class
// (its slab in the pooled scratch), session in the 384 B class (timers,
// pending will, pause channel and QoS 2 maps aside), rawIO in the 128 B
// class and no iovec or bound callbacks kept while detached,
// 1,740-1,780 B; the same tree without them, 1,940-1,970 B.
const (
	maxHeldHeap    = 1860 // bytes of live heap per held connection, client side included
	maxConnSize    = 568  // unsafe.Sizeof(conn{}): with its 8-byte malloc header, the 576 B size class
	maxSessionSize = 384  // unsafe.Sizeof(session{}): the 384 B size class (no header under 512 B)
	maxRawIOSize   = 128  // unsafe.Sizeof(rawIO{}) (Linux): the 128 B size class
)

// TestConnStateSize: the structs every held connection keeps stay within
// their size classes: what a connection needs only now and then (topic
// aliases, its outbox, drop counters, QoS maps, the writer's wake-up
// channel, the channel to wait for its end) is made on first use or lives
// in pooled scratch.
func TestConnStateSize(t *testing.T) {
	if n := unsafe.Sizeof(conn{}); n > maxConnSize {
		t.Errorf("conn is %d B, over %d", n, maxConnSize)
	}
	if n := unsafe.Sizeof(session{}); n > maxSessionSize {
		t.Errorf("session is %d B, over %d", n, maxSessionSize)
	}
	if n := unsafe.Sizeof(rawIO{}); n > maxRawIOSize {
		t.Errorf("rawIO is %d B, over %d", n, maxRawIOSize)
	}
	t.Logf("conn %d B, session %d B, rawIO %d B", unsafe.Sizeof(conn{}), unsafe.Sizeof(session{}), unsafe.Sizeof(rawIO{}))
}

// TestHeldConnectionCost: a connected client that sends nothing is
// parked (park.go): it costs no goroutine, neither reader nor writer, and
// neither a read buffer (4 KiB), decoding scratch (2.3 KiB) nor, once
// quiet for two sweeps, write state. What is left is its live heap,
// bounded per connection with both ends of the socket included (conn,
// session, the two net.Conns, the keep-alive timer), for MQTT 3.1.1 and
// 5.0 alike.
//
// A warm-up round comes first, not bounded: the goroutines the dial phase
// starts leave their descriptors (runtime.g, about 450 B each, reachable
// for good) behind, which the first round measured would count, as many
// as ran at once (a few hundred, varying run to run).
func TestHeldConnectionCost(t *testing.T) {
	t.Run("warm-up", func(t *testing.T) { heldConnectionCost(t, packet.Version311, false) })
	for _, v := range []byte{packet.Version311, packet.Version5} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) { heldConnectionCost(t, v, true) })
	}
}

func heldConnectionCost(t *testing.T, version byte, bounded bool) {
	// An info-level JSON logger, as the broker runs with: a connection
	// that does not log must not pay for its logger's attributes.
	b := startBroker(t, Options{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))}, ConnInfo{})
	const n = 1000
	connect := make([][]byte, n) // made first: not counted
	for i := range connect {
		connect[i], _ = (&packet.Connect{Version: version, CleanStart: true, KeepAlive: 60,
			ClientID: []byte(fmt.Sprintf("held-%d", i))}).Append(nil, version)
	}
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, nc := range conns {
			_ = nc.Close()
		}
	})
	connack := make([]byte, 64)
	var msBefore, msAfter runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&msBefore)
	before := liveHeap()
	goroutines := runtime.NumGoroutine()
	for i := range n {
		nc, err := net.Dial("tcp", b.addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, nc)
		if _, err := nc.Write(connect[i]); err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Read(connack); err != nil || connack[0] != 0x20 {
			t.Fatalf("CONNACK %x: %v", connack, err)
		}
	}
	// A few may still wait out parkAfter, or be ending their goroutine.
	eventually(t, "no goroutine per connection", func() bool { return runtime.NumGoroutine() <= goroutines+n/100 })
	b.shard.sweepBatches() // they wrote their CONNACK: quiet since
	b.shard.sweepBatches()
	// Quiet since CONNECT: parked without their net.Conn (detach.go).
	eventually(t, "every connection detached", func() bool { return b.shard.Detached() == n })
	if k := boundWhileDetached(b.shard); k > 0 {
		t.Errorf("%d detached connections keep bound callbacks (rawIO's 48 B, sockReader's and the arming's 16 B each) or an iovec (16 B)", k)
	}
	perConn := (liveHeap() - before) / n
	runtime.ReadMemStats(&msAfter)
	stack := (int64(msAfter.StackInuse) - int64(msBefore.StackInuse)) / n
	t.Logf("%d held connections: %d B of live heap and %d B of stack each (client side included)", n, perConn, stack)
	if bounded && perConn > maxHeldHeap {
		t.Errorf("a held connection costs %d B of live heap, over %d", perConn, maxHeldHeap)
	}
	// No stack bound in bytes: StackInuse also counts the stacks the
	// runtime keeps for goroutines that ended (per P, and in the free
	// list until a collection), whatever the connections; the goroutine
	// count above is what says that a held connection has none.
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

// boundWhileDetached counts the detached connections whose rawIO still
// holds its bound callbacks: made again when the socket is (detach.go).
func boundWhileDetached(s *Shard) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	k := 0
	for c := range s.conns {
		c.w.mu.Lock()
		if r := c.w.raw; r != nil && r.rc == nil && (r.hasCallbacks() || c.park.armFn != nil) {
			k++
		}
		c.w.mu.Unlock()
	}
	return k
}

// liveHeap collects twice (pools keep their victims for one cycle) and
// returns the live heap in bytes.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
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
