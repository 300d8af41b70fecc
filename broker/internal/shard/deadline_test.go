package shard

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

// deadlineCounter counts the read deadlines set on the connection it
// wraps, which it exposes (NetConn) for writev and parking as a PROXY
// protocol wrapper does.
type deadlineCounter struct {
	net.Conn
	moves *atomic.Int64
}

func (d deadlineCounter) NetConn() net.Conn { return d.Conn }

func (d deadlineCounter) SetReadDeadline(t time.Time) error {
	d.moves.Add(1)
	return d.Conn.SetReadDeadline(t)
}

// countingPair serves a shard that parks, with every connection wrapped in
// a deadlineCounter counting into moves, and connects a subscriber to
// filter and a publisher (keep alive 60 s).
func countingPair(t *testing.T, filter string) (pub, sub *rawClient, moves *atomic.Int64) {
	t.Helper()
	moves = new(atomic.Int64)
	sh := New(Options{SysInterval: -1, Poller: newTestPoller(t)})
	addr := serveWrapped(t, sh, ConnInfo{AllowAnonymous: true}, func(c net.Conn) net.Conn {
		return deadlineCounter{Conn: c, moves: moves}
	})
	sub = dialRaw(t, addr, packet.Version311)
	sub.connectOK("sub")
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte(filter)})
	pub = dialRaw(t, addr, packet.Version311)
	pub.connect(&packet.Connect{ClientID: []byte("pub"), CleanStart: true, KeepAlive: 60})
	return pub, sub, moves
}

// TestBusyReaderMovesItsDeadlineRarely: a connection that can park and
// reads one PUBLISH at a time (each delivered before the next is sent, so
// that its reader waits for input between them, as at 1,000 msg/s) moves
// its socket's read deadline about once per parkAfter, not two or three
// times per packet: every move of a runtime timer may wake a second
// thread (the runtime's wakeNetPoller: a futex wake and a spinning M on
// the other core), issue 19 target 3.
func TestBusyReaderMovesItsDeadlineRarely(t *testing.T) {
	pub, sub, moves := countingPair(t, "busy/#")
	pub.send(&packet.Publish{Topic: []byte("busy/t"), Payload: []byte("first")})
	sub.publish()

	const n = 300
	before := moves.Load()
	for i := range n {
		pub.send(&packet.Publish{Topic: []byte("busy/t"), Payload: []byte{byte(i)}})
		if p := sub.publish(); len(p.Payload) != 1 || p.Payload[0] != byte(i) {
			t.Fatalf("message %d: payload % x", i, p.Payload)
		}
	}
	got := moves.Load() - before
	t.Logf("%d read deadlines set for %d packets read one at a time (both connections)", got, n)
	if got > n/10 {
		t.Errorf("%d read deadlines set for %d packets, want at most %d", got, n, n/10)
	}
}

// TestSplitPacketOutlivesParkWait: the rest of a packet that comes after
// the park wait's deadline (2×parkAfter at most) is read under the keep
// alive's deadline, not failed as a keep-alive timeout.
func TestSplitPacketOutlivesParkWait(t *testing.T) {
	pub, sub, _ := countingPair(t, "split/#")
	for i := range 3 {
		// Busy first, so that the reader waits in idle, not parked.
		pub.send(&packet.Publish{Topic: []byte("split/t"), Payload: []byte("warm")})
		sub.publish()
		b, err := (&packet.Publish{Topic: []byte("split/t"), Payload: []byte{'s', byte(i)}}).Append(nil, packet.Version311)
		if err != nil {
			t.Fatal(err)
		}
		pub.sendBytes(b[:3])
		time.Sleep(3 * parkAfter) // a slow client: the rest comes after the wait's deadline
		pub.sendBytes(b[3:])
		if p := sub.publish(); string(p.Payload) != string([]byte{'s', byte(i)}) {
			t.Fatalf("split packet %d: payload % x", i, p.Payload)
		}
	}
}
