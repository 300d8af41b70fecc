package shard

import (
	"bytes"
	"io"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

// loneRig is a standalone broker as `broker -data` runs it (a WAL store,
// the poller), a subscriber to "lone/t" and a publisher, both speaking
// MQTT 5 over loopback sockets; pub and want are the PUBLISH the
// publisher sends and the bytes the subscriber gets for it.
type loneRig struct {
	b         *testBroker
	pub, sub  *rawClient
	pubBytes  []byte
	want, got []byte
}

func newLoneRig(t *testing.T) *loneRig {
	t.Helper()
	st := openWALStore(t, t.TempDir(), wal.SyncInterval)
	sh := New(Options{Store: st, MessageLog: st.Messages(), SysInterval: -1, Poller: newTestPoller(t)})
	r := &loneRig{b: startBrokerWith(t, sh)}
	r.sub = v5Client(t, r.b, "lone-sub")
	r.sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("lone/t")})
	r.pub = v5Client(t, r.b, "lone-pub")
	p := packet.Publish{Topic: []byte("lone/t"), Payload: bytes.Repeat([]byte{0xA5}, 64)}
	var err error
	if r.pubBytes, err = p.Append(nil, packet.Version5); err != nil {
		t.Fatal(err)
	}
	// The delivery: the same PUBLISH, no properties (v5: a zero property length).
	if r.want, err = p.Append(nil, packet.Version5); err != nil {
		t.Fatal(err)
	}
	r.got = make([]byte, len(r.want))
	_ = r.sub.nc.SetReadDeadline(time.Now().Add(time.Minute))
	return r
}

// one sends one PUBLISH and reads its delivery whole before it returns:
// the broker's reader finds it alone in the socket and reads it alone.
// Neither side allocates in the test: the bytes are prebuilt and read into
// a buffer kept (the SUBACK was the last thing the codec reader saw).
func (r *loneRig) one(t *testing.T) {
	if _, err := r.pub.nc.Write(r.pubBytes); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if _, err := io.ReadFull(r.sub.nc, r.got); err != nil {
		t.Fatalf("delivery: %v", err)
	}
	if !bytes.Equal(r.got, r.want) {
		t.Fatalf("delivered % x, want % x", r.got, r.want)
	}
}

// mallocs counts the heap allocations of the whole process so far.
func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// TestLoneMessageAllocations: at 1,000 msg/s a publisher's QoS 0
// messages come one per read, the reader waiting for input between them
// (the latency-1k bench), and the broker allocates nothing per message:
// no slab chunk per read, no buffer per wait (issue 19, target 3; two
// per message before the small-message pool, smallmsg.go). The count is
// the whole process's (runtime.MemStats.Mallocs), test clients included,
// which allocate nothing per message either.
func TestLoneMessageAllocations(t *testing.T) {
	r := newLoneRig(t)
	for range 50 { // warm up: pools, the outbox, the writer's batch
		r.one(t)
	}
	const n = 500
	before := mallocs()
	for range n {
		r.one(t)
	}
	per := float64(mallocs()-before) / n
	t.Logf("%d lone messages: %.3f allocations per message", n, per)
	// A few allocations of background work (the WAL's checkpoint every
	// second) may fall into the window; a message's own would be n.
	bound := 0.05
	if raceEnabled {
		// The race detector's sync.Pool drops a quarter of what is put
		// back, at random: the misses allocate (before: 3.4).
		bound = 1
	}
	if per > bound {
		t.Fatalf("%.3f allocations per lone message, want at most %v", per, bound)
	}
}

// TestParkedMessageAllocations: a publisher slower than parkAfter parks
// its reader between messages; the reader resumed for each message (a
// new goroutine, the peek, the read) builds no slab chunk for it either.
// What is left is the go statement's closure, one per wake-up (park.go:
// wakeParked); before the small-message pool it was three. The fewest in
// any round is asserted: a latency histogram's first sample in a new row
// and, under the race detector, sync.Pool's random drops add to some
// rounds, never take away.
func TestParkedMessageAllocations(t *testing.T) {
	r := newLoneRig(t)
	for range 3 {
		waitParked(t, r.b, "lone-pub")
		r.one(t)
	}
	const n = 12
	fewest, total := uint64(1<<63), uint64(0)
	for range n {
		waitParked(t, r.b, "lone-pub") // polls with sleeps of its own: only the round trip is counted
		before := mallocs()
		r.one(t)
		got := mallocs() - before
		fewest, total = min(fewest, got), total+got
	}
	t.Logf("%d messages, each waking a parked reader: %d allocations at fewest, %.2f on average", n, fewest, float64(total)/n)
	if fewest > 1 {
		t.Fatalf("%d allocations per message to a parked reader at fewest, want the wake-up's one", fewest)
	}
}

// TestSmallMessageSize: a pooled small message is one object of a size
// class of Go's allocator, with room for a typical device's topic and
// payload.
func TestSmallMessageSize(t *testing.T) {
	if n := unsafe.Sizeof(smallMsg{}); n != smallMsgSize {
		t.Fatalf("smallMsg is %d B, want %d", n, smallMsgSize)
	}
	if smallMsgBytes < 256 {
		t.Fatalf("a small message holds %d bytes, want at least 256", smallMsgBytes)
	}
	t.Logf("a small message holds %d bytes of topic and payload", smallMsgBytes)
}
