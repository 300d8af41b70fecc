package histogram

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestQuantileExactRange(t *testing.T) {
	h := New()
	for v := int64(1); v <= 100; v++ {
		h.Record(v)
	}
	tests := []struct {
		q    float64
		want int64
	}{
		{0, 1},
		{0.01, 1},
		{0.5, 50},
		{0.9, 90},
		{0.99, 99},
		{0.999, 100},
		{1, 100},
	}
	for _, tt := range tests {
		if got := h.Quantile(tt.q); got != tt.want {
			t.Errorf("Quantile(%v) = %d, want %d", tt.q, got, tt.want)
		}
	}
	if h.Count() != 100 || h.Min() != 1 || h.Max() != 100 || h.Mean() != 50.5 {
		t.Errorf("count %d min %d max %d mean %v", h.Count(), h.Min(), h.Max(), h.Mean())
	}
}

// TestQuantileRelativeError checks the log-linear buckets against exact
// order statistics over several magnitudes: within 1/64 of the true value.
func TestQuantileRelativeError(t *testing.T) {
	tests := []struct {
		name     string
		lo, span int64
	}{
		{"microseconds", 1_000, 1_000_000},
		{"milliseconds", 1_000_000, 1_000_000_000},
		{"wide", 1, 10_000_000_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			h := New()
			vals := make([]int64, 100_000)
			for i := range vals {
				vals[i] = tt.lo + rng.Int64N(tt.span)
				h.Record(vals[i])
			}
			slices.Sort(vals)
			for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 1} {
				rank := int(math.Ceil(q*float64(len(vals)))) - 1
				exact := vals[rank]
				got := h.Quantile(q)
				if got < exact || float64(got-exact) > float64(exact)/64 {
					t.Errorf("Quantile(%v) = %d, exact %d: outside [exact, exact*(1+1/64)]", q, got, exact)
				}
			}
		})
	}
}

func TestBucketBounds(t *testing.T) {
	// Every value must land in a bucket whose upper bound is >= it and whose
	// predecessor's upper bound is < it.
	for _, v := range []int64{0, 1, 127, 128, 129, 255, 256, 1000, 1 << 20, 1<<20 + 1, 123456789, 1 << 42} {
		i := bucket(v)
		if upper(i) < v {
			t.Errorf("value %d: bucket %d upper %d below it", v, i, upper(i))
		}
		if i > 0 && upper(i-1) >= v {
			t.Errorf("value %d: previous bucket %d upper %d not below it", v, i-1, upper(i-1))
		}
	}
}

func TestClampAndEdges(t *testing.T) {
	h := New()
	if h.Quantile(0.5) != 0 || h.Min() != 0 || h.Max() != 0 || h.Mean() != 0 {
		t.Fatal("empty histogram should report zeros")
	}
	h.Record(-5)
	h.Record(math.MaxInt64)
	if h.Count() != 2 || h.Min() != 0 || h.Max() != math.MaxInt64 {
		t.Fatalf("count %d min %d max %d", h.Count(), h.Min(), h.Max())
	}
	if got := h.Quantile(1); got != math.MaxInt64 {
		t.Errorf("Quantile(1) = %d, want the exact max", got)
	}
}

func TestMergeAndReset(t *testing.T) {
	a, b := New(), New()
	for v := int64(1); v <= 50; v++ {
		a.Record(v)
		b.Record(v + 50)
	}
	a.Merge(b)
	a.Merge(New())
	if a.Count() != 100 || a.Min() != 1 || a.Max() != 100 || a.Quantile(0.5) != 50 || a.Quantile(0.99) != 99 {
		t.Fatalf("merged: count %d min %d max %d p50 %d", a.Count(), a.Min(), a.Max(), a.Quantile(0.5))
	}
	a.Reset()
	if a.Count() != 0 || a.Quantile(0.5) != 0 {
		t.Fatal("reset histogram not empty")
	}
	a.Record(7)
	if a.Min() != 7 || a.Max() != 7 {
		t.Fatalf("after reset min %d max %d", a.Min(), a.Max())
	}
}

func TestRecordAllocs(t *testing.T) {
	h := New()
	var v int64
	if n := testing.AllocsPerRun(1000, func() { v += 977; h.Record(v) }); n != 0 {
		t.Fatalf("Record allocates %v per call", n)
	}
}

func BenchmarkRecord(b *testing.B) {
	h := New()
	b.ReportAllocs()
	b.SetBytes(8)
	var v int64
	for b.Loop() {
		v = (v + 7919) & (1<<30 - 1)
		h.Record(v)
	}
}
