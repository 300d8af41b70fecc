package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"berth.dev/services/apiclient"
)

// timeFlags adds --from/--to (RFC 3339, or a duration meaning that long
// ago) and, when step, --step, and returns a function filling the query.
func timeFlags(f *flags, step bool, now func() time.Time) func(url.Values) error {
	from := f.String("from", "24h", "start: RFC 3339 time, or a duration meaning that long ago")
	to := f.String("to", "", "end: RFC 3339 time, or a duration meaning that long ago (default now)")
	var st *string
	if step {
		st = f.String("step", "1h", "bucket width, e.g. 5m, 1h, 24h")
	}
	return func(q url.Values) error {
		for _, p := range []struct {
			name string
			v    *string
		}{{"from", from}, {"to", to}} {
			if *p.v == "" {
				continue
			}
			t, err := timeArg(*p.v, now())
			if err != nil {
				return usagef("--%s: %v", p.name, err)
			}
			q.Set(p.name, t)
		}
		if st != nil && *st != "" {
			if _, err := time.ParseDuration(*st); err != nil {
				return usagef("--step: %v", err)
			}
			q.Set("step", *st)
		}
		return nil
	}
}

// timeArg is v as RFC 3339: a duration d means now − d.
func timeArg(v string, now time.Time) (string, error) {
	if d, err := time.ParseDuration(v); err == nil {
		return now.Add(-d).UTC().Format(time.RFC3339), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return "", fmt.Errorf("%q is neither an RFC 3339 time nor a duration", v)
	}
	return t.UTC().Format(time.RFC3339), nil
}

func runUsage(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "usage", "[--from T] [--to T] [--step D] [--json]", "  berthctl usage --from 168h --step 24h").withTenant().withJSON()
	fill := timeFlags(f, true, time.Now)
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	q := url.Values{}
	if err := fill(q); err != nil {
		return err
	}
	var u struct {
		Points []struct {
			T           time.Time        `json:"t"`
			MessagesIn  int64            `json:"messages_in"`
			MessagesOut int64            `json:"messages_out"`
			BytesIn     int64            `json:"bytes_in"`
			BytesOut    int64            `json:"bytes_out"`
			ConnSeconds int64            `json:"connection_seconds"`
			Drops       map[string]int64 `json:"drops"`
		} `json:"points"`
	}
	if ok, err := tenantCall(ctx, e, f, apiclient.GetUsage, nil, q, nil, &u); !ok || err != nil {
		return err
	}
	rows := make([][]string, 0, len(u.Points))
	for _, p := range u.Points {
		var drops int64
		for _, n := range p.Drops {
			drops += n
		}
		rows = append(rows, []string{when(&p.T), fmt.Sprint(p.MessagesIn), fmt.Sprint(p.MessagesOut), fmt.Sprint(p.BytesIn), fmt.Sprint(p.BytesOut), fmt.Sprint(p.ConnSeconds), fmt.Sprint(drops)})
	}
	table(e.stdout, []string{"FROM", "MSGS IN", "MSGS OUT", "BYTES IN", "BYTES OUT", "CONN SECONDS", "DROPS"}, rows)
	return nil
}

func runLatency(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "latency", "[--metric delivery|ack|connect] [--from T] [--to T] [--step D] [--json]", "  berthctl latency --metric connect --from 6h --step 15m").withTenant().withJSON()
	metric := f.String("metric", "delivery", "delivery, ack or connect")
	fill := timeFlags(f, true, time.Now)
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	q := url.Values{"metric": {*metric}}
	if err := fill(q); err != nil {
		return err
	}
	var l struct {
		Series []struct {
			T     time.Time `json:"t"`
			Count int64     `json:"count"`
			P50   *float64  `json:"p50_us"`
			P90   *float64  `json:"p90_us"`
			P99   *float64  `json:"p99_us"`
			Max   *float64  `json:"max_us"`
		} `json:"series"`
	}
	if ok, err := tenantCall(ctx, e, f, apiclient.GetLatency, nil, q, nil, &l); !ok || err != nil {
		return err
	}
	us := func(p *float64) string {
		if p == nil {
			return "-"
		}
		return (time.Duration(*p * float64(time.Microsecond))).Round(time.Microsecond).String()
	}
	rows := make([][]string, 0, len(l.Series))
	for _, s := range l.Series {
		rows = append(rows, []string{when(&s.T), fmt.Sprint(s.Count), us(s.P50), us(s.P90), us(s.P99), us(s.Max)})
	}
	table(e.stdout, []string{"FROM", "COUNT", "P50", "P90", "P99", "MAX"}, rows)
	return nil
}

func runRetained(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "retained", "[--filter F] [--json]", "  berthctl retained --filter 'sensors/#'").withTenant().withJSON()
	filter := f.String("filter", "#", "topic filter")
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	var l struct {
		Items []struct {
			Topic    string    `json:"topic"`
			Payload  string    `json:"payload_base64"`
			QoS      int       `json:"qos"`
			Size     int       `json:"size"`
			StoredAt time.Time `json:"stored_at"`
		} `json:"items"`
	}
	if ok, err := tenantCall(ctx, e, f, apiclient.ListRetained, nil, url.Values{"filter": {*filter}}, nil, &l); !ok || err != nil {
		return err
	}
	rows := make([][]string, 0, len(l.Items))
	for _, m := range l.Items {
		p, _ := base64.StdEncoding.DecodeString(m.Payload)
		rows = append(rows, []string{m.Topic, fmt.Sprint(m.QoS), fmt.Sprint(m.Size), when(&m.StoredAt), preview(p, 40)})
	}
	table(e.stdout, []string{"TOPIC", "QOS", "SIZE", "STORED", "PAYLOAD"}, rows)
	return nil
}

// preview is p as text cut to n runes, or its size when it is not UTF-8.
func preview(p []byte, n int) string {
	if !utf8.Valid(p) {
		return fmt.Sprintf("(%d bytes binary)", len(p))
	}
	s := strings.Join(strings.Fields(string(p)), " ")
	if utf8.RuneCountInString(s) > n {
		return string([]rune(s)[:n-1]) + "…"
	}
	return s
}

func runTraces(ctx context.Context, e *env, args []string) error {
	return subcommand(ctx, e, "traces", args, "list", map[string]func(context.Context, *env, []string) error{
		"list": tracesList, "show": tracesShow,
	})
}

func tracesList(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "traces list", "[--kind K] [--client-id C] [--min-duration D] [--errors] [--from T] [--to T] [--limit N | --all] [--json]", "  berthctl traces --kind mqtt.publish --min-duration 5ms --limit 200").withTenant().withJSON().withPages()
	kind := f.String("kind", "", "root span name, e.g. mqtt.connect or mqtt.publish")
	client := f.String("client-id", "", "traces with a span of this client")
	minDur := f.String("min-duration", "", "traces at least this long, e.g. 5ms")
	errs := f.Bool("errors", false, "only traces with an error")
	fill := timeFlags(f, false, time.Now)
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	q := url.Values{}
	if err := fill(q); err != nil {
		return err
	}
	for k, v := range map[string]string{"kind": *kind, "client_id": *client, "min_duration": *minDur} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if *errs {
		q.Set("errors", "true")
	}
	items, printed, err := tenantList[struct {
		TraceID    string    `json:"trace_id"`
		RootName   string    `json:"root_name"`
		Start      time.Time `json:"start"`
		DurationNS int64     `json:"duration_ns"`
		SpanCount  int       `json:"span_count"`
		ClientID   string    `json:"client_id"`
		Error      bool      `json:"error"`
	}](ctx, e, f, apiclient.ListTraces, q)
	if printed || err != nil {
		return err
	}
	rows := make([][]string, 0, len(items))
	for _, t := range items {
		status := "ok"
		if t.Error {
			status = "error"
		}
		rows = append(rows, []string{t.TraceID, t.RootName, when(&t.Start), time.Duration(t.DurationNS).String(), fmt.Sprint(t.SpanCount), orDash(t.ClientID), status})
	}
	table(e.stdout, []string{"TRACE ID", "ROOT", "START", "DURATION", "SPANS", "CLIENT", "STATUS"}, rows)
	return nil
}

// span is one span of a trace.
type span struct {
	ID         string    `json:"span_id"`
	Parent     *string   `json:"parent_span_id"`
	Name       string    `json:"name"`
	Start      time.Time `json:"start"`
	DurationNS int64     `json:"duration_ns"`
}

func tracesShow(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "traces show", "TRACE_ID [--json]", "  berthctl traces show 4bf92f3577b34da6a3ce929d0e0e4736").withTenant().withJSON()
	pos, err := f.parse(args, 1, 1)
	if err != nil {
		return err
	}
	var tr struct {
		TraceID string `json:"trace_id"`
		Spans   []span `json:"spans"`
	}
	if ok, err := tenantCall(ctx, e, f, apiclient.GetTrace, pos, nil, nil, &tr); !ok || err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "Trace %s\n", tr.TraceID)
	fmt.Fprint(e.stdout, waterfall(tr.Spans, 40))
	return nil
}

// waterfall draws spans as a tree, each with a bar of width cells placed
// on the trace's time axis.
func waterfall(spans []span, width int) string {
	if len(spans) == 0 {
		return "(no spans)\n"
	}
	start, end := spans[0].Start, spans[0].Start
	children := map[string][]span{}
	ids := map[string]bool{}
	for _, s := range spans {
		ids[s.ID] = true
		if s.Start.Before(start) {
			start = s.Start
		}
		if e := s.Start.Add(time.Duration(s.DurationNS)); e.After(end) {
			end = e
		}
	}
	var roots []span
	for _, s := range spans {
		if s.Parent == nil || !ids[*s.Parent] {
			roots = append(roots, s)
		} else {
			children[*s.Parent] = append(children[*s.Parent], s)
		}
	}
	total := end.Sub(start)
	if total <= 0 {
		total = 1
	}
	byStart := func(l []span) {
		sort.SliceStable(l, func(i, j int) bool { return l[i].Start.Before(l[j].Start) })
	}
	var rows [][]string
	seen := map[string]bool{}
	var walk func(s span, depth int)
	walk = func(s span, depth int) {
		if seen[s.ID] {
			return // a cycle in parent ids
		}
		seen[s.ID] = true
		off := int(int64(s.Start.Sub(start)) * int64(width) / int64(total))
		n := int(s.DurationNS * int64(width) / int64(total))
		if n < 1 {
			n = 1
		}
		if off+n > width {
			off = max(0, width-n)
		}
		bar := strings.Repeat(" ", off) + strings.Repeat("█", n) + strings.Repeat(" ", width-off-n)
		rows = append(rows, []string{strings.Repeat("  ", depth) + s.Name, "+" + s.Start.Sub(start).String(), time.Duration(s.DurationNS).String(), "|" + bar + "|"})
		kids := children[s.ID]
		byStart(kids)
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	byStart(roots)
	for _, r := range roots {
		walk(r, 0)
	}
	var b strings.Builder
	table(&b, []string{"SPAN", "AT", "DURATION", "TIMELINE " + total.String()}, rows)
	return b.String()
}
