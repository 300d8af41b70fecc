// Package memtrim gives the Go heap's spare memory back to the system after
// a burst of allocation, such as thousands of devices connecting at once,
// once the burst is over.
//
// A connect storm leaves garbage (each CONNECT's transient buffers, map
// growth) and half-empty spans behind the connections it made. Nothing
// collects that garbage while the connections sit idle, and after a
// collection the runtime's background scavenger returns only what exceeds
// about 110 % of the heap goal, so the pages stay resident: on a broker
// holding idle connections they are a quarter of its RSS
// (docs/idle-connections.md). A Trimmer watches runtime/metrics and calls
// debug.FreeOSMemory (a collection, then every free page returned) when
//
//   - much of the heap is reclaimable: garbage not yet collected, free,
//     unreleased pages and the stacks of ended goroutines (stack memory
//     beyond 8 KiB per live goroutine) add up to at least Config.MinBytes
//     and at least Config.MinFraction of the live heap;
//   - it came from a burst: the last Config.Window of allocation made at
//     least half of it, so slowly accumulating garbage (which the next
//     collection takes in its stride) does not count;
//   - the burst is over: the allocation rate has stayed under 1/16 of the
//     window's peak for Config.Quiet, so steady traffic, whatever its rate,
//     never triggers it;
//   - and at least Config.Every has passed since the last return.
package memtrim

import (
	"context"
	"log/slog"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"time"
)

// Config tunes a Trimmer; zero fields take the defaults below.
type Config struct {
	// Every is the least time between two returns; 0 or less disables the
	// Trimmer (Run returns at once).
	Every time.Duration
	// MinBytes is the least reclaimable heap worth a return (default 4 MiB).
	MinBytes uint64
	// MinFraction is the least reclaimable heap, as a fraction of the live
	// heap, worth a return (default 1/8).
	MinFraction float64
	// Tick is how often runtime/metrics is read (default 250 ms).
	Tick time.Duration
	// Window is how far back a burst is looked for (default 15 s).
	Window time.Duration
	// Quiet is how long the allocation rate must have settled (default 2 s:
	// a connect storm pauses for a second when the listen backlog overflows
	// and clients retransmit their SYN).
	Quiet  time.Duration
	Logger *slog.Logger
}

func (c *Config) defaults() {
	if c.MinBytes == 0 {
		c.MinBytes = 4 << 20
	}
	if c.MinFraction == 0 {
		c.MinFraction = 1.0 / 8
	}
	if c.Tick <= 0 {
		c.Tick = 250 * time.Millisecond
	}
	if c.Window <= 0 {
		c.Window = 15 * time.Second
	}
	if c.Quiet <= 0 {
		c.Quiet = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Trimmer decides when to return memory; see the package comment.
type Trimmer struct {
	cfg     Config
	samples []metrics.Sample
	allocs  []uint64 // bytes allocated per tick, the last Window of them (a ring)
	next    int
	prevAll uint64
	last    time.Time // the last return; zero: none yet
	returns atomic.Uint64
	freed   atomic.Uint64
	atLast  atomic.Uint64 // what the last return estimated it would free
}

// Indices into Trimmer.samples.
const (
	mAllocs = iota
	mObjects
	mFree
	mLive
	mReleased
	mStacks
	mGoroutines
)

// goroutineStack is what a live goroutine's stack is taken to hold: stack
// memory beyond that many bytes per goroutine is counted as reclaimable
// (dead goroutines' stacks, which a collection frees).
const goroutineStack = 8 << 10

// New makes a Trimmer; Run starts it.
func New(cfg Config) *Trimmer {
	cfg.defaults()
	n := int(cfg.Window / cfg.Tick)
	if n < 2 {
		n = 2
	}
	t := &Trimmer{cfg: cfg, allocs: make([]uint64, n)}
	t.samples = []metrics.Sample{
		mAllocs:     {Name: "/gc/heap/allocs:bytes"},
		mObjects:    {Name: "/memory/classes/heap/objects:bytes"},
		mFree:       {Name: "/memory/classes/heap/free:bytes"},
		mLive:       {Name: "/gc/heap/live:bytes"},
		mReleased:   {Name: "/memory/classes/heap/released:bytes"},
		mStacks:     {Name: "/memory/classes/heap/stacks:bytes"},
		mGoroutines: {Name: "/sched/goroutines:goroutines"},
	}
	return t
}

// Returns is how many times the Trimmer has returned memory.
func (t *Trimmer) Returns() uint64 { return t.returns.Load() }

// Released is how many bytes its returns gave back to the system in all
// (growth of the runtime's released heap across each call; the background
// scavenger may have given back part of a burst's pages before).
func (t *Trimmer) Released() uint64 { return t.freed.Load() }

// Run samples every Tick until ctx ends. It does nothing when Every is not
// positive.
func (t *Trimmer) Run(ctx context.Context) {
	if t.cfg.Every <= 0 {
		return
	}
	tk := time.NewTicker(t.cfg.Tick)
	defer tk.Stop()
	metrics.Read(t.samples)
	t.prevAll = t.samples[mAllocs].Value.Uint64()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tk.C:
			if reclaimable, due := t.step(now); due {
				t.trim(now, reclaimable)
			}
		}
	}
}

// step takes one sample: what a return would free (garbage, free heap and
// spare stacks), and whether to return it now.
func (t *Trimmer) step(now time.Time) (reclaimable uint64, due bool) {
	metrics.Read(t.samples)
	all := t.samples[mAllocs].Value.Uint64()
	t.allocs[t.next] = all - t.prevAll
	t.next = (t.next + 1) % len(t.allocs)
	t.prevAll = all
	objects := t.samples[mObjects].Value.Uint64()
	live := t.samples[mLive].Value.Uint64()
	free := t.samples[mFree].Value.Uint64()
	var garbage uint64
	if objects > live {
		garbage = objects - live
	}
	// The connections' handshakes ran on goroutines that have ended; their
	// stacks stay in use until a collection frees them.
	var spareStacks uint64
	if st, need := t.samples[mStacks].Value.Uint64(), t.samples[mGoroutines].Value.Uint64()*goroutineStack; st > need {
		spareStacks = st - need
	}
	reclaimable = garbage + free + spareStacks
	return reclaimable, t.due(now, reclaimable, live)
}

// due applies the package comment's conditions to the allocation ring
// and the reclaimable and live heap.
func (t *Trimmer) due(now time.Time, reclaimable, live uint64) bool {
	if !t.last.IsZero() && now.Sub(t.last) < t.cfg.Every {
		return false
	}
	if reclaimable < t.cfg.MinBytes || float64(reclaimable) < t.cfg.MinFraction*float64(live) {
		return false
	}
	quietTicks := int((t.cfg.Quiet + t.cfg.Tick - 1) / t.cfg.Tick)
	if quietTicks >= len(t.allocs) {
		quietTicks = len(t.allocs) - 1
	}
	var total, peak, recent uint64
	for i, a := range t.allocs {
		total += a
		peak = max(peak, a)
		// The last quietTicks entries, newest first, end just before next.
		if age := (t.next - 1 - i + 2*len(t.allocs)) % len(t.allocs); age < quietTicks {
			recent = max(recent, a)
		}
	}
	if total < reclaimable/2 { // not a burst: garbage that built up slowly
		return false
	}
	return recent <= peak/16 // the burst is over
}

// trim returns the free heap to the system and logs what it gave back.
func (t *Trimmer) trim(now time.Time, reclaimable uint64) {
	before := t.samples[mReleased].Value.Uint64()
	start := time.Now()
	debug.FreeOSMemory()
	took := time.Since(start)
	metrics.Read(t.samples)
	t.prevAll = t.samples[mAllocs].Value.Uint64() // the collection's own work is not a burst
	clear(t.allocs)
	var freed uint64
	if after := t.samples[mReleased].Value.Uint64(); after > before {
		freed = after - before
	}
	t.last = now
	t.atLast.Store(reclaimable)
	t.returns.Add(1)
	t.freed.Add(freed)
	t.cfg.Logger.Info("returned free heap to the system after an allocation burst",
		"reclaimable_bytes", reclaimable, "released_bytes", freed,
		"live_heap_bytes", t.samples[mLive].Value.Uint64(), "took", took)
}
