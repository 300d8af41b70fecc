package shard

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/topic"
	"berth.dev/broker/internal/wal"
)

var (
	offlineSessions = flag.Int("offline-sessions", 100_000, "BenchmarkOfflineSessions: persistent offline sessions")
	recoveryRecords = flag.Int("recovery-records", 50_000, "BenchmarkRecovery: messages in the log to recover")
)

// offlineFleet creates n offline persistent sessions on sh, each
// subscribed to fleet/# and dev/<i>/#, then publishes 3 fleet-wide QoS 1
// messages (1 KiB) and one QoS 1 message (256 B) to every device: 4
// pending messages per session, all in the log.
func offlineFleet(tb testing.TB, sh *Shard, n int, subscribed func()) {
	tb.Helper()
	sh.mu.Lock()
	ids := make([]topic.SubscriberID, n)
	for i := range n {
		sess := sh.newSessionLocked("dev-" + strconv.Itoa(i))
		sess.expiry = neverExpires
		ids[i] = sess.id
	}
	sh.mu.Unlock()
	for i, id := range ids {
		for _, f := range []string{"fleet/#", "dev/" + strconv.Itoa(i) + "/#"} {
			if _, err := sh.tree.Subscribe(id, f, topic.Options{QoS: 1}); err != nil {
				tb.Fatal(err)
			}
		}
	}
	subscribed()
	big := make([]byte, 1024)
	for range 3 {
		sh.publishInternal(newSimpleMessage("fleet/update", append([]byte(nil), big...), 1, false, time.Now()))
	}
	small := make([]byte, 256)
	for i := range n {
		sh.publishInternal(newSimpleMessage("dev/"+strconv.Itoa(i)+"/cmd", append([]byte(nil), small...), 1, false, time.Now()))
	}
}

// heapAndRSS returns the live heap (after a GC) and the resident set size.
func heapAndRSS() (heap, rss uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		f := strings.Fields(string(b))
		if len(f) > 1 {
			pages, _ := strconv.ParseUint(f[1], 10, 64)
			rss = pages * uint64(os.Getpagesize())
		}
	}
	return ms.HeapAlloc, rss
}

// offlineCost is what an offline fleet costs.
type offlineCost struct {
	perSession float64 // heap bytes per session, subscriptions and pending messages included
	perPending float64 // heap bytes per pending message
	heap       uint64  // heap bytes of the whole fleet
	rss        uint64  // process RSS afterwards
	checkpoint time.Duration
}

// measureOffline builds an offline fleet of n sessions and measures it.
func measureOffline(tb testing.TB, n int) offlineCost {
	tb.Helper()
	st, err := store.OpenWAL(store.WALOptions{Dir: tb.TempDir(), Fsync: wal.SyncNever})
	if err != nil {
		tb.Fatal(err)
	}
	defer st.Close()
	sh := New(Options{Store: st, MessageLog: st.Messages(), SysInterval: -1})
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = sh.Shutdown(ctx)
	}()
	before, _ := heapAndRSS()
	var mid uint64
	offlineFleet(tb, sh, n, func() { mid, _ = heapAndRSS() })
	after, rss := heapAndRSS()
	pending := 0
	sh.mu.RLock()
	for _, sess := range sh.sessions {
		sess.mu.Lock()
		if sess.queue.len() != 0 {
			tb.Errorf("session %s holds %d messages in memory", sess.clientID, sess.queue.len())
		}
		pending += sess.stored.len()
		sess.mu.Unlock()
	}
	sh.mu.RUnlock()
	if pending != 4*n {
		tb.Fatalf("%d pending messages, want %d", pending, 4*n)
	}
	start := time.Now()
	sh.checkpoint(true)
	took := time.Since(start)
	runtime.KeepAlive(sh)
	return offlineCost{
		checkpoint: took,
		perSession: float64(after-before) / float64(n),
		perPending: (float64(after) - float64(mid)) / float64(pending),
		heap:       after - before, rss: rss,
	}
}

// TestOfflineSessionsCostDiskNotMemory: offline persistent sessions with
// pending messages hold 16-byte log offsets, not messages: with 4 pending
// messages each (3.25 KiB of payload per session) a pending message costs
// a few dozen heap bytes, and a whole session (two subscriptions
// included) stays under 3 KiB, so 100,000 fit in a few hundred MiB.
// BenchmarkOfflineSessions measures 100,000.
func TestOfflineSessionsCostDiskNotMemory(t *testing.T) {
	c := measureOffline(t, 20_000)
	t.Logf("20,000 offline sessions x 4 pending: heap +%.1f MiB (%.0f B/session, %.1f B/pending message), RSS %.1f MiB",
		float64(c.heap)/(1<<20), c.perSession, c.perPending, float64(c.rss)/(1<<20))
	if c.perPending > 64 {
		t.Fatalf("%.1f heap bytes per pending message, want <= 64 (an offset, not a copy)", c.perPending)
	}
	if c.perSession > 3072 {
		t.Fatalf("%.0f heap bytes per offline session, want <= 3072", c.perSession)
	}
}

// BenchmarkOfflineSessions reports the memory of -offline-sessions
// offline sessions with 4 pending messages each.
func BenchmarkOfflineSessions(b *testing.B) {
	for range b.N {
		c := measureOffline(b, *offlineSessions)
		b.ReportMetric(c.perSession, "heap-B/session")
		b.ReportMetric(c.perPending, "heap-B/pending")
		b.ReportMetric(float64(c.heap)/(1<<20), "heap-MiB")
		b.ReportMetric(float64(c.rss)/(1<<20), "RSS-MiB")
		b.ReportMetric(float64(c.checkpoint.Microseconds())/1000, "checkpoint-ms")
	}
}

// BenchmarkRecovery measures a restart: reopening the store and
// rebuilding the pending queues of 1,000 persistent sessions from a log of
// -recovery-records messages (each session subscribes to one of 100
// topics, so every message is pending for 10 sessions).
func BenchmarkRecovery(b *testing.B) {
	dir := b.TempDir()
	st, err := store.OpenWAL(store.WALOptions{Dir: dir, Fsync: wal.SyncNever})
	if err != nil {
		b.Fatal(err)
	}
	sh := New(Options{Store: st, MessageLog: st.Messages(), SysInterval: -1})
	sh.mu.Lock()
	var sessions []*session
	for i := range 1000 {
		sess := sh.newSessionLocked(fmt.Sprintf("c%d", i))
		sess.expiry = neverExpires
		sessions = append(sessions, sess)
	}
	sh.mu.Unlock()
	for i, sess := range sessions {
		if _, err := sh.tree.Subscribe(sess.id, fmt.Sprintf("t/%d", i%100), topic.Options{QoS: 1}); err != nil {
			b.Fatal(err)
		}
	}
	payload := make([]byte, 512)
	n := *recoveryRecords
	for i := range n {
		sh.publishInternal(newSimpleMessage(fmt.Sprintf("t/%d", i%100), payload, 1, false, time.Now()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sh.Shutdown(ctx); err != nil {
		b.Fatal(err)
	}
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(n) * int64(len(payload)))
	b.ResetTimer()
	for range b.N {
		st, err := store.OpenWAL(store.WALOptions{Dir: dir, Fsync: wal.SyncNever})
		if err != nil {
			b.Fatal(err)
		}
		sh := New(Options{Store: st, MessageLog: st.Messages(), SysInterval: -1})
		b.StopTimer()
		pending := 0
		for _, sess := range sh.sessions {
			pending += sess.stored.len()
		}
		want := n / 100 * 1000 // no count cap: the log bounds a backlog
		if pending != want {
			b.Fatalf("recovered %d pending, want %d", pending, want)
		}
		_ = sh.Shutdown(ctx)
		_ = st.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(n), "records")
}
