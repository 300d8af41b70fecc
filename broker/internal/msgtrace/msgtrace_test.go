package msgtrace

import (
	"context"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func TestParseTraceParent(t *testing.T) {
	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	tests := []struct {
		in      string
		ok      bool
		sampled bool
	}{
		{"00-" + tid + "-" + sid + "-01", true, true},
		{"00-" + tid + "-" + sid + "-00", true, false},
		{"00-" + tid + "-" + sid + "-03", true, true},
		{"01-" + tid + "-" + sid + "-01-later", true, true}, // a later version, read as 00
		{"00-" + tid + "-" + sid + "-01-x", false, false},   // version 00 has no more fields
		{"ff-" + tid + "-" + sid + "-01", false, false},
		{"00-00000000000000000000000000000000-" + sid + "-01", false, false},
		{"00-" + tid + "-0000000000000000-01", false, false},
		{"00-" + tid[:31] + "G-" + sid + "-01", false, false},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-" + sid + "-01", false, false}, // uppercase
		{"00-" + tid + "-" + sid, false, false},
		{"", false, false},
	}
	for _, tc := range tests {
		tp, ok := ParseTraceParent([]byte(tc.in))
		if ok != tc.ok || tp.Sampled != tc.sampled {
			t.Errorf("%q: ok %v sampled %v, want %v %v", tc.in, ok, tp.Sampled, tc.ok, tc.sampled)
			continue
		}
		if ok && (hex.EncodeToString(tp.TraceID[:]) != tid || hex.EncodeToString(tp.SpanID[:]) != sid) {
			t.Errorf("%q: ids %x %x", tc.in, tp.TraceID, tp.SpanID)
		}
	}
	v := []byte("00-" + tid + "-" + sid + "-01")
	if n := testing.AllocsPerRun(1000, func() { ParseTraceParent(v) }); n != 0 {
		t.Fatalf("ParseTraceParent allocates %v times", n)
	}
}

func TestSamplerRateAndCap(t *testing.T) {
	s := NewSampler(0, 10)
	for range 1000 {
		if s.Sample(false) {
			t.Fatal("rate 0 sampled")
		}
	}
	n := 0
	for range 1000 {
		if s.Sample(true) {
			n++
		}
	}
	if n < 10 || n > 12 { // the burst, and what the loop's time refills
		t.Fatalf("%d of 1000 sampled traceparents passed a cap of 10/s", n)
	}
	s = NewSampler(0.5, 1e9)
	n = 0
	for range 10000 {
		if s.Sample(false) {
			n++
		}
	}
	if n < 4500 || n > 5500 {
		t.Fatalf("rate 0.5 sampled %d of 10000", n)
	}
	for _, r := range []float64{-1, 2} {
		s.SetRate(r)
		if got := s.Rate(); got != max(0, min(r, 1)) {
			t.Fatalf("SetRate(%v) = %v", r, got)
		}
	}
	s.SetRate(0.001)
	if n := testing.AllocsPerRun(1000, func() { s.Sample(false) }); n != 0 {
		t.Fatalf("Sample allocates %v times", n)
	}
}

type recorder struct {
	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan
}

func (r *recorder) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (r *recorder) OnEnd(s sdktrace.ReadOnlySpan) {
	r.mu.Lock()
	r.spans = append(r.spans, s)
	r.mu.Unlock()
}
func (r *recorder) Shutdown(context.Context) error   { return nil }
func (r *recorder) ForceFlush(context.Context) error { return nil }

// TestExporterKeepsIdsAndTimes: the OpenTelemetry spans carry the ids,
// parents, times and attributes the shard recorded.
func TestExporterKeepsIdsAndTimes(t *testing.T) {
	rec := &recorder{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithIDGenerator(IDGenerator{}), sdktrace.WithSpanProcessor(rec))
	e := NewExporter(tp, ExporterOptions{QueueSize: 4})
	start := time.Unix(1700000000, 0)
	root := Span{Name: NamePublish, TraceID: NewTraceID(), SpanID: NewSpanID(), Start: start, End: start.Add(time.Millisecond),
		Tenant: "ten_a", Client: "pub", Topic: "t", QoS: 1, Size: 3}
	child := root
	child.Name, child.SpanID, child.Parent, child.Matched = NameRoute, NewSpanID(), root.SpanID, 2
	del := root
	del.Name, del.SpanID, del.Parent, del.Subscriber, del.SubQoS, del.Acked, del.Written = NameDeliver, NewSpanID(), root.SpanID, "sub", 1, true, start.Add(time.Microsecond)
	e.Export(&root)
	e.Export(&child)
	e.Export(&del)
	if err := e.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(rec.spans) != 3 {
		t.Fatalf("%d spans", len(rec.spans))
	}
	for i, want := range []Span{root, child, del} {
		got := rec.spans[i]
		sc := got.SpanContext()
		if [16]byte(sc.TraceID()) != want.TraceID || [8]byte(sc.SpanID()) != want.SpanID || [8]byte(got.Parent().SpanID()) != want.Parent ||
			!got.StartTime().Equal(want.Start) || !got.EndTime().Equal(want.End) || !sc.IsSampled() {
			t.Errorf("%s: %v parent %v %v..%v", want.Name, sc, got.Parent(), got.StartTime(), got.EndTime())
		}
	}
	attrs := map[string]any{}
	for _, kv := range rec.spans[2].Attributes() {
		attrs[string(kv.Key)] = kv.Value.AsInterface()
	}
	if attrs["tenant_id"] != "ten_a" || attrs["subscriber"] != "sub" || attrs["acked"] != true || attrs["payload_size"] != int64(3) {
		t.Errorf("deliver attributes %v", attrs)
	}
	if ev := rec.spans[2].Events(); len(ev) != 1 || ev[0].Name != "written" || !ev[0].Time.Equal(del.Written) {
		t.Errorf("deliver events %v", ev)
	}
	// A full queue drops and counts; after Shutdown nothing is taken.
	e2 := NewExporter(tp, ExporterOptions{QueueSize: 1})
	_ = e2.Shutdown(t.Context())
	e2.Export(&root)
	if e2.Dropped() != 0 {
		t.Fatal("a closed exporter counted a drop")
	}
}
