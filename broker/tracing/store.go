package tracing

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// KeyTenant is the span attribute naming the tenant a span belongs to; only
// spans that carry it are kept in Postgres.
const KeyTenant = attribute.Key("tenant_id")

// Reasons a span is dropped, the label of berth_<component>_spans_dropped_total.
const (
	DropQueueFull   = "queue_full"
	DropWriteFailed = "write_failed"
)

// StoreOptions tune a SpanStore; zero values take the defaults.
type StoreOptions struct {
	QueueSize     int           // spans waiting for the writer; default 4096
	BatchSize     int           // spans per INSERT; default 256
	FlushInterval time.Duration // longest a span waits for a batch to fill; default 1 s
	WriteTimeout  time.Duration // one INSERT; default 5 s
	Logger        *slog.Logger
	Registerer    prometheus.Registerer // where its counters register; none when nil
	Component     string                // in the metric names, as Options.Component; default "gateway"
}

// SpanStore is an sdktrace.SpanProcessor that writes sampled, ended spans
// carrying a tenant_id attribute into the Postgres table spans, in batches,
// from one goroutine of its own. OnEnd never blocks: when the queue is full
// the span is dropped and counted. NewSpanStore starts the writer; Shutdown
// (which the tracer provider calls) writes what is queued and stops it.
type SpanStore struct {
	pool  *pgxpool.Pool
	o     StoreOptions
	log   *slog.Logger
	queue chan sdktrace.ReadOnlySpan
	flush chan chan struct{}

	stored      atomic.Uint64
	dropped     [2]atomic.Uint64 // DropQueueFull, DropWriteFailed
	storedC     prometheus.Counter
	droppedC    *prometheus.CounterVec
	closed      atomic.Bool
	stopOnce    sync.Once
	stop        chan struct{}
	done        chan struct{}
	ctx         context.Context // the writer's; cancelled when Shutdown gives up waiting
	cancelWrite context.CancelFunc
}

// NewSpanStore starts a SpanStore writing to pool.
func NewSpanStore(pool *pgxpool.Pool, o StoreOptions) *SpanStore {
	if o.QueueSize <= 0 {
		o.QueueSize = 4096
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 256
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Component == "" {
		o.Component = "gateway"
	}
	s := &SpanStore{
		pool:  pool,
		o:     o,
		log:   o.Logger,
		queue: make(chan sdktrace.ReadOnlySpan, o.QueueSize),
		flush: make(chan chan struct{}),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
		storedC: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berth_" + o.Component + "_spans_stored_total", Help: "Sampled spans written to Postgres for the dashboard.",
		}),
		droppedC: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berth_" + o.Component + "_spans_dropped_total", Help: "Sampled tenant spans not written to Postgres, by reason.",
		}, []string{"reason"}),
	}
	if o.Registerer != nil {
		o.Registerer.MustRegister(s.storedC, s.droppedC)
	}
	s.ctx, s.cancelWrite = context.WithCancel(context.Background())
	go s.run()
	return s
}

// OnStart does nothing: only ended spans are stored.
func (*SpanStore) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd queues a sampled span that has a tenant_id attribute, or drops it
// when the queue is full. It never blocks.
func (s *SpanStore) OnEnd(sp sdktrace.ReadOnlySpan) {
	if s.closed.Load() || !sp.SpanContext().IsSampled() || tenantOf(sp) == "" {
		return
	}
	select {
	case s.queue <- sp:
	default:
		s.drop(DropQueueFull, 1)
	}
}

// ForceFlush writes every span queued before the call.
func (s *SpanStore) ForceFlush(ctx context.Context) error {
	done := make(chan struct{})
	select {
	case s.flush <- done:
	case <-s.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown stops taking spans, writes those queued and stops the writer.
// When ctx ends first the write in flight is cancelled (its spans counted
// as dropped) and ctx's error returned. Safe to call more than once.
func (s *SpanStore) Shutdown(ctx context.Context) error {
	s.closed.Store(true)
	s.stopOnce.Do(func() { close(s.stop) })
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		s.cancelWrite()
		<-s.done
		return ctx.Err()
	}
}

// Stored returns how many spans were written.
func (s *SpanStore) Stored() uint64 { return s.stored.Load() }

// Dropped returns how many spans were dropped for reason (DropQueueFull or
// DropWriteFailed).
func (s *SpanStore) Dropped(reason string) uint64 {
	switch reason {
	case DropQueueFull:
		return s.dropped[0].Load()
	case DropWriteFailed:
		return s.dropped[1].Load()
	}
	return 0
}

func (s *SpanStore) drop(reason string, n int) {
	i := 0
	if reason == DropWriteFailed {
		i = 1
	}
	s.dropped[i].Add(uint64(n))
	s.droppedC.WithLabelValues(reason).Add(float64(n))
}

func (s *SpanStore) run() {
	defer close(s.done)
	defer s.cancelWrite()
	tick := time.NewTicker(s.o.FlushInterval)
	defer tick.Stop()
	batch := make([]sdktrace.ReadOnlySpan, 0, s.o.BatchSize)
	write := func() {
		if len(batch) > 0 {
			s.write(batch)
			clear(batch) // let the spans go
			batch = batch[:0]
		}
	}
	// drain takes what is queued now, writing full batches as it goes.
	drain := func() {
		for range len(s.queue) {
			batch = append(batch, <-s.queue)
			if len(batch) == s.o.BatchSize {
				write()
			}
		}
		write()
	}
	for {
		select {
		case sp := <-s.queue:
			batch = append(batch, sp)
			if len(batch) == s.o.BatchSize {
				write()
			}
		case <-tick.C:
			write()
		case done := <-s.flush:
			drain()
			close(done)
		case <-s.stop:
			drain()
			return
		}
	}
}

// write inserts one batch; on failure the batch is dropped and counted.
func (s *SpanStore) write(batch []sdktrace.ReadOnlySpan) {
	n := len(batch)
	var (
		tenants, traces, spans, names, attrs = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		parents                              = make([]*string, n)
		starts                               = make([]time.Time, n)
		durations                            = make([]int64, n)
	)
	for i, sp := range batch {
		sc := sp.SpanContext()
		tenants[i], traces[i], spans[i], names[i] = tenantOf(sp), sc.TraceID().String(), sc.SpanID().String(), sp.Name()
		if p := sp.Parent(); p.SpanID().IsValid() {
			id := p.SpanID().String()
			parents[i] = &id
		}
		starts[i] = sp.StartTime()
		durations[i] = max(0, int64(sp.EndTime().Sub(sp.StartTime())))
		attrs[i] = attributesJSON(sp)
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.o.WriteTimeout)
	defer cancel()
	_, err := s.pool.Exec(ctx, `INSERT INTO spans (tenant_id, trace_id, span_id, parent_span_id, name, start, duration_ns, attributes)
		SELECT t, tr, sp, p, n, st, d, a::jsonb
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::bigint[], $8::text[])
			AS u(t, tr, sp, p, n, st, d, a)
		ON CONFLICT DO NOTHING`, tenants, traces, spans, parents, names, starts, durations, attrs)
	if err != nil {
		s.drop(DropWriteFailed, n)
		level := slog.LevelWarn
		if errors.Is(err, context.Canceled) {
			level = slog.LevelDebug // shutdown gave up waiting
		}
		s.log.Log(ctx, level, "spans not stored", "spans", n, "err", err)
		return
	}
	s.stored.Add(uint64(n))
	s.storedC.Add(float64(n))
}

func tenantOf(sp sdktrace.ReadOnlySpan) string {
	for _, kv := range sp.Attributes() {
		if kv.Key == KeyTenant {
			return kv.Value.AsString()
		}
	}
	return ""
}

// attributesJSON is the attributes column: the span's attributes, and its
// status when it is an error.
func attributesJSON(sp sdktrace.ReadOnlySpan) string {
	kvs := sp.Attributes()
	m := make(map[string]any, len(kvs)+2)
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	if st := sp.Status(); st.Code == codes.Error {
		m["otel.status_code"] = "ERROR"
		if st.Description != "" {
			m["otel.status_description"] = st.Description
		}
	}
	b, err := json.Marshal(m)
	if err != nil { // only NaN or Inf floats fail; keep the row without them
		return "{}"
	}
	return string(b)
}
