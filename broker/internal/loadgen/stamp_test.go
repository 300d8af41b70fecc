package loadgen

import (
	"testing"

	"berth.dev/broker/packet"
)

func TestStampRoundTrip(t *testing.T) {
	p := make([]byte, 64)
	putStamp(p, 7, 1<<31+5, -3)
	pub, seq, ns, ok := readStamp(p)
	if !ok || pub != 7 || seq != 1<<31+5 || ns != -3 {
		t.Fatalf("readStamp = %d %d %d %v", pub, seq, ns, ok)
	}
	if _, _, _, ok := readStamp(p[:stampSize-1]); ok {
		t.Fatal("readStamp accepted a short payload")
	}
}

// TestSubscriberAccounting feeds known deliveries to a subscriber's
// accounting: unique, duplicate, out of order, foreign and wrong-topic
// messages, and known latencies.
func TestSubscriberAccounting(t *testing.T) {
	s := newSubscriber(nil, []bool{true, false, true}) // publisher 1 is on another topic
	deliver := func(pub, seq uint32, sent, now int64) {
		pay := make([]byte, 32)
		putStamp(pay, pub, seq, sent)
		s.account(&packet.Publish{Payload: pay}, now)
	}
	for seq := range uint32(100) {
		deliver(0, seq, 1000, 1000+int64(seq)+1) // latencies 1..100 ns
	}
	deliver(0, 5, 0, 10)      // duplicate
	deliver(2, 70_000, 0, 10) // far ahead: the set grows
	deliver(2, 3, 0, 10)      // out of order is fine
	deliver(1, 0, 0, 10)      // publisher 1 does not publish to this subscriber's topic
	deliver(9, 0, 0, 10)      // unknown publisher
	s.account(&packet.Publish{Payload: []byte("short")}, 10)

	if got := s.received.Load(); got != 106 {
		t.Errorf("received %d, want 106", got)
	}
	if s.unique.Load() != 102 || s.dups.Load() != 1 || s.unexpected != 3 {
		t.Errorf("unique %d dups %d unexpected %d, want 102 1 3", s.unique.Load(), s.dups.Load(), s.unexpected)
	}
	if s.sets[0].unique != 100 || s.sets[2].unique != 2 || s.sets[1].unique != 0 {
		t.Errorf("per publisher unique %d %d %d", s.sets[0].unique, s.sets[1].unique, s.sets[2].unique)
	}
	if s.lastRecv.Load() != 10 {
		t.Errorf("lastRecv %d", s.lastRecv.Load())
	}
	// 1..100 from publisher 0 and two 10s from publisher 2: the 51st is 49.
	h := s.lat.total
	if h.Count() != 102 || h.Quantile(0.5) != 49 || h.Max() != 100 {
		t.Errorf("latency count %d p50 %d max %d", h.Count(), h.Quantile(0.5), h.Max())
	}
}

// TestAccountAllocs pins the subscriber's per-message path at zero
// allocations once the sequence set has grown.
func TestAccountAllocs(t *testing.T) {
	s := newSubscriber(nil, []bool{true})
	pay := make([]byte, 64)
	pk := &packet.Publish{Payload: pay}
	var seq uint32
	putStamp(pay, 0, 4095, 1)
	s.account(pk, 2) // grow the set up front
	if n := testing.AllocsPerRun(1000, func() {
		putStamp(pay, 0, seq%4096, 1)
		seq++
		s.account(pk, 2)
	}); n != 0 {
		t.Fatalf("account allocates %v per message", n)
	}
}

func BenchmarkSubscriberAccount(b *testing.B) {
	s := newSubscriber(nil, []bool{true})
	pay := make([]byte, 64)
	pk := &packet.Publish{Payload: pay}
	b.ReportAllocs()
	b.SetBytes(int64(len(pay)))
	var seq uint32
	for b.Loop() {
		putStamp(pay, 0, seq&(1<<20-1), 1)
		seq++
		s.account(pk, 2)
	}
}
