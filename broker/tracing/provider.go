package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Options configure a Provider.
type Options struct {
	// SampleRatio is the share of new traces sampled, 0 to 1; a span whose
	// parent (a device's W3C traceparent) says sampled or not follows it.
	// 0 turns tracing off: no spans are made at all.
	SampleRatio float64
	// Sampler, when set, replaces the ratio's sampler and turns tracing on
	// whatever SampleRatio says (a node decides per message itself and
	// passes AlwaysSample).
	Sampler sdktrace.Sampler
	// IDGenerator, when set, makes the trace and span ids (a node's spans
	// carry ids chosen when the message was read).
	IDGenerator sdktrace.IDGenerator
	// OTLPEndpoint is the collector's base URL (what OTEL_EXPORTER_OTLP_ENDPOINT
	// holds, e.g. http://collector:4318); spans go to <it>/v1/traces.
	// "" exports nothing over OTLP. Other OTEL_EXPORTER_OTLP_* variables
	// (headers, timeout, compression) apply as the exporter reads them.
	OTLPEndpoint string
	// Pool, when set, keeps sampled tenant spans in Postgres (SpanStore).
	Pool  *pgxpool.Pool
	Store StoreOptions // Logger and Registerer default to the ones below

	// Component names what is traced: "gateway" (the default) or "node".
	// It makes the default service.name (berth-<component>) and the
	// metric names (berth_<component>_spans_stored_total, ...).
	Component   string
	ServiceName string // resource service.name; default berth-<Component>
	InstanceID  string // resource service.instance.id, e.g. the gateway id
	Logger      *slog.Logger
	Registerer  prometheus.Registerer // span store and export counters; none when nil
}

// Provider is a component's tracer provider and the pipeline behind it.
// New, TracerProvider, Shutdown.
type Provider struct {
	sdk   *sdktrace.TracerProvider // nil when tracing is off
	store *SpanStore               // nil without a pool
}

// Sampler is the head sampler for ratio: a new trace is sampled with
// probability ratio; a span with a parent does as the parent did.
func Sampler(ratio float64) sdktrace.Sampler {
	return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))
}

// New builds the pipeline o describes. Its goroutines run until Shutdown.
func New(ctx context.Context, o Options) (*Provider, error) {
	if o.SampleRatio < 0 || o.SampleRatio > 1 {
		return nil, fmt.Errorf("tracing: sample ratio %v is not within [0, 1]", o.SampleRatio)
	}
	if o.SampleRatio == 0 && o.Sampler == nil {
		return &Provider{}, nil
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Component == "" {
		o.Component = "gateway"
	}
	if o.ServiceName == "" {
		o.ServiceName = "berth-" + o.Component
	}
	sampler := o.Sampler
	if sampler == nil {
		sampler = Sampler(o.SampleRatio)
	}
	res := []attribute.KeyValue{attribute.String("service.name", o.ServiceName)}
	if o.InstanceID != "" {
		res = append(res, attribute.String("service.instance.id", o.InstanceID))
	}
	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithSampler(sampler),
		sdktrace.WithResource(resource.NewSchemaless(res...)),
	}
	if o.IDGenerator != nil {
		opts = append(opts, sdktrace.WithIDGenerator(o.IDGenerator))
	}
	if o.OTLPEndpoint != "" {
		u, err := TracesURL(o.OTLPEndpoint)
		if err != nil {
			return nil, err
		}
		exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u))
		if err != nil {
			return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(newLoggingExporter(exp, o.Logger, o.Registerer, o.Component)))
	}
	p := &Provider{}
	if o.Pool != nil {
		so := o.Store
		if so.Logger == nil {
			so.Logger = o.Logger
		}
		if so.Registerer == nil {
			so.Registerer = o.Registerer
		}
		if so.Component == "" {
			so.Component = o.Component
		}
		p.store = NewSpanStore(o.Pool, so)
		opts = append(opts, sdktrace.WithSpanProcessor(p.store))
	}
	p.sdk = sdktrace.NewTracerProvider(opts...)
	return p, nil
}

// TracerProvider is what the component makes its spans with: a no-op one
// when tracing is off.
func (p *Provider) TracerProvider() trace.TracerProvider {
	if p.sdk == nil {
		return noop.NewTracerProvider()
	}
	return p.sdk
}

// Store returns the Postgres span store, nil when there is none.
func (p *Provider) Store() *SpanStore { return p.store }

// Shutdown flushes every ended span (OTLP and Postgres) and stops the
// pipeline; spans ended after it are ignored.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p.sdk == nil {
		return nil
	}
	return p.sdk.Shutdown(ctx)
}

// TracesURL turns an OTLP base endpoint into the traces URL, as the OTLP
// exporter specification does for OTEL_EXPORTER_OTLP_ENDPOINT: the base
// path, then v1/traces.
func TracesURL(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("tracing: OTLP endpoint %q is not an http(s) URL with a host", endpoint)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	return u.String(), nil
}

// loggingExporter reports failed OTLP exports to the component's logger and
// a counter instead of the process-global OpenTelemetry error handler,
// which the batch processor would otherwise call.
type loggingExporter struct {
	sdktrace.SpanExporter
	log      *slog.Logger
	failures prometheus.Counter
}

func newLoggingExporter(e sdktrace.SpanExporter, log *slog.Logger, reg prometheus.Registerer, component string) *loggingExporter {
	le := &loggingExporter{SpanExporter: e, log: log, failures: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "berth_" + component + "_span_export_failures_total", Help: "OTLP span exports that failed (their spans are lost).",
	})}
	if reg != nil {
		reg.MustRegister(le.failures)
	}
	return le
}

func (e *loggingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err != nil && !errors.Is(err, context.Canceled) {
		e.failures.Inc()
		e.log.Warn("OTLP span export failed", "spans", len(spans), "err", err)
	}
	return nil
}
