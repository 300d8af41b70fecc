package httpapi_test

import (
	"context"
	"math"
	"math/bits"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"
)

// logLinearUpper is the upper bound of the broker's histogram bucket
// holding v (broker/internal/histogram, precision 7): what a node stores.
func logLinearUpper(v int64) int64 {
	const precision = 7
	if v < 1<<precision {
		return v
	}
	e := bits.Len64(uint64(v)) - precision
	return (v>>e+1)<<e - 1
}

// TestLatency stores the histograms of known samples as nodes flush them
// (two nodes, several minutes, per metric) and checks the endpoint's
// percentiles against the exact order statistics of the same samples:
// merged across nodes and minutes, each within the histogram's 1/64.
func TestLatency(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	other := e.signup("bob@example.com")
	ctx := context.Background()
	base := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	r := rand.New(rand.NewPCG(7, 8))

	// flush inserts one node's histogram of vals for one minute.
	flush := func(tid, node, metric string, minute time.Time, vals []int64) {
		t.Helper()
		counts := map[int64]int64{}
		var sum int64
		for _, v := range vals {
			counts[logLinearUpper(v)]++
			sum += v
		}
		var bounds, cs []int64
		for b := range counts {
			bounds = append(bounds, b)
		}
		slices.Sort(bounds)
		for _, b := range bounds {
			cs = append(cs, counts[b])
		}
		if _, err := e.pool.Exec(ctx, `INSERT INTO latency (tenant_id, node_id, bucket, metric, count, sum_ns, min_ns, max_ns, bounds, counts)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			tid, node, minute, metric, len(vals), sum, slices.Min(vals), slices.Max(vals), bounds, cs); err != nil {
			t.Fatal(err)
		}
	}
	var hour0 []int64 // every delivery sample of the first hour
	for i, node := range []string{"n1", "n2"} {
		for m := range 3 {
			var vals []int64
			for range 400 + 300*i {
				// Node n2 is slower: the merged percentiles are not the
				// average of the nodes'.
				v := int64(r.ExpFloat64()*float64(50e3*(1+9*i))) + 8e3
				vals = append(vals, v)
			}
			flush(u.tenantID, node, "delivery", base.Add(time.Duration(m*20)*time.Minute), vals)
			hour0 = append(hour0, vals...)
		}
	}
	flush(u.tenantID, "n1", "delivery", base.Add(2*time.Hour+time.Minute), []int64{1e6, 3e6})
	flush(u.tenantID, "n1", "ack", base, []int64{2e6})
	flush(other.tenantID, "n1", "delivery", base, []int64{9e9}) // another tenant's

	q := url.Values{"from": {base.Format(time.RFC3339)}, "to": {base.Add(3 * time.Hour).Format(time.RFC3339)}, "step": {"1h"}}
	var out struct {
		Metric      string
		StepSeconds int64 `json:"step_seconds"`
		Series      []struct {
			T     time.Time
			Count int64
			P50   *float64 `json:"p50_us"`
			P90   *float64 `json:"p90_us"`
			P99   *float64 `json:"p99_us"`
			Max   *float64 `json:"max_us"`
		}
	}
	res := e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/latency?metric=delivery&"+q.Encode(), u.key, nil)
	want(t, res, http.StatusOK)
	res.json(t, &out)
	if out.Metric != "delivery" || out.StepSeconds != 3600 || len(out.Series) != 3 {
		t.Fatalf("series %s", res.body)
	}
	p0, p1, p2 := out.Series[0], out.Series[1], out.Series[2]
	if !p0.T.Equal(base) || p0.Count != int64(len(hour0)) {
		t.Fatalf("point 0: %v count %d, want %v %d", p0.T, p0.Count, base, len(hour0))
	}
	slices.Sort(hour0)
	exact := func(q float64) float64 { return float64(hour0[int(math.Ceil(q*float64(len(hour0))))-1]) / 1e3 }
	for _, c := range []struct {
		name string
		got  *float64
		want float64
	}{{"p50", p0.P50, exact(0.5)}, {"p90", p0.P90, exact(0.9)}, {"p99", p0.P99, exact(0.99)}, {"max", p0.Max, exact(1)}} {
		if c.got == nil || *c.got < c.want || *c.got-c.want > c.want/64 {
			t.Errorf("%s = %v µs, exact %v µs: not within 1/64 above", c.name, c.got, c.want)
		}
	}
	if *p0.Max != exact(1) {
		t.Errorf("max %v µs, want exactly %v", *p0.Max, exact(1))
	}
	if p1.Count != 0 || p1.P50 != nil || p1.Max != nil {
		t.Errorf("empty step: %+v, want count 0 and null percentiles", p1)
	}
	if p2.Count != 2 || *p2.P50 < 1000 || *p2.P50 > 1000*65/64 || *p2.Max != 3000 {
		t.Errorf("point 2: count %d p50 %v max %v, want 2, 1000 (+1/64), 3000", p2.Count, *p2.P50, *p2.Max)
	}

	// Steps align to the epoch: a range starting mid-hour still gets the
	// whole first hour.
	q.Set("from", base.Add(30*time.Minute).Format(time.RFC3339))
	res = e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/latency?"+q.Encode(), u.key, nil)
	want(t, res, http.StatusOK)
	res.json(t, &out)
	if len(out.Series) != 3 || !out.Series[0].T.Equal(base) || out.Series[0].Count != int64(len(hour0)) {
		t.Fatalf("mid-hour from: %s", res.body)
	}

	q.Set("metric", "ack")
	res = e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/latency?"+q.Encode(), u.key, nil)
	want(t, res, http.StatusOK)
	res.json(t, &out)
	if out.Series[0].Count != 1 || *out.Series[0].P99 != 2000 {
		t.Fatalf("ack: %s", res.body)
	}

	for _, bad := range []string{"metric=fsync", "step=30s", "step=1x", "from=yesterday"} {
		res = e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/latency?"+bad, u.key, nil)
		want(t, res, http.StatusUnprocessableEntity)
	}
	res = e.do(t, "GET", "/v1/tenants/"+other.tenantID+"/latency", u.key, nil)
	want(t, res, http.StatusNotFound)
}
