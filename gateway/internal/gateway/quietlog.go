package gateway

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// quietLog bounds the log lines of an event that can come in floods (a
// connection refused at accept, a CONNECT refused): in each interval the
// first burst events are logged, the rest only counted, and when the
// interval ends one summary line says how many were not logged. A flood
// costs a counter, not a line per connection; the metrics still count
// every event. The caller writes the line itself when allow says so, so a
// suppressed event builds no log arguments either.
type quietLog struct {
	log     *slog.Logger
	level   slog.Level // of the summary line
	summary string     // the summary line's message
	every   time.Duration
	burst   int

	mu         sync.Mutex
	start      time.Time   // of the current interval; zero before the first event
	logged     int         // events logged in the current interval
	suppressed int         // events not logged since the last summary
	timer      *time.Timer // writes the summary when the interval ends
	stopped    bool
}

func newQuietLog(log *slog.Logger, level slog.Level, summary string, every time.Duration, burst int) *quietLog {
	return &quietLog{log: log, level: level, summary: summary, every: every, burst: max(burst, 1)}
}

// allow reports whether the event at now is to be logged; if not, it is
// counted for the interval's summary.
func (q *quietLog) allow(now time.Time) bool {
	q.mu.Lock()
	var ended int // suppressed in an interval whose summary is not written yet
	if q.start.IsZero() || now.Sub(q.start) >= q.every {
		ended = q.takeLocked()
		q.start, q.logged = now, 0
	}
	ok := q.logged < q.burst
	if ok {
		q.logged++
	} else {
		q.suppressed++
		if q.suppressed == 1 && !q.stopped {
			start := q.start
			q.timer = time.AfterFunc(start.Add(q.every).Sub(now), func() { q.flush(start) })
		}
	}
	q.mu.Unlock()
	q.write(ended)
	return ok
}

// flush writes the summary of the interval that began at start, unless a
// later event already did.
func (q *quietLog) flush(start time.Time) {
	q.mu.Lock()
	var n int
	if q.start.Equal(start) {
		n = q.takeLocked()
	}
	q.mu.Unlock()
	q.write(n)
}

// stop writes the summary still due and arms no more timers (Shutdown).
func (q *quietLog) stop() {
	q.mu.Lock()
	q.stopped = true
	n := q.takeLocked()
	q.mu.Unlock()
	q.write(n)
}

// takeLocked returns the count of events not logged since the last
// summary, resetting it and stopping the summary's timer.
func (q *quietLog) takeLocked() int {
	n := q.suppressed
	q.suppressed = 0
	if q.timer != nil {
		q.timer.Stop()
		q.timer = nil
	}
	return n
}

func (q *quietLog) write(suppressed int) {
	if suppressed > 0 {
		q.log.Log(context.Background(), q.level, q.summary, "suppressed", suppressed, "interval", q.every, "logged_per_interval", q.burst)
	}
}
