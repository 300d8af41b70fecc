package loadgen

import (
	"fmt"
	"io"
	"sync"
	"time"

	"berth.dev/broker/internal/histogram"
)

// startProgress prints one line a second to w (if not nil) with the last
// second's rates, p99 and error count, and returns a function that stops it
// and waits for it.
func (t *traffic) startProgress(w io.Writer) (stop func()) {
	if w == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		start := time.Now()
		win, discard := histogram.New(), histogram.New()
		var lastSent, lastAcked, lastDelivered uint64
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				var sent, acked uint64
				for _, p := range t.pubs {
					sent += p.sent.Load()
					acked += p.acked.Load()
				}
				delivered := t.delivered()
				win.Reset()
				label := "ack"
				if len(t.subs) > 0 {
					label = "e2e"
					for _, s := range t.subs {
						s.lat.takeWindow(win)
					}
				}
				for _, p := range t.pubs {
					if len(t.subs) > 0 {
						discard.Reset() // e2e is shown; empty the ack window anyway
						p.ackLat.takeWindow(discard)
						continue
					}
					p.ackLat.takeWindow(win)
				}
				fmt.Fprintf(w, "[%4.0fs] sent %s/s acked %s/s delivered %s/s %s p99 %s errors %d\n",
					now.Sub(start).Seconds(), si(sent-lastSent), si(acked-lastAcked), si(delivered-lastDelivered),
					label, time.Duration(win.Quantile(0.99)).Round(time.Microsecond), t.errs.total()+t.dropped())
				lastSent, lastAcked, lastDelivered = sent, acked, delivered
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// dropped counts connections whose reader has already stopped.
func (t *traffic) dropped() uint64 {
	var n uint64
	for _, p := range t.pubs {
		if closed(p.readDone) {
			n++
		}
	}
	for _, s := range t.subs {
		if closed(s.readDone) {
			n++
		}
	}
	return n
}

// si formats a count with a k or M suffix.
func si(n uint64) string {
	switch {
	case n >= 10_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 10_000:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}
