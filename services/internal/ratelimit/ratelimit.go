// Package ratelimit provides token buckets keyed by a string (the API keys
// them by account id), kept in memory with a bounded number of buckets.
//
// A bucket that has been left alone long enough to fill up again
// (burst/rate) behaves exactly like a new one, so it is dropped: the map
// holds only the keys that were active within the last burst/rate. Buckets
// are kept in least-recently-used order, which is also the order of their
// last use, so dropping them costs O(1) per call. When the map still holds
// max buckets, a new key evicts the least recently used one, which then
// starts again with a full bucket: memory stays bounded, and a flood of new
// keys cannot lock out an existing one (at worst it earns one burst more).
package ratelimit

import (
	"container/list"
	"math"
	"sync"
	"time"
)

// Limiter is a set of token buckets, one per key. It is safe for
// concurrent use.
type Limiter struct {
	rate  float64 // tokens per second
	burst float64 // bucket size
	fill  time.Duration
	max   int
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*list.Element // values *bucket
	lru     list.List                // front: most recently used
}

type bucket struct {
	key    string
	tokens float64
	at     time.Time // when tokens was last brought up to date
}

// New returns a limiter whose buckets refill at rate tokens a second, hold
// at most burst tokens (a new key starts full) and number at most maxKeys.
// rate must be positive, burst and maxKeys at least 1.
func New(rate float64, burst, maxKeys int) *Limiter {
	if !(rate > 0) || burst < 1 || maxKeys < 1 {
		panic("ratelimit: rate must be positive, burst and maxKeys at least 1")
	}
	return &Limiter{
		rate: rate, burst: float64(burst), max: maxKeys, now: time.Now,
		fill:    seconds(float64(burst) / rate),
		buckets: make(map[string]*list.Element),
	}
}

// WithClock sets the limiter's clock (tests). It returns l.
func (l *Limiter) WithClock(now func() time.Time) *Limiter {
	l.now = now
	return l
}

// Allow takes a token from key's bucket. When the bucket is empty it
// takes nothing and says how long until the next token.
func (l *Limiter) Allow(key string) (ok bool, retryAfter time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropFullLocked(now)
	var b *bucket
	if e, found := l.buckets[key]; found {
		b = e.Value.(*bucket)
		b.tokens = min(l.burst, b.tokens+now.Sub(b.at).Seconds()*l.rate)
		b.at = now
		l.lru.MoveToFront(e)
	} else {
		if len(l.buckets) >= l.max {
			l.removeLocked(l.lru.Back())
		}
		b = &bucket{key: key, tokens: l.burst, at: now}
		l.buckets[key] = l.lru.PushFront(b)
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, seconds((1 - b.tokens) / l.rate)
}

// seconds converts s to a Duration, rounding up, at most the largest one.
func seconds(s float64) time.Duration {
	ns := math.Ceil(s * float64(time.Second))
	if ns >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// Len returns how many buckets the limiter holds.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// dropFullLocked drops the buckets unused for long enough to be full
// again, oldest first.
func (l *Limiter) dropFullLocked(now time.Time) {
	for e := l.lru.Back(); e != nil; e = l.lru.Back() {
		if now.Sub(e.Value.(*bucket).at) < l.fill {
			return
		}
		l.removeLocked(e)
	}
}

func (l *Limiter) removeLocked(e *list.Element) {
	delete(l.buckets, e.Value.(*bucket).key)
	l.lru.Remove(e)
}
