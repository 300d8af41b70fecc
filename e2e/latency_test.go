package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"berth.dev/e2e/internal/stack"
)

// N QoS 1 messages through the gateway to a subscriber show up, after the
// node's next usage flush, in the tenant's latency: at least N deliveries
// and N acknowledgements, and the two connections.
func TestLatencyCountsEveryMessage(t *testing.T) {
	t.Parallel()
	s := stack.New(t, bins, stack.Options{Gateways: 1})
	a := s.Signup(t)
	c := s.CreateCredential(t, a, []string{"#"}, []string{"#"}, nil)
	gw := s.Gateways[0].MQTT
	sub := mustConnectV5(t, gw, c, "lat-sub")
	sub.subscribe(t, "lat/#")
	pub := mustConnectV5(t, gw, c, "lat-pub")
	const n = 15 // within the free plan's message rate
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if _, err := pub.Publish(ctx, &paho.Publish{Topic: "lat/x", QoS: 1, Payload: fmt.Appendf(nil, "m%d", i)}); err != nil {
			cancel()
			t.Fatalf("publish %d: %v", i, err)
		}
		cancel()
		sub.expect(t, fmt.Sprintf("lat/x=m%d", i))
	}

	count := func(metric string) (total int64, p99 float64) {
		var out struct {
			Series []struct {
				Count int64    `json:"count"`
				P99   *float64 `json:"p99_us"`
			} `json:"series"`
		}
		if code := s.Do(t, "GET", "/v1/tenants/"+a.Tenant.ID+"/latency?metric="+metric+"&step=1m", a.APIKey, nil, &out); code != http.StatusOK {
			t.Fatalf("latency %s: status %d", metric, code)
		}
		for _, p := range out.Series {
			total += p.Count
			if p.P99 != nil {
				p99 = max(p99, *p.P99)
			}
		}
		return total, p99
	}
	deadline := time.Now().Add(35 * time.Second) // the node flushes every 10 s
	for {
		d, dp99 := count("delivery")
		ack, ap99 := count("ack")
		conns, _ := count("connect")
		if d >= n && ack >= n && conns >= 2 {
			if dp99 <= 0 || ap99 <= 0 {
				t.Fatalf("p99 delivery %v µs, ack %v µs: want positive", dp99, ap99)
			}
			t.Logf("delivery %d samples (p99 %.1f µs), ack %d (p99 %.1f µs), connect %d", d, dp99, ack, ap99, conns)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("latency after a flush: %d deliveries, %d acks, %d connects; want ≥ %d, ≥ %d, ≥ 2", d, ack, conns, n, n)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
