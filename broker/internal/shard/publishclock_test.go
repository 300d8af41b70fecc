package shard

import (
	"testing"
	"time"
)

// TestClockSharedByBufferedPackets: the PUBLISH packets handled one after
// another from one buffer share one clock reading (conn.clock); a packet
// after the read loop reset the outbox's count (it read the socket, or
// outboxPackets passed), one after another packet, and the first of a
// scratch taken again each read the clock afresh.
func TestClockSharedByBufferedPackets(t *testing.T) {
	c := &conn{in: new(inbound)}
	moved := func(since time.Time) {
		t.Helper()
		for i := 0; time.Since(since) <= 0; i++ {
			if i == 1_000_000 {
				t.Fatal("the clock did not move")
			}
		}
	}
	c.in.out.packets = 1
	first := c.clock()
	moved(first)
	for n := 2; n <= outboxPackets; n++ {
		c.in.out.packets = n
		if got := c.clock(); got != first {
			t.Fatalf("packet %d of the burst: clock read again (%v, first %v)", n, got, first)
		}
	}
	c.in.out.packets = 1 // the read loop reset the count before reading
	second := c.clock()
	if !second.After(first) {
		t.Fatalf("after a reset: %v, not after %v", second, first)
	}
	moved(second)
	c.in.out.packets = 3 // packet 2 was not a PUBLISH (or was refused early)
	third := c.clock()
	if !third.After(second) {
		t.Fatalf("after a skipped packet: %v, not after %v", third, second)
	}
	moved(third)
	c.in.clockAt = 0 // releaseScratch: the next holder starts afresh
	c.in.out.packets = 4
	if got := c.clock(); !got.After(third) {
		t.Fatalf("a scratch taken again: %v, not after %v", got, third)
	}
}
