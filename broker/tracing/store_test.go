package tracing

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"berth.dev/testenv"
)

// spanRow is one row of the spans table.
type spanRow struct {
	tenant, trace, span string
	parent              *string
	name                string
	start               time.Time
	durationNS          int64
	attrs               map[string]any
}

func readSpans(t *testing.T, pool *pgxpool.Pool) map[string]spanRow {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT tenant_id, trace_id, span_id, parent_span_id, name, start, duration_ns, attributes FROM spans`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]spanRow{}
	for rows.Next() {
		var r spanRow
		var attrs []byte
		if err := rows.Scan(&r.tenant, &r.trace, &r.span, &r.parent, &r.name, &r.start, &r.durationNS, &attrs); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(attrs, &r.attrs); err != nil {
			t.Fatal(err)
		}
		out[r.name] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// recordOnly samples every span except those named "record-only", which
// are recorded (processors see them) but not sampled.
type recordOnly struct{}

func (recordOnly) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if p.Name == "record-only" {
		return sdktrace.SamplingResult{Decision: sdktrace.RecordOnly}
	}
	return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
}
func (recordOnly) Description() string { return "recordOnly" }

func newStoreProvider(t *testing.T, pool *pgxpool.Pool, o StoreOptions) (*SpanStore, trace.Tracer) {
	t.Helper()
	s := NewSpanStore(pool, o)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(recordOnly{}), sdktrace.WithSpanProcessor(s))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		tp.Shutdown(ctx)
	})
	return s, tp.Tracer("test")
}

func TestSpanStoreWritesTenantSpans(t *testing.T) {
	pool := testenv.Postgres(t)
	store, tr := newStoreProvider(t, pool, StoreOptions{FlushInterval: time.Hour}) // only ForceFlush writes

	start := time.Date(2026, 11, 30, 1, 2, 3, 456789000, time.UTC)
	ctx, root := tr.Start(context.Background(), "gateway.connect", trace.WithTimestamp(start),
		trace.WithAttributes(KeyTenant.String("ten_a"), attribute.Int("protocol_version", 5), attribute.String("transport", "tcp")))
	_, child := tr.Start(ctx, "auth", trace.WithTimestamp(start.Add(time.Millisecond)), trace.WithAttributes(KeyTenant.String("ten_a")))
	child.SetStatus(codes.Error, "jwtauth: bad signature")
	child.End(trace.WithTimestamp(start.Add(3 * time.Millisecond)))
	_, anon := tr.Start(ctx, "no-tenant")
	anon.End()
	_, ro := tr.Start(ctx, "record-only", trace.WithAttributes(KeyTenant.String("ten_a")))
	ro.End()
	root.End(trace.WithTimestamp(start.Add(5 * time.Millisecond)))

	if err := store.ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := readSpans(t, pool)
	if len(got) != 2 {
		t.Fatalf("stored %d spans (%v), want gateway.connect and auth only: none without tenant_id, none unsampled", len(got), got)
	}
	r, c := got["gateway.connect"], got["auth"]
	rsc, csc := root.SpanContext(), child.SpanContext()
	checks := []struct {
		name      string
		got, want any
	}{
		{"root tenant", r.tenant, "ten_a"},
		{"root trace id", r.trace, rsc.TraceID().String()},
		{"root span id", r.span, rsc.SpanID().String()},
		{"root has no parent", r.parent == nil, true},
		{"root start (microseconds kept)", r.start.UTC(), start.Truncate(time.Microsecond)},
		{"root duration", r.durationNS, int64(5 * time.Millisecond)},
		{"root attribute protocol_version", r.attrs["protocol_version"], float64(5)},
		{"root attribute transport", r.attrs["transport"], "tcp"},
		{"root attribute tenant_id", r.attrs["tenant_id"], "ten_a"},
		{"root has no status", r.attrs["otel.status_code"], nil},
		{"child trace id", c.trace, rsc.TraceID().String()},
		{"child span id", c.span, csc.SpanID().String()},
		{"child parent", c.parent != nil && *c.parent == rsc.SpanID().String(), true},
		{"child duration", c.durationNS, int64(2 * time.Millisecond)},
		{"child status", c.attrs["otel.status_code"], "ERROR"},
		{"child status description", c.attrs["otel.status_description"], "jwtauth: bad signature"},
		{"stored count", store.Stored(), uint64(2)},
	}
	for _, tc := range checks {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Fatalf("got %v, want %v", tc.got, tc.want)
			}
		})
	}

	// A retried batch (the same spans again) is harmless.
	store.write([]sdktrace.ReadOnlySpan{root.(sdktrace.ReadOnlySpan), child.(sdktrace.ReadOnlySpan)})
	if n := countSpans(t, pool); n != 2 || store.Dropped(DropWriteFailed) != 0 {
		t.Fatalf("after writing the same spans again: %d rows, %d failed writes", n, store.Dropped(DropWriteFailed))
	}
}

func countSpans(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM spans`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSpanStoreFullQueueDropsWithoutBlocking(t *testing.T) {
	pool := testenv.Postgres(t)
	const queue, batch, n = 8, 4, 200
	store, tr := newStoreProvider(t, pool, StoreOptions{QueueSize: queue, BatchSize: batch, FlushInterval: time.Millisecond})

	// Hold a lock on spans so the writer's INSERT waits: the queue fills.
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(t.Context(), `LOCK TABLE spans IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	ended := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		for range n {
			_, sp := tr.Start(context.Background(), "connect", trace.WithAttributes(KeyTenant.String("ten_a")))
			sp.End()
		}
		ended <- time.Since(start)
	}()
	select {
	case d := <-ended:
		t.Logf("%d spans ended in %v with the table locked", n, d)
	case <-time.After(5 * time.Second):
		t.Fatal("span.End blocked while Postgres was stalled")
	}
	// At most one batch in the writer's hands and a full queue survive.
	if d := store.Dropped(DropQueueFull); d < n-queue-batch || d == 0 {
		t.Fatalf("dropped %d of %d spans, want at least %d", d, n, n-queue-batch)
	}

	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := store.ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}
	rows := countSpans(t, pool)
	if uint64(rows) != store.Stored() || uint64(rows)+store.Dropped(DropQueueFull) != n || store.Dropped(DropWriteFailed) != 0 {
		t.Fatalf("%d rows, %d stored, %d dropped (queue full), %d dropped (write failed): every span must be stored or counted once",
			rows, store.Stored(), store.Dropped(DropQueueFull), store.Dropped(DropWriteFailed))
	}
}

func TestSpanStoreShutdownFlushes(t *testing.T) {
	pool := testenv.Postgres(t)
	store := NewSpanStore(pool, StoreOptions{FlushInterval: time.Hour})
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(store))
	tr := tp.Tracer("test")
	for range 3 {
		_, sp := tr.Start(context.Background(), "connect", trace.WithAttributes(KeyTenant.String("ten_a")))
		sp.End()
	}
	if err := tp.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	store.OnEnd(nil) // after Shutdown: ignored, not queued, no panic
	if n := countSpans(t, pool); n != 3 || store.Stored() != 3 {
		t.Fatalf("%d rows, %d stored after Shutdown, want 3", n, store.Stored())
	}
	if err := store.Shutdown(t.Context()); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
}

func TestSpanStoreWriteFailureCounts(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	pool.Close() // every write fails
	store, tr := newStoreProvider(t, pool, StoreOptions{FlushInterval: time.Hour})
	for range 5 {
		_, sp := tr.Start(context.Background(), "connect", trace.WithAttributes(KeyTenant.String("ten_a")))
		sp.End()
	}
	if err := store.ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if store.Dropped(DropWriteFailed) != 5 || store.Stored() != 0 {
		t.Fatalf("dropped %d (write failed), stored %d; want 5 and 0", store.Dropped(DropWriteFailed), store.Stored())
	}
}
