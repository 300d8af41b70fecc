package ratelimit

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// clock is a manual clock for the limiter.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func mustAllow(t *testing.T, l *Limiter, key string, want bool) time.Duration {
	t.Helper()
	ok, retry := l.Allow(key)
	if ok != want {
		t.Fatalf("Allow(%q) = %v (retry %v), want %v", key, ok, retry, want)
	}
	if ok && retry != 0 || !ok && retry <= 0 {
		t.Fatalf("Allow(%q) = %v with retry %v", key, ok, retry)
	}
	return retry
}

// A bucket starts full, gives burst tokens at once, then one per 1/rate;
// the refusal says when the next token comes.
func TestBurstThenRate(t *testing.T) {
	c := newClock()
	l := New(2, 4, 100).WithClock(c.now) // 2 a second, burst 4
	for range 4 {
		mustAllow(t, l, "a", true)
	}
	if retry := mustAllow(t, l, "a", false); retry != 500*time.Millisecond {
		t.Fatalf("retry %v, want 500ms", retry)
	}
	c.advance(200 * time.Millisecond) // 0.4 tokens
	if retry := mustAllow(t, l, "a", false); retry != 300*time.Millisecond {
		t.Fatalf("retry %v, want 300ms", retry)
	}
	c.advance(300 * time.Millisecond) // 1 token
	mustAllow(t, l, "a", true)
	mustAllow(t, l, "a", false)
	// Another key has its own bucket.
	for range 4 {
		mustAllow(t, l, "b", true)
	}
	mustAllow(t, l, "b", false)
	// A long wait refills to burst, never beyond.
	c.advance(time.Hour)
	for range 4 {
		mustAllow(t, l, "a", true)
	}
	mustAllow(t, l, "a", false)
}

// Buckets idle long enough to be full again are dropped: the map holds
// only recently active keys, and a dropped key starts full as it would
// have been anyway.
func TestIdleBucketsAreDropped(t *testing.T) {
	c := newClock()
	l := New(10, 20, 1000).WithClock(c.now) // full again after 2 s
	for i := range 100 {
		mustAllow(t, l, fmt.Sprint("k", i), true)
	}
	if n := l.Len(); n != 100 {
		t.Fatalf("Len %d, want 100", n)
	}
	c.advance(1 * time.Second)
	mustAllow(t, l, "k0", true) // k0 used again: kept; the rest not yet full
	if n := l.Len(); n != 100 {
		t.Fatalf("Len %d after 1 s, want 100", n)
	}
	c.advance(1500 * time.Millisecond) // k1..k99 idle 2.5 s, k0 1.5 s
	mustAllow(t, l, "new", true)
	if n := l.Len(); n != 2 {
		t.Fatalf("Len %d, want 2 (k0 and new)", n)
	}
}

// However many keys come, the limiter holds at most max buckets; a new
// key evicts the least recently used, which then starts full.
func TestBoundedKeys(t *testing.T) {
	c := newClock()
	l := New(0.001, 2, 50).WithClock(c.now) // never refills within the test
	mustAllow(t, l, "victim", true)
	mustAllow(t, l, "victim", true)
	mustAllow(t, l, "victim", false)
	for i := range 10_000 {
		l.Allow(fmt.Sprint("attacker-", i))
		if n := l.Len(); n > 50 {
			t.Fatalf("Len %d > 50 after %d keys", n, i+1)
		}
	}
	if n := l.Len(); n != 50 {
		t.Fatalf("Len %d, want 50", n)
	}
	// The victim's bucket was evicted: it starts full, not refused forever.
	mustAllow(t, l, "victim", true)
	// A key in use is kept while others come and go: use it between each.
	mustAllow(t, l, "recent", true)
	for i := range 49 {
		l.Allow(fmt.Sprint("other-", i))
	}
	mustAllow(t, l, "recent", true)
	mustAllow(t, l, "recent", false)
}

func TestConcurrentUse(t *testing.T) {
	l := New(0.001, 100, 1000)
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if ok, _ := l.Allow("shared"); ok {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if allowed != 100 {
		t.Fatalf("%d allowed, want exactly the burst of 100", allowed)
	}
}
