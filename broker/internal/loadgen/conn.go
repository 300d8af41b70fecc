package loadgen

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"berth.dev/broker/internal/histogram"
)

// pingTimeout bounds the PINGREQ/PINGRESP check of one held session.
const pingTimeout = 10 * time.Second

// runConn dials up to each level, holds, verifies with PINGREQ and reports.
// Sessions stay open from one level to the next; at each level only the
// missing ones are dialled.
func runConn(ctx context.Context, cfg *Config, d *dialer, runID string, progress io.Writer) (*Report, error) {
	r := &Report{}
	var held []*client
	defer func() { closeClients(held, cfg.DialConcurrency) }()
	next := 0 // client id counter
	// Each level's PINGREQ resets the broker's keep-alive timer; between
	// two of them lie one level's dials and one hold, minutes at most.
	ka := keepAlive(cfg.Hold + 5*time.Minute)
	for _, target := range cfg.Levels {
		if ctx.Err() != nil {
			break
		}
		lr := LevelReport{Target: target, Reasons: map[string]int{}}
		need := target - len(held)
		var (
			mu      sync.Mutex
			fresh   []*client
			lat     = histogram.New()
			dialled atomic.Int64
			failed  atomic.Int64
		)
		fail := func(err error) {
			failed.Add(1)
			mu.Lock()
			lr.Reasons[classify(err)]++
			mu.Unlock()
		}
		base := len(held)
		stop := tickProgress(progress, func(el time.Duration) string {
			return fmt.Sprintf("[%4.0fs] level %d: connected %d failed %d", el.Seconds(), target,
				base+int(dialled.Load()), failed.Load())
		})
		start := time.Now()
		_ = parallelAll(ctx, need, cfg.DialConcurrency, func(i int) {
			t0 := time.Now()
			c, err := connect(ctx, d, connectOpts{
				clientID:  fmt.Sprintf("%s-%s-c%d", cfg.ClientPrefix, runID, next+i),
				keepAlive: ka, user: cfg.User, pass: cfg.Pass, v5: cfg.V5, writeBuf: 512, readBuf: 64,
			})
			if err != nil {
				fail(err)
				return
			}
			mu.Lock()
			lat.Record(time.Since(t0).Nanoseconds())
			fresh = append(fresh, c)
			mu.Unlock()
			dialled.Add(1)
		})
		next += need
		lr.DialSeconds = time.Since(start).Seconds()
		lr.Connect = summarize(lat)
		held = append(held, fresh...)

		// Hold, then verify every session still answers.
		select {
		case <-time.After(cfg.Hold):
		case <-ctx.Done():
		}
		if cfg.RSSPid > 0 {
			// What the held connections cost, before the pings wake them.
			if kib, err := residentKiB(cfg.RSSPid); err == nil {
				lr.HeldRSSKiB = kib
			} else if progress != nil {
				fmt.Fprintf(progress, "level %d: reading -rss-pid %d: %v\n", target, cfg.RSSPid, err)
			}
		}
		alive := make([]bool, len(held))
		_ = parallelAll(ctx, len(held), cfg.DialConcurrency, func(i int) {
			if err := held[i].ping(pingTimeout); err != nil {
				fail(err)
				return
			}
			alive[i] = true
		})
		stop()
		kept := held[:0]
		var dead []*client
		for i, c := range held {
			if alive[i] {
				kept = append(kept, c)
			} else {
				dead = append(dead, c)
			}
		}
		closeClients(dead, cfg.DialConcurrency)
		held = kept
		lr.Held = len(held)
		lr.Failed = int(failed.Load())
		if len(lr.Reasons) == 0 {
			lr.Reasons = nil
		}
		r.Levels = append(r.Levels, lr)
		if progress != nil {
			fmt.Fprintf(progress, "level %d: held %d failed %d %s\n", target, lr.Held, lr.Failed, fmtReasons(lr.Reasons))
		}
		if pct := 100 * float64(lr.Failed) / float64(target); pct > cfg.MaxConnFailPct {
			r.Failures = append(r.Failures, fmt.Sprintf("level %d: %d failures (%.2f%%) above -max-conn-fail %.2f%%: %s",
				target, lr.Failed, pct, cfg.MaxConnFailPct, fmtReasons(lr.Reasons)))
		}
	}
	if err := ctx.Err(); err != nil {
		r.Failures = append(r.Failures, "interrupted: "+err.Error())
	}
	return r, nil
}

// parallelAll runs fn(0..n-1), at most limit at a time, until ctx ends.
func parallelAll(ctx context.Context, n, limit int, fn func(i int)) error {
	var wg sync.WaitGroup
	sem := make(chan struct{}, limit)
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(i)
		})
	}
	wg.Wait()
	return nil
}

// closeClients disconnects clients, at most limit at a time.
func closeClients(cs []*client, limit int) {
	_ = parallelAll(context.Background(), len(cs), limit, func(i int) { cs[i].close() })
}

// tickProgress prints line(elapsed) to w every second until stopped.
func tickProgress(w io.Writer, line func(time.Duration) string) (stop func()) {
	if w == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		start := time.Now()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				fmt.Fprintln(w, line(now.Sub(start)))
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
