package httpapi

import (
	"encoding/json"
	"net/http"
	"regexp"
	"time"

	"berth.dev/services/internal/store"
)

// Usage series bounds.
const (
	minStep   = time.Minute
	maxPoints = 1440
)

// timeRange reads ?from= and ?to= (RFC 3339), defaulting to the last 24
// hours ending now.
func timeRange(r *http.Request, v *validator) (from, to time.Time) {
	q := r.URL.Query()
	to = time.Now().UTC().Truncate(time.Minute).Add(time.Minute)
	if s := q.Get("to"); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		v.check(err == nil, "to", "must be an RFC 3339 time like 2026-01-02T15:04:05Z")
		to = t
	}
	from = to.Add(-24 * time.Hour)
	if s := q.Get("from"); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		v.check(err == nil, "from", "must be an RFC 3339 time like 2026-01-02T15:04:05Z")
		from = t
	}
	v.check(from.Before(to), "from", "must be before to")
	return from.Truncate(time.Second), to.Truncate(time.Second)
}

type usagePointJSON struct {
	T                 time.Time        `json:"t"`
	MessagesIn        int64            `json:"messages_in"`
	MessagesAccepted  int64            `json:"messages_accepted"`
	MessagesOut       int64            `json:"messages_out"`
	BytesIn           int64            `json:"bytes_in"`
	BytesOut          int64            `json:"bytes_out"`
	ConnectionSeconds int64            `json:"connection_seconds"`
	StoredBytes       int64            `json:"stored_bytes"`
	Drops             map[string]int64 `json:"drops"`
}

type usageJSON struct {
	From        time.Time        `json:"from"`
	To          time.Time        `json:"to"`
	StepSeconds int64            `json:"step_seconds"`
	Points      []usagePointJSON `json:"points"`
}

// usage answers the tenant's usage series: ?from=&to= (RFC 3339) and
// ?step= (a duration like 5m or 1h, at least 1m, whole seconds), at most
// 1440 points, one per UTC step bucket aligned to the Unix epoch that
// meets [from, to); the answer's from and to are the aligned bounds.
// ?group_by=credential answers a series per credential instead (step a
// whole number of hours: credential usage is kept per hour).
func (a *api) usage(w http.ResponseWriter, r *http.Request) error {
	var v validator
	groupBy := r.URL.Query().Get("group_by")
	v.check(groupBy == "" || groupBy == "credential", "group_by", "must be credential, or absent")
	from, to, step, err := seriesRange(r, &v)
	if err != nil {
		return err
	}
	tid := tenantFrom(r.Context()).ID
	if groupBy == "credential" {
		return a.usageByCredential(w, r, tid, from, to, step)
	}
	points, err := a.store.Usage(r.Context(), tid, from, to, step)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, usageOut(from, to, step, points))
}

func usageOut(from, to time.Time, step time.Duration, points []store.UsagePoint) usageJSON {
	out := usageJSON{From: from, To: to, StepSeconds: int64(step / time.Second), Points: make([]usagePointJSON, len(points))}
	for i, p := range points {
		out.Points[i] = usagePointJSON(p)
	}
	return out
}

type trafficPointJSON struct {
	T           time.Time `json:"t"`
	MessagesIn  int64     `json:"messages_in"`
	MessagesOut int64     `json:"messages_out"`
	BytesIn     int64     `json:"bytes_in"`
	BytesOut    int64     `json:"bytes_out"`
}

type credentialSeriesJSON struct {
	CredentialID string             `json:"credential_id"`
	Name         *string            `json:"name"`
	Points       []trafficPointJSON `json:"points"`
}

type groupedUsageJSON[S any] struct {
	From        time.Time `json:"from"`
	To          time.Time `json:"to"`
	StepSeconds int64     `json:"step_seconds"`
	GroupBy     string    `json:"group_by"`
	Series      []S       `json:"series"`
}

// usageByCredential answers ?group_by=credential: a series for each
// credential with traffic in the range.
func (a *api) usageByCredential(w http.ResponseWriter, r *http.Request, tid string, from, to time.Time, step time.Duration) error {
	if step%time.Hour != 0 {
		var v validator
		v.add("step", "must be a whole number of hours (1h, 24h, …) with group_by=credential: credential usage is kept per hour")
		return v.err()
	}
	cs, err := a.store.UsageByCredential(r.Context(), tid, from, to, step)
	if err != nil {
		return err
	}
	out := groupedUsageJSON[credentialSeriesJSON]{From: from, To: to, StepSeconds: int64(step / time.Second), GroupBy: "credential",
		Series: make([]credentialSeriesJSON, len(cs))}
	for i, c := range cs {
		s := credentialSeriesJSON{CredentialID: c.CredentialID, Name: c.Name, Points: make([]trafficPointJSON, len(c.Points))}
		for j, p := range c.Points {
			s.Points[j] = trafficPointJSON(p)
		}
		out.Series[i] = s
	}
	return writeJSON(w, http.StatusOK, out)
}

type tenantSeriesJSON struct {
	TenantID  string           `json:"tenant_id"`
	Slug      string           `json:"slug"`
	DeletedAt *time.Time       `json:"deleted_at,omitempty"` // a deleted tenant's series
	Points    []usagePointJSON `json:"points"`
}

// accountUsage answers GET /v1/usage: the usage of every tenant of the
// caller's account, deleted tenants' included, summed, with the
// ?from=&to=&step= of a tenant's usage; ?group_by=tenant answers a series
// per tenant instead.
func (a *api) accountUsage(w http.ResponseWriter, r *http.Request) error {
	var v validator
	groupBy := r.URL.Query().Get("group_by")
	v.check(groupBy == "" || groupBy == "tenant", "group_by", "must be tenant, or absent")
	from, to, step, err := seriesRange(r, &v)
	if err != nil {
		return err
	}
	accountID := principalFrom(r.Context()).AccountID
	if groupBy == "tenant" {
		ts, err := a.store.AccountUsageByTenant(r.Context(), accountID, from, to, step)
		if err != nil {
			return err
		}
		out := groupedUsageJSON[tenantSeriesJSON]{From: from, To: to, StepSeconds: int64(step / time.Second), GroupBy: "tenant",
			Series: make([]tenantSeriesJSON, len(ts))}
		for i, t := range ts {
			out.Series[i] = tenantSeriesJSON{TenantID: t.TenantID, Slug: t.Slug, DeletedAt: t.DeletedAt, Points: usageOut(from, to, step, t.Points).Points}
		}
		return writeJSON(w, http.StatusOK, out)
	}
	points, err := a.store.AccountUsage(r.Context(), accountID, from, to, step)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, usageOut(from, to, step, points))
}

var traceIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

type traceSummaryJSON struct {
	TraceID    string    `json:"trace_id"`
	RootName   string    `json:"root_name"`
	Start      time.Time `json:"start"`
	DurationNS int64     `json:"duration_ns"`
	SpanCount  int       `json:"span_count"`
	ClientID   string    `json:"client_id"`
	Error      bool      `json:"error"`
}

type spanJSON struct {
	SpanID       string          `json:"span_id"`
	ParentSpanID *string         `json:"parent_span_id"`
	Name         string          `json:"name"`
	Start        time.Time       `json:"start"`
	DurationNS   int64           `json:"duration_ns"`
	Attributes   json.RawMessage `json:"attributes"`
}

// listTraces pages through sampled traces, newest first, in ?from=&to=
// (default the last 24 hours), narrowed by ?kind= (the root span's name),
// ?client_id=, ?min_duration= (a duration like 5ms) and ?errors=true.
func (a *api) listTraces(w http.ResponseWriter, r *http.Request) error {
	var v validator
	from, to := timeRange(r, &v)
	p, err := parsePage(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	f := store.TraceFilter{RootName: q.Get("kind"), ClientID: q.Get("client_id")}
	checkName(&v, "kind", f.RootName, false)
	v.check(len(f.ClientID) <= 65535, "client_id", "must be at most 65535 bytes")
	if s := q.Get("min_duration"); s != "" {
		d, err := time.ParseDuration(s)
		v.check(err == nil && d >= 0, "min_duration", "must be a duration like 500us, 5ms or 1s")
		f.MinDurationNS = int64(d)
	}
	switch q.Get("errors") {
	case "", "false":
	case "true":
		f.ErrorsOnly = true
	default:
		v.add("errors", "must be true or false")
	}
	if err := v.err(); err != nil {
		return err
	}
	ts, next, err := a.store.ListTraces(r.Context(), tenantFrom(r.Context()).ID, from, to, f, p)
	if err != nil {
		return err
	}
	out := make([]traceSummaryJSON, len(ts))
	for i, t := range ts {
		out[i] = traceSummaryJSON(t)
	}
	return writeJSON(w, http.StatusOK, newList(out, next))
}

func (a *api) getTrace(w http.ResponseWriter, r *http.Request) error {
	id := urlParam(r, "trace_id")
	if !traceIDPattern.MatchString(id) {
		return store.ErrNotFound
	}
	spans, err := a.store.Trace(r.Context(), tenantFrom(r.Context()).ID, id)
	if err != nil {
		return err
	}
	out := make([]spanJSON, len(spans))
	for i, s := range spans {
		out[i] = spanJSON{SpanID: s.SpanID, ParentSpanID: s.ParentSpanID, Name: s.Name, Start: s.Start, DurationNS: s.DurationNS, Attributes: s.Attributes}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"trace_id": id, "spans": out})
}
