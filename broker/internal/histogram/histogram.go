// Package histogram records latencies in a log-linear histogram, the layout
// HdrHistogram uses, small enough to keep one per subscriber and merge.
//
// Values (nanoseconds, or any non-negative integer) below 2^precision are
// counted exactly. Above that, each power-of-two range is split into
// 2^(precision-1) equal buckets, so a bucket is at most 1/2^(precision-1)
// of its value wide:
//
//	index 0 .. S-1                 value v exactly          (S = 2^precision)
//	index S + (e-1)*S/2 + (t-S/2)  t = v >> e, e = bitlen(v) - precision
//	                               covers [t<<e, (t+1)<<e - 1]
//
// With precision 7 a quantile is reported within 1/64 (1.6%) of the true
// value, and the exact minimum and maximum are kept beside the buckets.
// Recording allocates nothing; a Histogram is not safe for concurrent use.
package histogram

import (
	"math"
	"math/bits"
)

const (
	precision = 7
	subCount  = 1 << precision // S: exact values below this
	halfCount = subCount / 2   // buckets per power of two above S
	// maxExp bounds the exponent: values up to 2^(maxExp+precision) - 1
	// (about 2.4 hours in nanoseconds) get buckets; larger ones are clamped
	// into the last bucket and still set Max exactly.
	maxExp     = 36
	numBuckets = subCount + maxExp*halfCount
)

// Histogram counts values in log-linear buckets. The zero value is not
// usable; call New.
type Histogram struct {
	counts []uint64
	total  uint64
	sum    float64
	min    int64
	max    int64
}

// New returns an empty histogram.
func New() *Histogram {
	return &Histogram{counts: make([]uint64, numBuckets), min: math.MaxInt64}
}

// bucket returns the index for v (v >= 0).
func bucket(v int64) int {
	u := uint64(v)
	if u < subCount {
		return int(u)
	}
	e := bits.Len64(u) - precision
	if e > maxExp {
		return numBuckets - 1
	}
	t := int(u >> uint(e))
	return subCount + (e-1)*halfCount + (t - halfCount)
}

// upper returns the largest value that falls in bucket i.
func upper(i int) int64 {
	if i < subCount {
		return int64(i)
	}
	j := i - subCount
	e := j/halfCount + 1
	t := int64(j%halfCount + halfCount)
	return (t+1)<<uint(e) - 1
}

// Record counts one value; negative values count as 0.
func (h *Histogram) Record(v int64) {
	if v < 0 {
		v = 0
	}
	h.counts[bucket(v)]++
	h.total++
	h.sum += float64(v)
	if v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
}

// Count returns the number of values recorded.
func (h *Histogram) Count() uint64 { return h.total }

// Min returns the smallest value recorded, or 0 when empty.
func (h *Histogram) Min() int64 {
	if h.total == 0 {
		return 0
	}
	return h.min
}

// Max returns the largest value recorded, or 0 when empty.
func (h *Histogram) Max() int64 { return h.max }

// Mean returns the arithmetic mean, or 0 when empty.
func (h *Histogram) Mean() float64 {
	if h.total == 0 {
		return 0
	}
	return h.sum / float64(h.total)
}

// Quantile returns the value at quantile q (0 <= q <= 1): the upper bound of
// the bucket holding the ceil(q*count)-th smallest value, clamped to the
// exact minimum and maximum. It returns 0 when empty.
func (h *Histogram) Quantile(q float64) int64 {
	if h.total == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := uint64(math.Ceil(q * float64(h.total)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			if i == numBuckets-1 {
				return h.max // the clamped bucket has no upper bound of its own
			}
			return min(max(upper(i), h.min), h.max)
		}
	}
	return h.max
}

// Merge adds every value of o into h.
func (h *Histogram) Merge(o *Histogram) {
	if o.total == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.sum += o.sum
	h.min = min(h.min, o.min)
	h.max = max(h.max, o.max)
}

// Reset empties h, keeping its memory.
func (h *Histogram) Reset() {
	clear(h.counts)
	h.total, h.sum, h.min, h.max = 0, 0, math.MaxInt64, 0
}
