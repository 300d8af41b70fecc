package tracing

import (
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"berth.dev/testenv"
)

// collector is a stand-in OTLP/HTTP collector (protobuf encoding) on
// 127.0.0.1: it records the path and the spans of every export.
type collector struct {
	srv *httptest.Server

	mu       sync.Mutex
	paths    []string
	names    []string
	resource map[string]string
}

func newCollector(t *testing.T) *collector {
	t.Helper()
	c := &collector{resource: map[string]string{}}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &req)
		}
		if err != nil || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.paths = append(c.paths, r.URL.Path)
		for _, rs := range req.GetResourceSpans() {
			for _, kv := range rs.GetResource().GetAttributes() {
				c.resource[kv.GetKey()] = kv.GetValue().GetStringValue()
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					c.names = append(c.names, sp.GetName())
				}
			}
		}
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Write(out)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func TestProviderExportsOTLPAndKeepsTenantSpans(t *testing.T) {
	col := newCollector(t)
	pool := testenv.Postgres(t)
	reg := prometheus.NewRegistry()
	p, err := New(t.Context(), Options{
		SampleRatio: 1, OTLPEndpoint: col.srv.URL + "/otlp/", Pool: pool,
		InstanceID: "gw-1", Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	tr := p.TracerProvider().Tracer("test")
	ctx, root := tr.Start(context.Background(), "gateway.connect", trace.WithAttributes(KeyTenant.String("ten_a")))
	_, child := tr.Start(ctx, "parse")
	child.End()
	root.End()

	// Nothing is exported yet (the batcher waits up to 5 s): Shutdown must flush.
	ctx2, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Shutdown(ctx2); err != nil {
		t.Fatal(err)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	if len(col.paths) == 0 || col.paths[0] != "/otlp/v1/traces" {
		t.Fatalf("export paths %v, want /otlp/v1/traces", col.paths)
	}
	if strings.Join(col.names, ",") != "parse,gateway.connect" {
		t.Fatalf("exported spans %v", col.names)
	}
	if col.resource["service.name"] != "berth-gateway" || col.resource["service.instance.id"] != "gw-1" {
		t.Fatalf("resource %v", col.resource)
	}
	// Only the span with a tenant_id is kept in Postgres.
	if n := countSpans(t, pool); n != 1 || p.Store().Stored() != 1 {
		t.Fatalf("%d rows, %d stored; want the connect span only", n, p.Store().Stored())
	}
	if got := testutil.ToFloat64(p.Store().storedC); got != 1 {
		t.Fatalf("berth_gateway_spans_stored_total = %v", got)
	}
	if n, err := testutil.GatherAndCount(reg, "berth_gateway_spans_stored_total", "berth_gateway_span_export_failures_total"); err != nil || n != 2 {
		t.Fatalf("registered series %d, %v", n, err)
	}
}

func TestProviderExportFailureIsCounted(t *testing.T) {
	col := newCollector(t)
	col.srv.Close() // nobody listens any more
	reg := prometheus.NewRegistry()
	p, err := New(t.Context(), Options{SampleRatio: 1, OTLPEndpoint: col.srv.URL, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	_, sp := p.TracerProvider().Tracer("test").Start(context.Background(), "gateway.connect")
	sp.End()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown = %v; a failed export is logged and counted, not returned", err)
	}
	const want = "\n# HELP berth_gateway_span_export_failures_total OTLP span exports that failed (their spans are lost).\n# TYPE berth_gateway_span_export_failures_total counter\nberth_gateway_span_export_failures_total 1\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "berth_gateway_span_export_failures_total"); err != nil {
		t.Fatal(err)
	}
}

func TestProviderOff(t *testing.T) {
	p, err := New(t.Context(), Options{SampleRatio: 0, OTLPEndpoint: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	_, sp := p.TracerProvider().Tracer("test").Start(context.Background(), "gateway.connect")
	if sp.IsRecording() || sp.SpanContext().IsValid() {
		t.Fatal("ratio 0 made a real span")
	}
	sp.End()
	if p.Store() != nil {
		t.Fatal("a span store without tracing")
	}
	if err := p.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestNewRejects(t *testing.T) {
	for _, o := range []Options{
		{SampleRatio: -0.1},
		{SampleRatio: 1.5},
		{SampleRatio: 0.5, OTLPEndpoint: "collector:4318"},
		{SampleRatio: 0.5, OTLPEndpoint: "ftp://collector"},
	} {
		if _, err := New(t.Context(), o); err == nil {
			t.Errorf("New(%+v) succeeded", o)
		}
	}
}

func TestTracesURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"http://collector:4318", "http://collector:4318/v1/traces"},
		{"http://collector:4318/", "http://collector:4318/v1/traces"},
		{"https://otel.example.com/prefix", "https://otel.example.com/prefix/v1/traces"},
		{"https://otel.example.com/prefix/", "https://otel.example.com/prefix/v1/traces"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := TracesURL(tc.in)
			if err != nil || got != tc.want {
				t.Fatalf("TracesURL = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
