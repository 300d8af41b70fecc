package histogram

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// TestAtomicMatchesHistogram records the same values in an Atomic and a
// Histogram: a Take gives the same count, sum, extremes and quantiles.
func TestAtomicMatchesHistogram(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var a Atomic
	h := New()
	for range 50000 {
		v := int64(r.ExpFloat64() * 200e3) // around 200 µs in nanoseconds
		a.Record(v)
		h.Record(v)
	}
	a.Record(0)
	h.Record(0)
	a.Record(math.MaxInt64 - 1) // beyond the range: the last bucket
	h.Record(math.MaxInt64 - 1)
	s := a.Take()
	if s.Count != h.Count() || s.Min != h.Min() || s.Max != h.Max() {
		t.Fatalf("count %d min %d max %d, want %d %d %d", s.Count, s.Min, s.Max, h.Count(), h.Min(), h.Max())
	}
	if !slices.IsSortedFunc(s.Buckets, func(x, y Bucket) int { return int(x.Upper>>1 - y.Upper>>1) }) {
		t.Fatal("buckets not sorted by Upper")
	}
	for _, q := range []float64{0, 0.001, 0.5, 0.9, 0.99, 0.9999, 1} {
		if got, want := s.Quantile(q), h.Quantile(q); got != want {
			t.Errorf("Quantile(%v) = %d, histogram says %d", q, got, want)
		}
	}
	if e := a.Take(); e.Count != 0 || len(e.Buckets) != 0 || e.Sum != 0 || e.Max != 0 {
		t.Errorf("after Take: %+v, want empty", e)
	}
}

// TestSnapshotMerge checks that merging the sparse snapshots of two
// histograms (adding counts of equal bounds) answers as one histogram fed
// every value would, against a brute-force sort.
func TestSnapshotMerge(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var a, b Atomic
	var all []int64
	for i := range 20000 {
		v := 1000 + r.Int64N(5_000_000)
		if i%3 == 0 {
			a.Record(v)
		} else {
			b.Record(v)
		}
		all = append(all, v)
	}
	sa, sb := a.Take(), b.Take()
	counts := map[int64]uint64{}
	for _, x := range append(sa.Buckets, sb.Buckets...) {
		counts[x.Upper] += x.Count
	}
	var merged []Bucket
	for up, c := range counts {
		merged = append(merged, Bucket{up, c})
	}
	slices.SortFunc(merged, func(x, y Bucket) int {
		if x.Upper < y.Upper {
			return -1
		}
		return 1
	})
	slices.Sort(all)
	n := uint64(len(all))
	for _, q := range []float64{0.5, 0.9, 0.99} {
		got := Quantile(merged, n, min(sa.Min, sb.Min), max(sa.Max, sb.Max), q)
		want := all[int(math.Ceil(q*float64(n)))-1]
		if got < want || float64(got-want) > float64(want)/64 {
			t.Errorf("q%v = %d, exact %d: beyond 1/64", q, got, want)
		}
	}
}

// TestAtomicConcurrent records from several goroutines: nothing is lost.
func TestAtomicConcurrent(t *testing.T) {
	var a Atomic
	var wg sync.WaitGroup
	const workers, each = 8, 10000
	var taken uint64
	done := make(chan struct{})
	go func() { // takes while others record
		defer close(done)
		for range 50 {
			taken += a.Take().Count
		}
	}()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				a.Record(int64(w*1000 + i))
			}
		}()
	}
	wg.Wait()
	<-done
	taken += a.Take().Count
	if taken != workers*each {
		t.Fatalf("taken %d values, recorded %d", taken, workers*each)
	}
}

// TestAtomicRecordAllocations pins recording at 0 allocations once the
// rows of the values seen exist.
func TestAtomicRecordAllocations(t *testing.T) {
	var a Atomic
	vals := []int64{0, 900, 45_000, 1_200_000, 80_000_000}
	for _, v := range vals {
		a.Record(v)
	}
	a.Take() // rows are kept
	if n := testing.AllocsPerRun(1000, func() {
		for _, v := range vals {
			a.Record(v)
		}
	}); n != 0 {
		t.Fatalf("Record allocates %v times per run, want 0", n)
	}
}

func BenchmarkAtomicRecord(b *testing.B) {
	var a Atomic
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		v := int64(1000)
		for pb.Next() {
			a.Record(v)
			v = v*7%1_000_000 + 1000
		}
	})
}
