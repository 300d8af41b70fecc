package msgtrace

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Span names of the message path (see the package comment).
const (
	NamePublish = "mqtt.publish"
	NameACL     = "acl"
	NameQuota   = "quota"
	NameAppend  = "wal.append"
	NameFsync   = "wal.fsync"
	NameRoute   = "route"
	NameDeliver = "deliver"
)

// Span is one ended span of a traced message, as a shard records it.
type Span struct {
	Name    string
	TraceID [16]byte
	SpanID  [8]byte
	Parent  [8]byte // zero: a root span
	Start   time.Time
	End     time.Time
	// The message: its tenant, publisher, topic, QoS and payload size.
	Tenant  string
	Client  string
	Topic   string
	QoS     byte
	Size    int
	Matched int // route: subscribers the message was handed to
	// Deliver: the subscriber's client id, the QoS of its copy, when its
	// socket took it (zero: unknown), whether it was acknowledged.
	Subscriber string
	SubQoS     byte
	Written    time.Time
	Acked      bool
	Error      string // "" ok; else the span's error status
}

// Sink takes ended spans. Export must not block and must not keep sp.
type Sink interface {
	Export(sp *Span)
}

// ExporterOptions tune an Exporter; zero values take the defaults.
type ExporterOptions struct {
	QueueSize  int // spans waiting to be turned into OpenTelemetry spans; default 4096
	Logger     *slog.Logger
	Registerer prometheus.Registerer // berth_node_message_spans_dropped_total; none when nil
}

// Exporter is the node's Sink: a bounded queue and one goroutine that
// makes each Span an OpenTelemetry span of tp, whose processors (the
// Postgres span store, the OTLP batcher) export them. tp must use
// IDGenerator and sample every span (sdktrace.AlwaysSample). A full queue
// drops the span and counts it.
type Exporter struct {
	tp       trace.Tracer
	queue    chan Span
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
	closed   atomic.Bool
	dropped  atomic.Uint64
	droppedC prometheus.Counter
	log      *slog.Logger
}

// NewExporter starts an Exporter making spans with tp.
func NewExporter(tp trace.TracerProvider, o ExporterOptions) *Exporter {
	if o.QueueSize <= 0 {
		o.QueueSize = 4096
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	e := &Exporter{
		tp:    tp.Tracer("berth.dev/broker/msgtrace"),
		queue: make(chan Span, o.QueueSize),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
		log:   o.Logger,
		droppedC: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berth_node_message_spans_dropped_total",
			Help: "Message-path spans dropped because the export queue was full.",
		}),
	}
	if o.Registerer != nil {
		o.Registerer.MustRegister(e.droppedC)
	}
	go e.run()
	return e
}

// Export queues sp, or drops and counts it when the queue is full. It
// never blocks.
func (e *Exporter) Export(sp *Span) {
	if e.closed.Load() {
		return
	}
	select {
	case e.queue <- *sp:
	default:
		e.dropped.Add(1)
		e.droppedC.Inc()
	}
}

// Dropped returns how many spans a full queue dropped.
func (e *Exporter) Dropped() uint64 { return e.dropped.Load() }

// Shutdown stops taking spans and hands those queued to the provider
// (whose own Shutdown then flushes them). Safe to call more than once.
func (e *Exporter) Shutdown(ctx context.Context) error {
	e.closed.Store(true)
	e.once.Do(func() { close(e.stop) })
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *Exporter) run() {
	defer close(e.done)
	for {
		select {
		case sp := <-e.queue:
			e.emit(&sp)
		case <-e.stop:
			for range len(e.queue) {
				sp := <-e.queue
				e.emit(&sp)
			}
			return
		}
	}
}

// Attribute keys of message-path spans.
const (
	KeyTenant     = attribute.Key("tenant_id")
	KeyClient     = attribute.Key("client_id")
	KeyTopic      = attribute.Key("topic")
	KeyQoS        = attribute.Key("qos")
	KeySize       = attribute.Key("payload_size")
	KeyMatched    = attribute.Key("matched_subscribers")
	KeySubscriber = attribute.Key("subscriber")
	KeySubQoS     = attribute.Key("subscriber_qos")
	KeyAcked      = attribute.Key("acked")
)

// emit makes sp an OpenTelemetry span, with its ids and times.
func (e *Exporter) emit(sp *Span) {
	ctx := context.WithValue(context.Background(), idsKey{}, ids{trace: sp.TraceID, span: sp.SpanID})
	if sp.Parent != [8]byte{} {
		ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: sp.TraceID, SpanID: sp.Parent, TraceFlags: trace.FlagsSampled, Remote: true,
		}))
	}
	attrs := make([]attribute.KeyValue, 0, 9)
	attrs = append(attrs, KeyTenant.String(sp.Tenant), KeyClient.String(sp.Client), KeyTopic.String(sp.Topic),
		KeyQoS.Int(int(sp.QoS)), KeySize.Int(sp.Size))
	kind := trace.SpanKindInternal
	switch sp.Name {
	case NamePublish:
		kind = trace.SpanKindServer
	case NameRoute:
		attrs = append(attrs, KeyMatched.Int(sp.Matched))
	case NameDeliver:
		kind = trace.SpanKindProducer
		attrs = append(attrs, KeySubscriber.String(sp.Subscriber), KeySubQoS.Int(int(sp.SubQoS)))
		if sp.SubQoS > 0 {
			attrs = append(attrs, KeyAcked.Bool(sp.Acked))
		}
	}
	_, s := e.tp.Start(ctx, sp.Name, trace.WithTimestamp(sp.Start), trace.WithAttributes(attrs...), trace.WithSpanKind(kind))
	if !sp.Written.IsZero() {
		s.AddEvent("written", trace.WithTimestamp(sp.Written))
	}
	if sp.Error != "" {
		s.SetStatus(codes.Error, sp.Error)
	}
	end := sp.End
	if end.Before(sp.Start) {
		end = sp.Start
	}
	s.End(trace.WithTimestamp(end))
}

// ids are the trace and span id a span is to get (Exporter.emit).
type ids struct {
	trace [16]byte
	span  [8]byte
}

type idsKey struct{}

// IDGenerator gives a span the ids its Span was recorded with (random ones
// for a span made without, as any other generator would).
type IDGenerator struct{}

var _ sdktrace.IDGenerator = IDGenerator{}

// NewIDs implements sdktrace.IDGenerator.
func (IDGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if v, ok := ctx.Value(idsKey{}).(ids); ok {
		return v.trace, v.span
	}
	return NewTraceID(), NewSpanID()
}

// NewSpanID implements sdktrace.IDGenerator.
func (IDGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if v, ok := ctx.Value(idsKey{}).(ids); ok {
		return v.span
	}
	return NewSpanID()
}
