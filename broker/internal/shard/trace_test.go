package shard

import (
	"context"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"berth.dev/broker/internal/msgtrace"
	"berth.dev/broker/internal/topic"
	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

// spanRecorder is a msgtrace.Sink keeping every span.
type spanRecorder struct {
	mu    sync.Mutex
	spans []msgtrace.Span
}

func (r *spanRecorder) Export(sp *msgtrace.Span) {
	r.mu.Lock()
	r.spans = append(r.spans, *sp)
	r.mu.Unlock()
}

func (r *spanRecorder) byName() map[string][]msgtrace.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string][]msgtrace.Span{}
	for _, sp := range r.spans {
		m[sp.Name] = append(m[sp.Name], sp)
	}
	return m
}

func (r *spanRecorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.spans)
}

const (
	deviceTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	deviceSpan  = "00f067aa0ba902b7"
)

func traceparent(flags string) packet.Properties {
	return packet.Properties{UserProperties: []packet.UserProperty{
		{Key: []byte("other"), Value: []byte("x")},
		{Key: []byte("traceparent"), Value: []byte("00-" + deviceTrace + "-" + deviceSpan + "-" + flags)},
	}}
}

// TestTracedPublishSpanTree: a QoS 1 PUBLISH whose traceparent says
// sampled gets mqtt.publish, a child of the device's span, with acl,
// quota, route and a deliver span per subscriber that ends at the
// subscriber's PUBACK; with a message log under -fsync always also
// wal.append and wal.fsync.
func TestTracedPublishSpanTree(t *testing.T) {
	for _, durable := range []bool{false, true} {
		name := "memory"
		if durable {
			name = "fsync-always"
		}
		t.Run(name, func(t *testing.T) {
			rec := &spanRecorder{}
			opts := Options{Tracing: Tracing{TenantID: "ten_t", Sampler: msgtrace.NewSampler(0, 100), Sink: rec}}
			if durable {
				st := openWALStore(t, t.TempDir(), wal.SyncAlways)
				opts.Store, opts.MessageLog = st, st.Messages()
			}
			b := startBroker(t, opts, ConnInfo{})
			sub := v5Client(t, b, "sub")
			sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("t/#"), QoS: 1})
			pub := v5Client(t, b, "pub")
			pub.send(&packet.Publish{QoS: 1, PacketID: 7, Topic: []byte("t/1"), Payload: []byte("hello"), Props: traceparent("01")})
			if a := pub.ack(packet.TypePuback); a.PacketID != 7 {
				t.Fatalf("PUBACK %d", a.PacketID)
			}
			p := sub.publish()
			time.Sleep(5 * time.Millisecond) // the deliver span waits for the PUBACK, not for this
			sub.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
			want := 5
			if durable {
				want = 7
			}
			eventually(t, "the span tree", func() bool { return rec.len() >= want })
			got := rec.byName()
			root := one(t, got, msgtrace.NamePublish)
			if hex.EncodeToString(root.TraceID[:]) != deviceTrace || hex.EncodeToString(root.Parent[:]) != deviceSpan {
				t.Fatalf("root trace %x parent %x, want the device's", root.TraceID, root.Parent)
			}
			if root.Tenant != "ten_t" || root.Client != "pub" || root.Topic != "t/1" || root.QoS != 1 || root.Size != 5 || root.Error != "" {
				t.Fatalf("root %+v", root)
			}
			names := []string{msgtrace.NameACL, msgtrace.NameQuota, msgtrace.NameRoute, msgtrace.NameDeliver}
			if durable {
				names = append(names, msgtrace.NameAppend, msgtrace.NameFsync)
			}
			for _, n := range names {
				sp := one(t, got, n)
				if sp.TraceID != root.TraceID || sp.Parent != root.SpanID || sp.Error != "" {
					t.Errorf("%s: trace %x parent %x (root %x), error %q", n, sp.TraceID, sp.Parent, root.SpanID, sp.Error)
				}
				if sp.Start.Before(root.Start) || sp.End.Before(sp.Start) {
					t.Errorf("%s: %v..%v, root from %v", n, sp.Start, sp.End, root.Start)
				}
			}
			if r := one(t, got, msgtrace.NameRoute); r.Matched != 1 {
				t.Errorf("route matched %d, want 1", r.Matched)
			}
			d := one(t, got, msgtrace.NameDeliver)
			if d.Subscriber != "sub" || d.SubQoS != 1 || !d.Acked || d.Written.IsZero() || d.End.Sub(d.Written) < 5*time.Millisecond {
				t.Errorf("deliver %+v: want sub's PUBACK at least 5 ms after the write", d)
			}
			if durable {
				f := one(t, got, msgtrace.NameFsync)
				if !root.End.Equal(f.End) {
					t.Errorf("root ends %v, the fsync wait %v: the PUBACK waits for it", root.End, f.End)
				}
			}
		})
	}
}

func one(t *testing.T, m map[string][]msgtrace.Span, name string) msgtrace.Span {
	t.Helper()
	if len(m[name]) != 1 {
		t.Fatalf("%d %s spans, want 1 (all: %v)", len(m[name]), name, m)
	}
	return m[name][0]
}

// TestTraceSampling: an unsampled traceparent and rate 0 trace nothing;
// rate 1 traces fresh traces, at most the cap per second; QoS 0 delivery
// spans end at the write.
func TestTraceSampling(t *testing.T) {
	rec := &spanRecorder{}
	sampler := msgtrace.NewSampler(0, 5)
	b := startBroker(t, Options{Tracing: Tracing{TenantID: "ten_t", Sampler: sampler, Sink: rec}}, ConnInfo{})
	sub := v5Client(t, b, "sub")
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("s")})
	pub := v5Client(t, b, "pub")
	pub.send(&packet.Publish{Topic: []byte("s"), Payload: []byte("x"), Props: traceparent("00")})
	sub.publish()
	if n := rec.len(); n != 0 {
		t.Fatalf("%d spans for an unsampled message", n)
	}
	sampler.SetRate(1)
	const n = 50
	for range n {
		pub.send(&packet.Publish{Topic: []byte("s"), Payload: []byte("x")})
	}
	for range n {
		sub.publish()
	}
	eventually(t, "deliver spans", func() bool { return len(rec.byName()[msgtrace.NameDeliver]) >= 5 })
	got := rec.byName()
	roots := got[msgtrace.NamePublish]
	if len(roots) < 5 || len(roots) > 10 { // a burst of 5, and what 1 s refills at 5/s
		t.Fatalf("%d messages traced of %d at rate 1 and a cap of 5/s", len(roots), n)
	}
	for _, r := range roots {
		if r.Parent != [8]byte{} || r.TraceID == [16]byte{} {
			t.Fatalf("a fresh trace has parent %x, trace %x", r.Parent, r.TraceID)
		}
	}
	for _, d := range got[msgtrace.NameDeliver] {
		if d.SubQoS != 0 || d.Acked || !d.Written.Equal(d.End) {
			t.Fatalf("QoS 0 deliver %+v", d)
		}
	}
}

// TestUnsampledPublishAllocations pins the path of an unsampled message
// with tracing on at zero allocations: the sampling decision (an MQTT 5
// PUBLISH with user properties and an unsampled traceparent, a rate that
// draws no), routing and the inline write.
func TestUnsampledPublishAllocations(t *testing.T) {
	rec := &spanRecorder{}
	sh := New(Options{SysInterval: -1, Tracing: Tracing{TenantID: "ten_t", Sampler: msgtrace.NewSampler(1e-12, 100), Sink: rec}})
	b := startBrokerWith(t, sh)
	sub := v5Client(t, b, "sub")
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("t")})
	pubc := &conn{shard: sh, in: new(inbound), version: packet.Version5, clientID: "pub"}
	p := &packet.Publish{Topic: []byte("t"), Payload: []byte("inline"), Props: traceparent("00")}
	var out outbox
	var mt topic.Matches
	m := newSimpleMessage("t", []byte("inline"), 0, false, time.Now())
	m.readAt = monoNow()
	const runs = 100
	send := func() {
		if tr := pubc.sampleTrace(p, p.Topic); tr != nil {
			t.Fatal("sampled")
		}
		sh.publishVia(m, &mt, &out)
		out.flush()
	}
	send()
	if allocs := testing.AllocsPerRun(runs, send); allocs != 0 {
		t.Fatalf("an unsampled message allocates %v times with tracing on", allocs)
	}
	for range runs + 2 {
		sub.publish()
	}
	if n := rec.len(); n != 0 {
		t.Fatalf("%d spans", n)
	}
}

// BenchmarkTracedIngest measures QoS 1 ingest over TCP (batches of 256
// pipelined PUBLISH packets with a traceparent-free MQTT 5 client, one
// QoS 1 subscriber reading and acknowledging every copy) with tracing off,
// at the default rate (0.001, capped at 100/s) and for every message (rate
// 1, no cap), the spans going through a real Exporter into an SDK
// provider without processors. Compare msgs/s of the same run:
//
//	go test -run '^$' -bench BenchmarkTracedIngest -benchtime 2s -count 6 ./internal/shard/
func BenchmarkTracedIngest(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithIDGenerator(msgtrace.IDGenerator{}))
	for _, mode := range []struct {
		name      string
		rate, cap float64
	}{{"off", -1, 0}, {"default", 0.001, msgtrace.DefaultCap}, {"every", 1, 1e12}} {
		b.Run(mode.name, func(b *testing.B) {
			opts := Options{}
			var exp *msgtrace.Exporter
			if mode.rate >= 0 {
				exp = msgtrace.NewExporter(tp, msgtrace.ExporterOptions{})
				b.Cleanup(func() { _ = exp.Shutdown(context.Background()) })
				opts.Tracing = Tracing{TenantID: "ten_b", Sampler: msgtrace.NewSampler(mode.rate, mode.cap), Sink: exp}
			}
			br := startBroker(b, opts, ConnInfo{})
			sub := v5Client(b, br, "bench-sub")
			sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("ing/#"), QoS: 1})
			pub := v5Client(b, br, "bench-pub")
			const batch = 256
			var buf []byte
			for i := range batch {
				buf, _ = (&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: []byte("ing/x"), Payload: make([]byte, 128)}).Append(buf, packet.Version5)
			}
			done := make(chan struct{})
			go func() { // the subscriber acknowledges every copy
				defer close(done)
				var acks []byte
				for {
					fh, body, err := sub.next()
					if err != nil {
						return
					}
					var p packet.Publish
					if fh.Type != packet.TypePublish || p.Decode(packet.Version5, fh, body) != nil {
						continue
					}
					acks, _ = (&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID}).Append(acks[:0], packet.Version5)
					if _, err := sub.nc.Write(acks); err != nil {
						return
					}
				}
			}()
			b.ReportAllocs()
			b.SetBytes(batch * 128)
			for b.Loop() {
				pub.sendBytes(buf)
				for range batch {
					pub.ack(packet.TypePuback)
				}
			}
			b.ReportMetric(float64(b.N)*batch/b.Elapsed().Seconds(), "msgs/s")
			if exp != nil {
				b.ReportMetric(float64(exp.Dropped()), "spans-dropped")
			}
			sub.nc.Close()
			<-done
		})
	}
}
