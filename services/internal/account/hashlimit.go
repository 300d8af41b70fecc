package account

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"time"
)

// ErrBusy is returned when a password hash waited for a free slot longer
// than its context or the limiter allow.
var ErrBusy = errors.New("account: too many password hashes in progress")

// DefaultHashWait is how long a hash waits for a slot when its context
// allows longer.
const DefaultHashWait = 5 * time.Second

// DefaultHashConcurrency is max(2, GOMAXPROCS).
func DefaultHashConcurrency() int { return max(2, runtime.GOMAXPROCS(0)) }

// HashLimiter bounds concurrent argon2id hashes: each takes
// DefaultParams.MemoryKiB of memory and a core, so an unbounded burst of
// signups or logins would exhaust the API's memory.
type HashLimiter struct {
	slots   chan struct{}
	maxWait time.Duration
	runs    atomic.Uint64
}

// NewHashLimiter returns a limiter running at most n hashes at once; a
// hash waits at most maxWait for a slot.
func NewHashLimiter(n int, maxWait time.Duration) *HashLimiter {
	return &HashLimiter{slots: make(chan struct{}, max(n, 1)), maxWait: maxWait}
}

// Do runs fn once a slot is free. It returns ErrBusy when no slot freed
// before ctx's deadline or maxWait, and ctx's error when ctx was
// cancelled (fn then does not run).
func (l *HashLimiter) Do(ctx context.Context, fn func()) error {
	select {
	case l.slots <- struct{}{}:
	default:
		t := time.NewTimer(l.maxWait)
		defer t.Stop()
		select {
		case l.slots <- struct{}{}:
		case <-t.C:
			return ErrBusy
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return ErrBusy
			}
			return ctx.Err()
		}
	}
	defer func() { <-l.slots }()
	l.runs.Add(1)
	fn()
	return nil
}

// Runs returns how many hashes (or checks) the limiter has run.
func (l *HashLimiter) Runs() uint64 { return l.runs.Load() }
