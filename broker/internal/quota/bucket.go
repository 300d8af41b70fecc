package quota

import (
	"sync"
	"time"
)

// Bucket is a token bucket refilled continuously at Rate tokens per second up
// to Burst. Take allocates nothing; SetRate changes the limits live without
// losing the tokens already earned (they are capped at the new burst).
type Bucket struct {
	mu     sync.Mutex
	rate   float64 // tokens per second; <= 0 means unlimited
	burst  float64
	tokens float64
	last   int64 // unix nanos of the last refill
}

// NewBucket returns a full bucket.
func NewBucket(rate, burst float64) *Bucket {
	b := &Bucket{}
	b.SetRate(rate, burst)
	b.tokens = b.burst
	return b
}

// SetRate changes the refill rate and burst.
func (b *Bucket) SetRate(rate, burst float64) {
	if burst < rate {
		burst = rate
	}
	b.mu.Lock()
	b.rate, b.burst = rate, burst
	if b.tokens > burst {
		b.tokens = burst
	}
	b.mu.Unlock()
}

// Take removes n tokens at now if there are enough and reports whether it
// did. A request larger than the burst can never pass.
func (b *Bucket) Take(now time.Time, n float64) bool {
	t := now.UnixNano()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rate <= 0 {
		return true
	}
	if b.last != 0 && t > b.last {
		b.tokens += float64(t-b.last) / 1e9 * b.rate
		if b.tokens > b.burst {
			b.tokens = b.burst
		}
	}
	if t > b.last {
		b.last = t
	}
	if b.tokens < n {
		return false
	}
	b.tokens -= n
	return true
}

// Reserve removes n tokens at now even when that leaves the bucket in debt
// (down to minus one burst) and returns how long the caller should wait
// for the debt to be repaid: the way to throttle a sender that cannot be
// refused. A request that would go deeper into debt than one burst returns
// false and takes nothing.
func (b *Bucket) Reserve(now time.Time, n float64) (time.Duration, bool) {
	t := now.UnixNano()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rate <= 0 {
		return 0, true
	}
	if b.last != 0 && t > b.last {
		b.tokens += float64(t-b.last) / 1e9 * b.rate
		if b.tokens > b.burst {
			b.tokens = b.burst
		}
	}
	if t > b.last {
		b.last = t
	}
	if b.tokens-n < -b.burst {
		return 0, false
	}
	b.tokens -= n
	if b.tokens >= 0 {
		return 0, true
	}
	return time.Duration(-b.tokens / b.rate * 1e9), true
}
