package loadgen

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"berth.dev/broker/internal/histogram"
)

// Report is the outcome of a run; cmd/loadtest prints it as text or JSON
// and make bench reads the JSON. Rates are per second of the measured
// interval; MB is 10^6 payload bytes.
type Report struct {
	Mode      Mode   `json:"mode"`
	Addr      string `json:"addr"`
	Protocol  string `json:"protocol"`  // "3.1.1" or "5.0"
	Transport string `json:"transport"` // "tcp", "tls", "ws" or "wss"
	Started   string `json:"started"`   // RFC 3339

	// conn mode
	Levels []LevelReport `json:"levels,omitempty"`

	// pub and pubsub modes
	QoS             byte    `json:"qos"`
	Payload         int     `json:"payload_bytes"`
	Pubs            int     `json:"pubs"`
	Subs            int     `json:"subs"`
	Topics          int     `json:"topics"`
	Rate            int     `json:"rate_per_pub"`
	Inflight        int     `json:"inflight"`
	PublishSeconds  float64 `json:"publish_seconds"`  // from start until publishers stopped
	MeasuredSeconds float64 `json:"measured_seconds"` // from start until the last ack or delivery
	Sent            uint64  `json:"sent"`
	Acked           uint64  `json:"acked"`
	Rejected        uint64  `json:"rejected"`
	Unacked         uint64  `json:"unacked"`
	Expected        uint64  `json:"expected"`  // deliveries owed to subscribers
	Delivered       uint64  `json:"delivered"` // unique deliveries
	Lost            uint64  `json:"lost"`
	Duplicates      uint64  `json:"duplicates"`
	Unexpected      uint64  `json:"unexpected"`
	// BlockedAtStop counts publishers still blocked writing to the broker
	// when publishing stopped, plus Drain: the broker was not keeping up.
	BlockedAtStop int `json:"blocked_at_stop"`

	// Accepted is what the broker took in: acknowledged messages at QoS 1
	// and 2; at QoS 0 the unique messages the average subscriber counted.
	AcceptedBasis     string  `json:"accepted_basis"` // what "accepted" counted
	AcceptedPerSec    float64 `json:"accepted_msgs_per_sec"`
	AcceptedMBPerSec  float64 `json:"accepted_mb_per_sec"`
	DeliveredPerSec   float64 `json:"delivered_msgs_per_sec"`
	DeliveredMBPerSec float64 `json:"delivered_mb_per_sec"`

	Latency    *Latency `json:"latency,omitempty"`     // end to end, publisher to subscriber
	AckLatency *Latency `json:"ack_latency,omitempty"` // PUBLISH to PUBACK/PUBCOMP

	PerSub []SubReport `json:"per_sub,omitempty"`

	Errors   map[string]uint64 `json:"errors,omitempty"`   // connection failures by class
	Failures []string          `json:"failures,omitempty"` // why the run fails; empty means pass
}

// LevelReport is one level of a conn run.
type LevelReport struct {
	Target      int            `json:"target"`
	Held        int            `json:"held"`   // answered PINGREQ after the hold
	Failed      int            `json:"failed"` // dials, CONNECTs and pings that failed at this level
	Reasons     map[string]int `json:"reasons,omitempty"`
	DialSeconds float64        `json:"dial_seconds"`
	Connect     *Latency       `json:"connect,omitempty"` // dial to CONNACK
	// HeldRSSKiB is Config.RSSPid's VmRSS at the end of the hold, before
	// the PINGREQ check; 0 when not read.
	HeldRSSKiB int64 `json:"held_rss_kib,omitempty"`
}

// SubReport is one subscriber's accounting.
type SubReport struct {
	Expected   uint64 `json:"expected"`
	Delivered  uint64 `json:"delivered"`
	Lost       uint64 `json:"lost"`
	Duplicates uint64 `json:"duplicates"`
	Unexpected uint64 `json:"unexpected"`
}

// Latency summarises a histogram in microseconds.
type Latency struct {
	Count uint64  `json:"count"`
	Min   float64 `json:"min_us"`
	Mean  float64 `json:"mean_us"`
	P50   float64 `json:"p50_us"`
	P90   float64 `json:"p90_us"`
	P99   float64 `json:"p99_us"`
	P999  float64 `json:"p999_us"`
	Max   float64 `json:"max_us"`
}

func summarize(h *histogram.Histogram) *Latency {
	if h.Count() == 0 {
		return nil
	}
	us := func(ns int64) float64 { return float64(ns) / 1e3 }
	return &Latency{
		Count: h.Count(), Min: us(h.Min()), Mean: h.Mean() / 1e3,
		P50: us(h.Quantile(0.5)), P90: us(h.Quantile(0.9)), P99: us(h.Quantile(0.99)),
		P999: us(h.Quantile(0.999)), Max: us(h.Max()),
	}
}

// OK reports whether the run passed its checks.
func (r *Report) OK() bool { return len(r.Failures) == 0 }

// fmtDur prints microseconds as a short duration.
func fmtDur(us float64) string {
	return time.Duration(us * 1e3).Round(time.Microsecond).String()
}

// WriteText prints the human summary.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "loadtest %s against %s (MQTT %s over %s)\n", r.Mode, r.Addr, r.Protocol, r.Transport)
	if r.Mode == ModeConn {
		fmt.Fprintf(w, "%8s %8s %8s %10s %10s  %s\n", "target", "held", "failed", "dial", "conn p99", "reasons")
		for _, l := range r.Levels {
			p99 := "-"
			if l.Connect != nil {
				p99 = fmtDur(l.Connect.P99)
			}
			fmt.Fprintf(w, "%8d %8d %8d %9.2fs %10s  %s\n", l.Target, l.Held, l.Failed, l.DialSeconds, p99, fmtReasons(l.Reasons))
		}
	} else {
		fmt.Fprintf(w, "pubs %d subs %d topics %d qos %d payload %d B rate/pub %s inflight %d\n",
			r.Pubs, r.Subs, r.Topics, r.QoS, r.Payload, rateText(r.Rate), r.Inflight)
		fmt.Fprintf(w, "sent %d in %.2fs; acked %d rejected %d unacked %d; publishers blocked at stop %d\n",
			r.Sent, r.PublishSeconds, r.Acked, r.Rejected, r.Unacked, r.BlockedAtStop)
		fmt.Fprintf(w, "accepted  %12.0f msg/s %9.2f MB/s  (%s)\n", r.AcceptedPerSec, r.AcceptedMBPerSec, r.AcceptedBasis)
		if r.Subs > 0 {
			fmt.Fprintf(w, "delivered %12.0f msg/s %9.2f MB/s  (%d of %d expected, lost %d, duplicates %d, unexpected %d)\n",
				r.DeliveredPerSec, r.DeliveredMBPerSec, r.Delivered, r.Expected, r.Lost, r.Duplicates, r.Unexpected)
		}
		for _, l := range []struct {
			name string
			v    *Latency
		}{{"end-to-end", r.Latency}, {"ack", r.AckLatency}} {
			if l.v == nil {
				continue
			}
			fmt.Fprintf(w, "%s latency: p50 %s p90 %s p99 %s p99.9 %s max %s (n=%d)\n", l.name,
				fmtDur(l.v.P50), fmtDur(l.v.P90), fmtDur(l.v.P99), fmtDur(l.v.P999), fmtDur(l.v.Max), l.v.Count)
		}
	}
	if len(r.Errors) > 0 {
		fmt.Fprintf(w, "errors: %s\n", fmtReasons(r.Errors))
	}
	if r.OK() {
		fmt.Fprintln(w, "result: PASS")
	} else {
		fmt.Fprintf(w, "result: FAIL: %s\n", strings.Join(r.Failures, "; "))
	}
}

func rateText(rate int) string {
	if rate == 0 {
		return "max"
	}
	return fmt.Sprint(rate)
}

func fmtReasons[V int | uint64](m map[string]V) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
