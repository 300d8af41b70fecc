package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// Span is one sampled span of a trace.
type Span struct {
	TenantID     string
	TraceID      string
	SpanID       string
	ParentSpanID *string
	Name         string
	Start        time.Time
	DurationNS   int64
	Attributes   json.RawMessage
}

// TraceSummary describes a trace in a list: its root span's name, its first
// span's start and the time from there to the end of its last span.
type TraceSummary struct {
	TraceID    string
	RootName   string
	Start      time.Time
	DurationNS int64
	SpanCount  int
	ClientID   string // the client_id attribute of its spans, "" when none has one
	Error      bool   // some span ended with an error status
}

// TraceFilter narrows a trace list; zero fields filter nothing.
type TraceFilter struct {
	RootName      string // the root span's name, e.g. mqtt.connect
	ClientID      string // a span's client_id attribute
	MinDurationNS int64
	ErrorsOnly    bool
}

// InsertSpans stores spans; a span already stored is left as it was, so a
// retried export is harmless. Nodes and the gateway write spans; the API
// only reads them, and uses this in tests.
func (s *Store) InsertSpans(ctx context.Context, spans []Span) error {
	batch := &pgx.Batch{}
	for _, sp := range spans {
		attrs := sp.Attributes
		if len(attrs) == 0 {
			attrs = json.RawMessage(`{}`)
		}
		batch.Queue(`INSERT INTO spans (tenant_id, trace_id, span_id, parent_span_id, name, start, duration_ns, attributes)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING`,
			sp.TenantID, sp.TraceID, sp.SpanID, sp.ParentSpanID, sp.Name, sp.Start, sp.DurationNS, string(attrs))
	}
	return classify("insert spans", s.pool.SendBatch(ctx, batch).Close())
}

// ListTraces pages through the traces of a tenant that started in
// [from, to) and pass f, newest first. The cursor is (start, trace id).
func (s *Store) ListTraces(ctx context.Context, tid string, from, to time.Time, f TraceFilter, p Page) ([]TraceSummary, *Cursor, error) {
	at, id := p.afterArgs()
	rows, err := s.pool.Query(ctx, `
		SELECT trace_id, root_name, start, duration_ns, span_count, client_id, error FROM (
			SELECT trace_id,
			       coalesce((array_agg(name ORDER BY start) FILTER (WHERE parent_span_id IS NULL))[1],
			                (array_agg(name ORDER BY start))[1]) AS root_name,
			       min(start) AS start,
			       (extract(epoch FROM max(start + duration_ns / 1000 * interval '1 microsecond') - min(start)) * 1e9)::bigint AS duration_ns,
			       count(*)::int AS span_count,
			       coalesce((array_agg(attributes->>'client_id' ORDER BY start) FILTER (WHERE attributes ? 'client_id'))[1], '') AS client_id,
			       coalesce(bool_or(attributes->>'otel.status_code' = 'ERROR'), false) AS error
			FROM spans
			WHERE tenant_id = $1 AND trace_id IN (
				-- Candidate traces through the (tenant_id, start) index; a
				-- trace starts at its first span, so look an hour back for
				-- spans of traces that began before from.
				SELECT trace_id FROM spans
				WHERE tenant_id = $1 AND start >= $2::timestamptz - interval '1 hour' AND start < $3)
			GROUP BY trace_id
		) t
		WHERE start >= $2 AND start < $3 AND ($4::timestamptz IS NULL OR (start, trace_id) < ($4, $5::text))
		  AND ($7 = '' OR root_name = $7) AND ($8 = '' OR client_id = $8)
		  AND duration_ns >= $9 AND (NOT $10 OR error)
		ORDER BY start DESC, trace_id DESC LIMIT $6`, tid, from, to, at, id, p.Limit+1,
		f.RootName, f.ClientID, f.MinDurationNS, f.ErrorsOnly)
	if err != nil {
		return nil, nil, classify("list traces", err)
	}
	ts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (TraceSummary, error) {
		var t TraceSummary
		err := row.Scan(&t.TraceID, &t.RootName, &t.Start, &t.DurationNS, &t.SpanCount, &t.ClientID, &t.Error)
		return t, err
	})
	if err != nil {
		return nil, nil, classify("list traces", err)
	}
	ts, next := trim(ts, p.Limit, func(t TraceSummary) Cursor { return Cursor{At: t.Start, ID: t.TraceID} })
	return ts, next, nil
}

// Trace returns a tenant's spans of one trace in start order; ErrNotFound
// when the tenant has none.
func (s *Store) Trace(ctx context.Context, tid, traceID string) ([]Span, error) {
	rows, err := s.pool.Query(ctx,
		`SELECT tenant_id, trace_id, span_id, parent_span_id, name, start, duration_ns, attributes
		 FROM spans WHERE tenant_id = $1 AND trace_id = $2 ORDER BY start, span_id`, tid, traceID)
	if err != nil {
		return nil, classify("trace", err)
	}
	spans, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Span, error) {
		var sp Span
		var attrs []byte
		err := row.Scan(&sp.TenantID, &sp.TraceID, &sp.SpanID, &sp.ParentSpanID, &sp.Name, &sp.Start, &sp.DurationNS, &attrs)
		sp.Attributes = attrs
		return sp, err
	})
	if err != nil {
		return nil, classify("trace", err)
	}
	if len(spans) == 0 {
		return nil, ErrNotFound
	}
	return spans, nil
}
