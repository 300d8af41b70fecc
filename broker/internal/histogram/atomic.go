package histogram

import (
	"math"
	"sync/atomic"
)

// rowWidth is how many buckets an Atomic allocates at once.
const rowWidth = halfCount

// numRows covers every bucket: numBuckets is a multiple of rowWidth.
const numRows = numBuckets / rowWidth

// row is rowWidth consecutive buckets of an Atomic.
type row [rowWidth]atomic.Uint64

// Atomic is a Histogram safe for concurrent recording without a lock, for
// a counter shared by many goroutines (one tenant's latencies on a node).
// It has the same buckets as Histogram, allocated a row of 64 (512 bytes)
// at a time on first use, so an Atomic that sees latencies in a few powers
// of two holds a few rows, not all 2432 buckets. Recording is a few atomic
// operations and allocates nothing once the rows of the values seen exist
// (at most numRows allocations over its life: rows are kept by Take).
//
// The zero value is an empty histogram ready for use.
type Atomic struct {
	rows [numRows]atomic.Pointer[row]
	sum  atomic.Uint64
	min  atomic.Int64 // smallest value + 1; 0 when none since the last Take
	max  atomic.Int64 // largest value + 1; 0 when none
}

// Record counts one value; negative values count as 0, and
// math.MaxInt64 as one less.
func (a *Atomic) Record(v int64) {
	v = min(max(v, 0), math.MaxInt64-1)
	i := bucket(v)
	rp := &a.rows[i/rowWidth]
	r := rp.Load()
	if r == nil {
		r = new(row)
		if !rp.CompareAndSwap(nil, r) {
			r = rp.Load()
		}
	}
	r[i%rowWidth].Add(1)
	a.sum.Add(uint64(v))
	v1 := v + 1
	for {
		m := a.min.Load()
		if m != 0 && m <= v1 || a.min.CompareAndSwap(m, v1) {
			break
		}
	}
	for {
		m := a.max.Load()
		if m >= v1 || a.max.CompareAndSwap(m, v1) {
			break
		}
	}
}

// Bucket is one non-empty bucket of a Snapshot: the largest value it can
// hold and how many values it counted. The last bucket (values beyond the
// histogram's range) has Upper math.MaxInt64.
type Bucket struct {
	Upper int64
	Count uint64
}

// Snapshot is a histogram's contents in sparse form: only the non-empty
// buckets, by increasing Upper. Snapshots of histograms with the same
// layout merge by adding the counts of equal Upper values.
type Snapshot struct {
	Count   uint64
	Sum     uint64 // of the values recorded (nanoseconds for latencies)
	Min     int64
	Max     int64
	Buckets []Bucket
}

// Take moves a's contents into a Snapshot, leaving a empty (its rows
// kept). Every recorded value's count lands in exactly one Take; a value
// recorded while Take runs may have its sum, minimum or maximum booked to
// the next one.
func (a *Atomic) Take() Snapshot {
	var s Snapshot
	for ri := range a.rows {
		r := a.rows[ri].Load()
		if r == nil {
			continue
		}
		for j := range r {
			if c := r[j].Swap(0); c != 0 {
				i := ri*rowWidth + j
				up := upper(i)
				if i == numBuckets-1 {
					up = math.MaxInt64
				}
				s.Buckets = append(s.Buckets, Bucket{Upper: up, Count: c})
				s.Count += c
			}
		}
	}
	s.Sum = a.sum.Swap(0)
	if m := a.min.Swap(0); m != 0 {
		s.Min = m - 1
	}
	if m := a.max.Swap(0); m != 0 {
		s.Max = m - 1
	}
	if s.Count == 0 {
		return Snapshot{}
	}
	s.Max = max(s.Max, s.Min)
	return s
}

// Quantile returns the value at quantile q (0 <= q <= 1) of a snapshot
// whose Buckets are sorted by Upper, as Histogram.Quantile does: the upper
// bound of the bucket holding the ceil(q*count)-th smallest value,
// clamped to the exact minimum and maximum; 0 when empty.
func (s *Snapshot) Quantile(q float64) int64 {
	return Quantile(s.Buckets, s.Count, s.Min, s.Max, q)
}

// Quantile is Snapshot.Quantile over buckets sorted by Upper holding
// count values between lo and hi.
func Quantile(buckets []Bucket, count uint64, lo, hi int64, q float64) int64 {
	if count == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := max(uint64(math.Ceil(q*float64(count))), 1)
	var seen uint64
	for _, b := range buckets {
		seen += b.Count
		if seen >= rank {
			return min(max(b.Upper, lo), hi)
		}
	}
	return hi
}
