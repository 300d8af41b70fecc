package account

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestHashLimiterBound: with the bound at n, n+1 concurrent hashes never
// run more than n at once; while n hold their slots, another waits and
// gets ErrBusy when its deadline passes, its work never run.
func TestHashLimiterBound(t *testing.T) {
	const n = 3
	l := NewHashLimiter(n, time.Minute)
	var running, peak atomic.Int32
	release := make(chan struct{})
	work := func() {
		cur := running.Add(1)
		for {
			p := peak.Load()
			if cur <= p || peak.CompareAndSwap(p, cur) {
				break
			}
		}
		<-release
		running.Add(-1)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n+1)
	for range n + 1 {
		wg.Go(func() { errs <- l.Do(context.Background(), work) })
	}
	deadline := time.Now().Add(10 * time.Second)
	for running.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d hashes started", running.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}

	// All n slots are held: a hash whose deadline passes gets ErrBusy.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	ran := false
	if err := l.Do(ctx, func() { ran = true }); !errors.Is(err, ErrBusy) || ran {
		t.Fatalf("a hash past its deadline: err %v, ran %v; want ErrBusy, not run", err, ran)
	}
	// A cancelled (not timed out) wait says so: the client left.
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if err := l.Do(cctx, func() { ran = true }); !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("a cancelled wait: err %v, ran %v", err, ran)
	}

	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if p := peak.Load(); p != n {
		t.Fatalf("peak %d hashes at once, want %d", p, n)
	}

	// The limiter's own wait bound: ErrBusy after maxWait with no deadline.
	short := NewHashLimiter(1, 20*time.Millisecond)
	hold := make(chan struct{})
	held := make(chan struct{})
	go func() { _ = short.Do(context.Background(), func() { close(held); <-hold }) }()
	<-held
	if err := short.Do(context.Background(), func() {}); !errors.Is(err, ErrBusy) {
		t.Fatalf("after maxWait: %v, want ErrBusy", err)
	}
	close(hold)
}
