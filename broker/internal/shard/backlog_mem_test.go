package shard

import (
	"context"
	"flag"
	"runtime"
	"strconv"
	"testing"
	"time"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/topic"
	"berth.dev/broker/internal/wal"
)

var (
	backlogSessions = flag.Int("backlog-sessions", 10_000, "BenchmarkOfflineBacklog: offline persistent sessions")
	backlogPending  = flag.Int("backlog-pending", 100_000, "BenchmarkOfflineBacklog: pending messages between them")
)

// heapInuse is the heap in use after a GC.
func heapInuse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// backlogCost is what an offline fleet with a backlog costs in heap.
type backlogCost struct {
	perSession   float64 // per session without a backlog (record, subscription)
	perPending1  float64 // per pending message, first half of the backlog
	perPending2  float64 // per pending message, second half
	heap         uint64  // the fleet's heap, backlog included
	logBytes     int64   // the message log on disk
	rss          uint64  // the process's resident set afterwards
	publishTook  time.Duration
	sessions, mp int
}

// measureBacklog creates n offline persistent sessions, each subscribed
// to its own device topic, and publishes pending QoS 1 messages (32-byte
// payloads) to them round-robin, in two halves, measuring HeapInuse before
// and after each step: a pending message must cost the same in the second
// half as in the first (an offset, not a copy), and a session no more for
// its backlog.
func measureBacklog(tb testing.TB, n, pending int) backlogCost {
	tb.Helper()
	st, err := store.OpenWAL(store.WALOptions{Dir: tb.TempDir(), Fsync: wal.SyncNever})
	if err != nil {
		tb.Fatal(err)
	}
	defer st.Close()
	sh := New(Options{Store: st, MessageLog: st.Messages(), SysInterval: -1})
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = sh.Shutdown(ctx)
	}()
	topics := make([][]byte, n)
	h0 := heapInuse()
	sh.mu.Lock()
	ids := make([]topic.SubscriberID, n)
	for i := range n {
		sess := sh.newSessionLocked("dev-" + strconv.Itoa(i))
		sess.expiry = neverExpires
		ids[i] = sess.id
	}
	sh.mu.Unlock()
	for i, id := range ids {
		t := "dev/" + strconv.Itoa(i) + "/cmd"
		if _, err := sh.tree.Subscribe(id, t, topic.Options{QoS: 1}); err != nil {
			tb.Fatal(err)
		}
		topics[i] = []byte(t)
	}
	h1 := heapInuse() // topics is the test's, about n*40 bytes: within noise
	payload := make([]byte, 32)
	start := time.Now()
	publish := func(from, to int) {
		for j := from; j < to; j++ {
			m := &message{topic: topics[j%n], payload: payload, qos: 1, created: time.Now().UnixNano(), publisher: noPublisher}
			m.size = len(m.topic) + len(m.payload) + 64
			sh.publishInternal(m)
		}
	}
	half := pending / 2
	publish(0, half)
	h2 := heapInuse()
	publish(half, pending)
	took := time.Since(start)
	h3 := heapInuse()
	got := 0
	sh.mu.RLock()
	for _, sess := range sh.sessions {
		sess.mu.Lock()
		if sess.queue.len() != 0 {
			tb.Errorf("offline session %s holds %d messages in memory", sess.clientID, sess.queue.len())
		}
		got += sess.stored.len()
		sess.mu.Unlock()
	}
	sh.mu.RUnlock()
	if got != pending {
		tb.Fatalf("%d messages pending, want %d", got, pending)
	}
	runtime.KeepAlive(topics)
	_, rss := heapAndRSS()
	delta := func(a, b uint64) float64 { return float64(int64(b) - int64(a)) }
	return backlogCost{
		perSession:  delta(h0, h1) / float64(n),
		perPending1: delta(h1, h2) / float64(half),
		perPending2: delta(h2, h3) / float64(pending-half),
		heap:        h3 - min(h0, h3),
		logBytes:    sh.log.Size(),
		rss:         rss,
		publishTook: took,
		sessions:    n, mp: pending,
	}
}

// BenchmarkOfflineBacklog reports the heap of -backlog-sessions offline
// sessions with -backlog-pending messages between them (defaults 10,000
// and 100,000; `make bench-backlog` runs 100,000 and 1,000,000).
func BenchmarkOfflineBacklog(b *testing.B) {
	for range b.N {
		c := measureBacklog(b, *backlogSessions, *backlogPending)
		b.ReportMetric(c.perSession, "heap-B/session")
		b.ReportMetric(c.perPending1, "heap-B/pending(1st-half)")
		b.ReportMetric(c.perPending2, "heap-B/pending(2nd-half)")
		b.ReportMetric(float64(c.heap)/(1<<20), "heap-MiB")
		b.ReportMetric(float64(c.logBytes)/(1<<20), "log-MiB")
		b.ReportMetric(float64(c.rss)/(1<<20), "RSS-MiB")
		b.ReportMetric(float64(c.mp)/c.publishTook.Seconds(), "logged-msgs/s")
	}
}
