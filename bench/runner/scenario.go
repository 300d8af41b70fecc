package main

import (
	"fmt"
	"strings"
	"time"
)

// loadReport is the part of loadtest's -json report the table uses (see
// berth.dev/broker/internal/loadgen.Report).
type loadReport struct {
	Mode              string   `json:"mode"`
	Sent              uint64   `json:"sent"`
	Acked             uint64   `json:"acked"`
	Expected          uint64   `json:"expected"`
	Delivered         uint64   `json:"delivered"`
	Lost              uint64   `json:"lost"`
	Duplicates        uint64   `json:"duplicates"`
	BlockedAtStop     int      `json:"blocked_at_stop"`
	MeasuredSeconds   float64  `json:"measured_seconds"`
	AcceptedPerSec    float64  `json:"accepted_msgs_per_sec"`
	AcceptedMBPerSec  float64  `json:"accepted_mb_per_sec"`
	DeliveredPerSec   float64  `json:"delivered_msgs_per_sec"`
	DeliveredMBPerSec float64  `json:"delivered_mb_per_sec"`
	Latency           *latency `json:"latency"`
	AckLatency        *latency `json:"ack_latency"`
	Levels            []struct {
		Target      int            `json:"target"`
		Held        int            `json:"held"`
		Failed      int            `json:"failed"`
		Reasons     map[string]int `json:"reasons"`
		DialSeconds float64        `json:"dial_seconds"`
		HeldRSSKiB  int64          `json:"held_rss_kib"` // the broker's VmRSS at the end of the hold (-rss-pid)
	} `json:"levels"`
	Errors   map[string]uint64 `json:"errors"`
	Failures []string          `json:"failures"`
}

type latency struct {
	P50  float64 `json:"p50_us"`
	P90  float64 `json:"p90_us"`
	P99  float64 `json:"p99_us"`
	P999 float64 `json:"p999_us"`
	Max  float64 `json:"max_us"`
}

// run is one scenario against one broker.
type run struct {
	Broker   string      `json:"broker"`
	Scenario string      `json:"scenario"`
	Args     []string    `json:"args"`
	Exit     int         `json:"exit"`
	Before   usage       `json:"before"` // just before loadtest started
	After    usage       `json:"after"`  // just after it ended
	Report   *loadReport `json:"report,omitempty"`
	Error    string      `json:"error,omitempty"` // the run could not be carried out
	Crashed  bool        `json:"crashed,omitempty"`
	Seconds  float64     `json:"seconds"`
	// LoadtestCPU is the load tool's own CPU seconds: on shared cores it
	// competes with the broker.
	LoadtestCPU float64 `json:"loadtest_cpu_seconds"`
}

// cpu is the broker's CPU seconds during the run.
func (r *run) cpu() float64 { return r.After.CPUSeconds - r.Before.CPUSeconds }

// metric is one row of the table.
type metric struct {
	name   string
	higher bool // higher is better
	unit   string
	get    func(*run) (float64, bool)
}

// scenario is one load shape run against every broker.
type scenario struct {
	id      string
	title   string
	args    []string
	metrics []metric
	// rssPid passes the broker's pid to loadtest (-rss-pid), which reads
	// its VmRSS at the end of the hold, while every connection is idle.
	rssPid bool
}

// scale sets how long and how big the scenarios are.
type scale struct {
	dur      time.Duration // each throughput scenario
	sweepDur time.Duration // each payload of the sweep
	conns    []int         // held connections, one scenario each
}

func fullScale() scale {
	return scale{dur: 6 * time.Second, sweepDur: 4 * time.Second, conns: []int{10_000}}
}
func quickScale() scale { return scale{dur: time.Second, sweepDur: time.Second, conns: []int{300}} }

func ok(r *run) bool { return r.Report != nil }

func accepted(r *run) (float64, bool) { return r.Report.AcceptedPerSec, ok(r) }

func acceptedMB(r *run) (float64, bool) { return r.Report.AcceptedMBPerSec, ok(r) }

func delivered(r *run) (float64, bool) { return r.Report.DeliveredPerSec, ok(r) }

// perCPU turns a rate into messages per second of broker CPU: on shared
// cores a broker with more runnable threads gets a larger share of the
// machine, and this figure takes that out.
func perCPU(rate func(*run) (float64, bool)) func(*run) (float64, bool) {
	return func(r *run) (float64, bool) {
		v, good := rate(r)
		if !good || r.cpu() <= 0 || r.Report.MeasuredSeconds <= 0 {
			return 0, false
		}
		return v * r.Report.MeasuredSeconds / r.cpu(), true
	}
}

func lossPct(r *run) (float64, bool) {
	if !ok(r) || r.Report.Expected == 0 {
		return 0, false
	}
	return 100 * float64(r.Report.Lost) / float64(r.Report.Expected), true
}

func lat(pick func(*latency) float64, ack bool) func(*run) (float64, bool) {
	return func(r *run) (float64, bool) {
		if !ok(r) {
			return 0, false
		}
		l := r.Report.Latency
		if ack {
			l = r.Report.AckLatency
		}
		if l == nil {
			return 0, false
		}
		return pick(l), true
	}
}

func p50(l *latency) float64  { return l.P50 }
func p99(l *latency) float64  { return l.P99 }
func p999(l *latency) float64 { return l.P999 }
func pmax(l *latency) float64 { return l.Max }

// scenarios returns make bench's scenarios in order.
func scenarios(s scale) []scenario {
	d := func(x time.Duration) string { return x.String() }
	var out []scenario
	out = append(out,
		scenario{
			id: "ingest-q0-64", title: "ingest, QoS 0, 64 B, 10 publishers (counted by 1 subscriber)",
			args: []string{"-mode", "pub", "-pubs", "10", "-qos", "0", "-payload", "64", "-duration", d(s.dur)},
			metrics: []metric{
				{"accepted", true, "msg/s", accepted},
				{"accepted per broker CPU s", true, "msg", perCPU(accepted)},
				{"loss", false, "%", lossPct},
			},
		},
		scenario{
			id: "ingest-q1-64", title: "ingest, QoS 1, 64 B, 10 publishers, 100 in flight each",
			args: []string{"-mode", "pub", "-pubs", "10", "-qos", "1", "-payload", "64", "-inflight", "100", "-duration", d(s.dur)},
			metrics: []metric{
				{"accepted", true, "msg/s", accepted},
				{"accepted per broker CPU s", true, "msg", perCPU(accepted)},
				{"PUBACK p99", false, "µs", lat(p99, true)},
			},
		},
	)
	for _, size := range []int{64, 1024, 8192, 65536} {
		out = append(out, scenario{
			id:    fmt.Sprintf("sweep-%d", size),
			title: fmt.Sprintf("payload sweep, QoS 0, %s, 10 publishers", sizeText(size)),
			args:  []string{"-mode", "pub", "-pubs", "10", "-qos", "0", "-payload", fmt.Sprint(size), "-duration", d(s.sweepDur)},
			metrics: []metric{
				{"accepted", true, "msg/s", accepted},
				{"accepted", true, "MB/s", acceptedMB},
				{"accepted per broker CPU s", true, "msg", perCPU(accepted)},
			},
		})
	}
	out = append(out,
		scenario{
			id: "fanout-100", title: "fan-out x100, QoS 0, 64 B, 1 publisher at 1,000 msg/s, 100 subscribers",
			args: []string{"-mode", "pubsub", "-pubs", "1", "-subs", "100", "-qos", "0", "-payload", "64", "-rate", "1000", "-duration", d(s.dur)},
			metrics: []metric{
				{"delivered", true, "msg/s", delivered},
				{"delivered per broker CPU s", true, "msg", perCPU(delivered)},
				{"e2e p50", false, "µs", lat(p50, false)},
				{"e2e p99", false, "µs", lat(p99, false)},
				{"loss", false, "%", lossPct},
			},
		},
		scenario{
			id: "fanout-100-max", title: "fan-out x100, QoS 0, 64 B, 1 publisher as fast as it can, 100 subscribers",
			args: []string{"-mode", "pubsub", "-pubs", "1", "-subs", "100", "-qos", "0", "-payload", "64", "-duration", d(s.sweepDur)},
			metrics: []metric{
				{"delivered", true, "msg/s", delivered},
				{"delivered per broker CPU s", true, "msg", perCPU(delivered)},
				{"loss", false, "%", lossPct},
			},
		},
		scenario{
			id: "latency-1k", title: "latency, QoS 0, 64 B, 1 publisher at 1,000 msg/s, 1 subscriber",
			args: []string{"-mode", "pubsub", "-pubs", "1", "-subs", "1", "-qos", "0", "-payload", "64", "-rate", "1000", "-duration", d(s.dur)},
			metrics: []metric{
				{"e2e p50", false, "µs", lat(p50, false)},
				{"e2e p99", false, "µs", lat(p99, false)},
				{"e2e p99.9", false, "µs", lat(p999, false)},
				{"e2e max", false, "µs", lat(pmax, false)},
			},
		},
	)
	for _, n := range s.conns {
		out = append(out, connScenario(n))
	}
	return out
}

// connScenario holds n idle connections. Past about 25,000 the dials
// come from several 127.0.0.x addresses in turn, each with its own
// ephemeral ports.
func connScenario(n int) scenario {
	args := []string{"-mode", "conn", "-levels", fmt.Sprint(n), "-hold", "3s", "-dial-concurrency", "200"}
	if n > connsPerSource {
		var srcs []string
		for i := range (n + connsPerSource - 1) / connsPerSource {
			srcs = append(srcs, fmt.Sprintf("127.0.0.%d", 2+i))
		}
		args = append(args, "-source-addrs", strings.Join(srcs, ","))
	}
	return scenario{
		id: fmt.Sprintf("conn-%d", n), title: fmt.Sprintf("%s held connections, 200 dials at a time, 3 s hold, PINGREQ check", thousands(n)),
		args: args, rssPid: true,
		metrics: []metric{
			{"held", true, "conns", func(r *run) (float64, bool) {
				if !ok(r) || len(r.Report.Levels) == 0 {
					return 0, false
				}
				return float64(r.Report.Levels[0].Held), true
			}},
			// What issue 19's target is about: the resident memory the
			// held connections cost while idle, read at the end of the
			// hold (before the PINGREQ check wakes them all), over the
			// broker's before the run.
			{"RSS/conn held", false, "KiB", func(r *run) (float64, bool) {
				if !ok(r) || len(r.Report.Levels) == 0 || r.Report.Levels[0].Held == 0 || r.Report.Levels[0].HeldRSSKiB == 0 {
					return 0, false
				}
				l := r.Report.Levels[0]
				return float64(l.HeldRSSKiB-r.Before.RSSKiB) / float64(l.Held), true
			}},
			// The peak (VmHWM) over the whole run, the PINGREQ check and
			// the load tool closing every connection at once included.
			{"RSS/conn peak", false, "KiB", func(r *run) (float64, bool) {
				if !ok(r) || len(r.Report.Levels) == 0 || r.Report.Levels[0].Held == 0 {
					return 0, false
				}
				return float64(r.After.PeakRSSKiB-r.Before.RSSKiB) / float64(r.Report.Levels[0].Held), true
			}},
			{"dial time", false, "s", func(r *run) (float64, bool) {
				if !ok(r) || len(r.Report.Levels) == 0 {
					return 0, false
				}
				return r.Report.Levels[0].DialSeconds, true
			}},
		},
	}
}

// connsPerSource is how many connections one source address is given, below
// Linux's default ephemeral port range (32768-60999).
const connsPerSource = 25_000

func sizeText(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%d KiB", n/1024)
	}
	return fmt.Sprintf("%d B", n)
}

func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
