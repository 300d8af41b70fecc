package httpapi

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"berth.dev/services/internal/store"
)

type latencyPointJSON struct {
	T     time.Time `json:"t"`
	Count int64     `json:"count"`
	// Microseconds; null for a step without samples.
	P50 *float64 `json:"p50_us"`
	P90 *float64 `json:"p90_us"`
	P99 *float64 `json:"p99_us"`
	Max *float64 `json:"max_us"`
}

type latencyJSON struct {
	Metric      string             `json:"metric"`
	From        time.Time          `json:"from"`
	To          time.Time          `json:"to"`
	StepSeconds int64              `json:"step_seconds"`
	Series      []latencyPointJSON `json:"series"`
}

// latency answers the tenant's latency percentiles for every message (or
// connection) of ?metric=delivery|ack|connect (default delivery), with the
// same ?from=&to=&step= and epoch-aligned UTC buckets as usage: the
// histograms of every node and minute in a step are merged, then read
// (percentiles are never averaged).
func (a *api) latency(w http.ResponseWriter, r *http.Request) error {
	var v validator
	q := r.URL.Query()
	metric := q.Get("metric")
	if metric == "" {
		metric = "delivery"
	}
	v.check(slices.Contains(store.LatencyMetrics, metric), "metric", "must be one of "+strings.Join(store.LatencyMetrics, ", "))
	from, to, step, err := seriesRange(r, &v)
	if err != nil {
		return err
	}
	points, err := a.store.Latency(r.Context(), tenantFrom(r.Context()).ID, metric, from, to, step)
	if err != nil {
		return err
	}
	out := latencyJSON{Metric: metric, From: from, To: to, StepSeconds: int64(step / time.Second), Series: make([]latencyPointJSON, len(points))}
	us := func(ns int64) *float64 {
		f := float64(ns) / 1e3
		return &f
	}
	for i, p := range points {
		out.Series[i] = latencyPointJSON{T: p.T, Count: p.Count}
		if p.Count > 0 {
			out.Series[i].P50, out.Series[i].P90, out.Series[i].P99, out.Series[i].Max = us(p.P50), us(p.P90), us(p.P99), us(p.Max)
		}
	}
	return writeJSON(w, http.StatusOK, out)
}

// seriesRange reads and checks ?from=&to=&step= of a time series as usage
// does (timeRange; step ≥ 1m in whole seconds, default 1h; at most
// maxPoints points) and returns the range widened to step boundaries
// aligned to the Unix epoch. Problems found before are in v.
func seriesRange(r *http.Request, v *validator) (from, to time.Time, step time.Duration, err error) {
	from, to = timeRange(r, v)
	q := r.URL.Query()
	step = time.Hour
	if s := q.Get("step"); s != "" {
		d, perr := time.ParseDuration(s)
		if perr != nil {
			v.add("step", "must be a duration like 1m, 5m or 1h")
		} else {
			step = d
		}
	}
	v.check(step >= minStep, "step", "must be at least 1m")
	v.check(step%time.Second == 0, "step", "must be a whole number of seconds")
	if err := v.err(); err != nil {
		return from, to, step, err
	}
	if q.Get("to") == "" {
		now := time.Now()
		_, to = store.AlignRange(now, now, step)
		if q.Get("from") == "" {
			from = to.Add(-24 * time.Hour)
		}
	}
	from, to = store.AlignRange(from, to, step)
	v.check(from.Before(to), "from", "must be before to")
	v.check(to.Sub(from)/step <= maxPoints, "step", "gives more than "+strconv.Itoa(maxPoints)+" points for this range; use a larger step")
	return from, to, step, v.err()
}
