package memtrim

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

// The tests allocate in this process and read its runtime/metrics, so
// none runs in parallel.

// sink keeps allocations alive across the burst (a package variable, so
// the compiler cannot drop them).
var (
	sink [][]byte
	junk []byte
)

// reclaimable reads what a return would take: garbage (objects over the
// live heap of the last collection) plus free, unreleased pages.
func reclaimable() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/free:bytes"}}
	metrics.Read(s)
	objects, live := s[0].Value.Uint64(), s[1].Value.Uint64()
	return objects - min(objects, live) + s[2].Value.Uint64()
}

// burst allocates n bytes of garbage in 1 KiB objects, and n/8 bytes that
// stay alive in 4 KiB objects (another size class: spans full of garbage
// become free pages, as a connect storm's transient buffers do).
func burst(n int) {
	for i := 0; i < n/1024; i++ {
		junk = make([]byte, 1024) // escapes: on the heap
		if i%32 == 0 {
			sink = append(sink, make([]byte, 4096))
		}
	}
}

func startTrimmer(t *testing.T, cfg Config) *Trimmer {
	t.Helper()
	tr := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tr.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; sink = nil })
	return tr
}

// A burst of allocation followed by quiet is returned to the system once:
// what was reclaimable (garbage and free pages, at least MinBytes) is
// released, and next to nothing is left resident beyond the live heap.
func TestReturnsAfterBurst(t *testing.T) {
	runtime.GC()
	tr := startTrimmer(t, Config{Every: time.Hour, Tick: 20 * time.Millisecond, Window: 3 * time.Second, Quiet: 200 * time.Millisecond})
	time.Sleep(100 * time.Millisecond) // a few quiet ticks before the burst, as a broker idles before a storm
	// No collection during the burst, as none comes while a broker's
	// new connections sit idle: all of its garbage is still there.
	gcp := debug.SetGCPercent(-1)
	burst(96 << 20)
	debug.SetGCPercent(gcp)
	deadline := time.Now().Add(10 * time.Second)
	for tr.Returns() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if tr.Returns() != 1 {
		t.Fatalf("returns %d after a 96 MiB burst, want 1", tr.Returns())
	}
	left := reclaimable()
	t.Logf("reclaimable at the return %d KiB, left after it %d KiB; released by the return %d KiB",
		tr.atLast.Load()>>10, left>>10, tr.Released()>>10)
	if at := tr.atLast.Load(); at < 64<<20 || left > 1<<20 || tr.Released() < 64<<20 {
		t.Fatalf("reclaimable %d bytes at the return, %d after it, %d released; want at least 64 MiB (of the burst's 96 MiB of garbage), under 1 MiB, at least 64 MiB",
			at, left, tr.Released())
	}
	// Quiet again: no second return within Every.
	burst(32 << 20)
	time.Sleep(500 * time.Millisecond)
	if tr.Returns() != 1 {
		t.Fatalf("returns %d within Every, want 1", tr.Returns())
	}
}

// Steady allocation, however fast, is no burst that ended: the Trimmer
// does not fire while it goes on, even with plenty of garbage.
func TestQuietUnderSteadyAllocation(t *testing.T) {
	runtime.GC()
	tr := startTrimmer(t, Config{Every: time.Millisecond, MinBytes: 1 << 20, Tick: 20 * time.Millisecond, Window: time.Second, Quiet: 100 * time.Millisecond})
	end := time.Now().Add(1500 * time.Millisecond)
	tk := time.NewTicker(2 * time.Millisecond)
	defer tk.Stop()
	for time.Now().Before(end) {
		<-tk.C
		burst(64 << 10) // ~32 MB/s in steady 64 KiB steps
		if len(sink) > 4096 {
			sink = sink[:0] // the live set stays bounded, the rest is garbage
		}
	}
	if n := tr.Returns(); n != 0 {
		t.Fatalf("returns %d under steady allocation, want 0", n)
	}
}

// Garbage that built up slowly (less than half of it allocated within the
// window) is left to the collector; so is too little to be worth a
// return, absolutely or against the live heap.
func TestDueConditions(t *testing.T) {
	now := time.Unix(1000, 0)
	mk := func(allocs ...uint64) *Trimmer {
		tr := New(Config{Every: time.Minute, Tick: time.Second, Window: 8 * time.Second, Quiet: 2 * time.Second})
		copy(tr.allocs, allocs)
		tr.next = len(allocs) % len(tr.allocs)
		return tr
	}
	const mib = 1 << 20
	for _, tc := range []struct {
		name              string
		allocs            []uint64 // oldest first, the last one just taken
		reclaimable, live uint64
		want              bool
	}{
		{"burst then quiet", []uint64{0, 30 * mib, 40 * mib, 0, 0}, 20 * mib, 40 * mib, true},
		{"burst not over", []uint64{0, 30 * mib, 40 * mib, 0, 10 * mib}, 20 * mib, 40 * mib, false},
		{"quiet for one tick only", []uint64{0, 30 * mib, 40 * mib, 10 * mib, 0}, 20 * mib, 40 * mib, false},
		{"steady", []uint64{5 * mib, 5 * mib, 5 * mib, 5 * mib, 5 * mib}, 20 * mib, 40 * mib, false},
		{"slow garbage", []uint64{mib, mib, mib, 0, 0}, 20 * mib, 40 * mib, false},
		{"too little", []uint64{0, 30 * mib, 40 * mib, 0, 0}, 3 * mib, 10 * mib, false},
		{"small against the live heap", []uint64{0, 30 * mib, 40 * mib, 0, 0}, 20 * mib, 200 * mib, false},
	} {
		if got := mk(tc.allocs...).due(now, tc.reclaimable, tc.live); got != tc.want {
			t.Errorf("%s: due %v, want %v", tc.name, got, tc.want)
		}
	}
	tr := mk(0, 30*mib, 40*mib, 0, 0)
	tr.last = now.Add(-30 * time.Second)
	if tr.due(now, 20*mib, 40*mib) {
		t.Error("due 30 s after a return with Every 1 min")
	}
}

// Every 0 disables the Trimmer: Run returns at once.
func TestDisabled(t *testing.T) {
	done := make(chan struct{})
	go func() { New(Config{}).Run(context.Background()); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run with Every 0 did not return")
	}
}
