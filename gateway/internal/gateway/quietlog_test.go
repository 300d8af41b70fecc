package gateway

import (
	"log/slog"
	"testing"
	"time"

	"berth.dev/testenv"
)

// TestQuietLog: in an interval the first burst events are allowed and the
// rest counted; the summary line with their count comes when the interval
// ends, by itself; the next interval allows burst events again, and an
// interval with nothing suppressed writes no summary.
func TestQuietLog(t *testing.T) {
	const burst, flood = 3, 40
	const every = 50 * time.Millisecond
	logs := &testenv.LogBuffer{}
	q := newQuietLog(slog.New(slog.NewJSONHandler(logs, nil)), slog.LevelInfo, "summary", every, burst)
	t.Cleanup(q.stop)
	t0 := time.Now()
	allowed := 0
	for range flood {
		if q.allow(t0) {
			allowed++
		}
	}
	if allowed != burst {
		t.Fatalf("%d of %d events allowed in one interval, want %d", allowed, flood, burst)
	}
	waitUntil(t, func() bool { return len(logs.Records(t, "summary")) > 0 }) // the interval's timer
	s := logs.Records(t, "summary")
	if len(s) != 1 || s[0]["suppressed"] != float64(flood-burst) || s[0]["level"] != "INFO" {
		t.Fatalf("summary lines %v, want one at INFO with suppressed %d", s, flood-burst)
	}

	// The next interval: burst more, then one more summary at stop.
	t1 := t0.Add(every)
	allowed = 0
	for range burst + 2 {
		if q.allow(t1) {
			allowed++
		}
	}
	if allowed != burst {
		t.Fatalf("next interval: %d allowed, want %d", allowed, burst)
	}
	q.stop()
	if s := logs.Records(t, "summary"); len(s) != 2 || s[1]["suppressed"] != float64(2) {
		t.Fatalf("summary lines %v, want a second with suppressed 2", s)
	}

	// Within the burst: no summary.
	t2 := t1.Add(every)
	if !q.allow(t2) {
		t.Fatal("first event of an interval not allowed")
	}
	q.stop()
	if s := logs.Records(t, "summary"); len(s) != 2 {
		t.Fatalf("summary lines %v after an interval within its burst, want still 2", s)
	}
}
