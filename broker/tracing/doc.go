// Package tracing is the OpenTelemetry pipeline of Berth's gateways and
// broker nodes: a tracer provider (never the process-global one; the
// component gets it injected), its head sampler, the OTLP/HTTP exporter
// when an endpoint is configured, and SpanStore, the span processor that
// keeps sampled spans per tenant in Postgres (table spans) for the
// dashboard's latency views. The gateway makes its connect spans with it;
// a node turns the message-path spans its shards record
// (internal/msgtrace) into spans of a provider with its own sampler and
// span ids.
//
// # Pipeline
//
//	span.End() ─▶ ParentBased(TraceIDRatioBased(ratio)) decided at start
//	              (Options.Sampler instead, when set: the node's AlwaysSample)
//	    │
//	    ├─▶ BatchSpanProcessor ─▶ OTLP/HTTP POST <endpoint>/v1/traces   (when configured)
//	    │      bounded queue (SDK default 2048), drops when full
//	    │
//	    └─▶ SpanStore.OnEnd: sampled? has tenant_id? ── no ─▶ ignored
//	           │ yes: non-blocking send
//	           ▼
//	        queue (QueueSize) ── full ─▶ dropped, counted (reason queue_full)
//	           ▼
//	        writer goroutine: BatchSize spans or FlushInterval, whichever first
//	           ▼
//	        one INSERT ... SELECT FROM unnest(...) ON CONFLICT DO NOTHING
//	        failed ─▶ batch dropped, counted (reason write_failed)
//
// A span's End never waits for Postgres or the collector: both paths hand
// over through bounded queues and drop rather than block.
//
// # Row format (table spans, migrations/sql/00003_spans.sql)
//
//	tenant_id       the span's tenant_id attribute (spans without one are not kept)
//	trace_id        32 lowercase hex digits
//	span_id         16 lowercase hex digits
//	parent_span_id  16 lowercase hex digits; NULL for a root span (a span whose
//	                parent is a device's own span, from a W3C traceparent, keeps
//	                that parent's id although no row has it)
//	name            e.g. gateway.connect, parse, auth, admission, route;
//	                mqtt.publish, acl, quota, wal.append, wal.fsync, route, deliver
//	start           the span's start
//	duration_ns     end - start, never negative
//	attributes      JSON object of the span's attributes; a span with an
//	                error status adds "otel.status_code": "ERROR" and
//	                "otel.status_description"
//
// A span already stored is left as it was, so writing a batch twice is
// harmless.
package tracing
