package metering

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/testenv"
)

// waitFor polls cond every 10ms for up to 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// startWorker runs a worker on its own pool (as a separate process would
// have) until the returned stop is called.
func startWorker(t *testing.T, dbURL string) (*Worker, func()) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	w := New(pool, Config{Interval: time.Hour, Poll: 20 * time.Millisecond}, quietLog())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		pool.Close()
	}
	t.Cleanup(stop)
	return w, stop
}

// TestOneLeaderAtATime: of two workers one leads; the other waits (polling
// the lock) and takes over when the leader stops, or when the leader's
// database session dies as a killed process's would.
func TestOneLeaderAtATime(t *testing.T) {
	dbURL := testenv.DatabaseURL(t)
	admin, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	holders := func() int {
		var n int
		if err := admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
			AND (classid::bigint << 32) | objid::bigint = $1`, LockKey).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	w1, stop1 := startWorker(t, dbURL)
	waitFor(t, "the first worker to lead", w1.Leading)
	w2, _ := startWorker(t, dbURL)
	// The second keeps polling (20ms) and never gets the lock while the
	// first holds it: watch it for 25 of its polls.
	for range 25 {
		if w2.Leading() {
			t.Fatal("two workers lead at once")
		}
		if n := holders(); n != 1 {
			t.Fatalf("%d sessions hold the lock, want 1", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop1()
	waitFor(t, "the second worker to take over", w2.Leading)

	// A third waits; the leader's session is terminated (a killed worker):
	// the lock goes with it and the third takes over.
	w3, _ := startWorker(t, dbURL)
	if _, err := admin.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND (classid::bigint << 32) | objid::bigint = $1`, LockKey); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the third worker to take over from the killed session", w3.Leading)
	if n := holders(); n != 1 {
		t.Fatalf("%d sessions hold the lock after the takeover, want 1", n)
	}
}
