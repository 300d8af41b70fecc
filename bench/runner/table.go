package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// results is everything one make bench run produced.
type results struct {
	Started  string   `json:"started"`
	Finished string   `json:"finished"`
	Machine  machine  `json:"machine"`
	Brokers  []string `json:"brokers"`
	Gateway  string   `json:"gateway,omitempty"`
	// BerthFsync is -berth-fsync: Berth ran with -data and this policy.
	BerthFsync string `json:"berth_fsync,omitempty"`
	Runs       []*run `json:"runs"`
}

// machine describes where the run happened; the load averages say how
// busy the shared cores were.
type machine struct {
	CPUs         int               `json:"cpus"`
	LoadStart    string            `json:"loadavg_start"`
	LoadEnd      string            `json:"loadavg_end"`
	Go           string            `json:"go"`
	Versions     map[string]string `json:"versions"`
	OpenFilesMax uint64            `json:"open_files_max"`
}

// find returns the run of scenario id against broker, or nil.
func (res *results) find(id, broker string) *run {
	for _, r := range res.Runs {
		if r.Scenario == id && r.Broker == broker {
			return r
		}
	}
	return nil
}

// writeTable writes the Markdown report: one table, a row per metric,
// a column per broker, Berth's ratio over each peer, and each broker's CPU
// seconds and peak RSS per scenario.
func writeTable(w io.Writer, res *results, scs []scenario) {
	fmt.Fprintf(w, "# make bench — %s\n\n", res.Started)
	m := res.Machine
	fmt.Fprintf(w, "Loopback, %d CPUs shared by the load tool, the broker under test and whatever else runs on the machine "+
		"(load average %s at start, %s at the end). One broker process at a time, started fresh for each scenario. %s. ",
		m.CPUs, m.LoadStart, m.LoadEnd, m.Go)
	var vs []string
	for _, b := range res.Brokers {
		if v := m.Versions[b]; v != "" {
			vs = append(vs, b+" "+v)
		}
	}
	fmt.Fprintf(w, "Versions: %s.", strings.Join(vs, ", "))
	if res.BerthFsync != "" {
		fmt.Fprintf(w, " Berth ran with `-data` and `-fsync %s` (QoS 1/2 through its message log, as a node).", res.BerthFsync)
	}
	fmt.Fprint(w, "\n\n")
	fmt.Fprintln(w, "Ratios are the first broker over each peer; ↑ means higher is better, ↓ lower. "+
		"CPU is the broker's user+system seconds during the scenario; RSS is its peak (VmHWM), "+
		"except in `RSS/conn held`, the broker's VmRSS at the end of the hold, before the PINGREQ check. "+
		"On shared cores a broker with more runnable threads takes a larger share of the machine, "+
		"so read the rates beside the per-CPU-second rows. "+
		"✗ marks a run that failed its checks (see the notes).")
	fmt.Fprintln(w)

	base := res.Brokers[0]
	peers := res.Brokers[1:]
	cols := []string{"scenario", "metric"}
	cols = append(cols, res.Brokers...)
	for _, p := range peers {
		cols = append(cols, base+"/"+p)
	}
	cols = append(cols, "CPU s ("+strings.Join(res.Brokers, " / ")+")", "peak RSS MiB ("+strings.Join(res.Brokers, " / ")+")")
	fmt.Fprintln(w, "| "+strings.Join(cols, " | ")+" |")
	fmt.Fprintln(w, "|"+strings.Repeat(" --- |", len(cols)))

	var notes []string
	for _, sc := range scs {
		for i, mt := range sc.metrics {
			row := []string{"", fmt.Sprintf("%s %s %s", mt.name, mt.unit, arrow(mt.higher))}
			if i == 0 {
				row[0] = sc.title
			}
			vals := map[string]float64{}
			for _, b := range res.Brokers {
				r := res.find(sc.id, b)
				row = append(row, cell(r, mt, vals, b))
			}
			for _, p := range peers {
				row = append(row, ratio(vals, base, p))
			}
			if i == 0 {
				var cpu, rss []string
				for _, b := range res.Brokers {
					r := res.find(sc.id, b)
					if r == nil || r.After.PeakRSSKiB == 0 { // not started, or not ours (gateway)
						cpu, rss = append(cpu, "-"), append(rss, "-")
						continue
					}
					cpu = append(cpu, fmt.Sprintf("%.2f", r.cpu()))
					rss = append(rss, fmt.Sprintf("%.0f", float64(r.After.PeakRSSKiB)/1024))
				}
				row = append(row, strings.Join(cpu, " / "), strings.Join(rss, " / "))
			} else {
				row = append(row, "", "")
			}
			fmt.Fprintln(w, "| "+strings.Join(row, " | ")+" |")
		}
		for _, b := range res.Brokers {
			if r := res.find(sc.id, b); r != nil {
				notes = append(notes, runNotes(sc, r)...)
			}
		}
	}
	fmt.Fprintln(w)
	if res.Gateway == "" {
		fmt.Fprintln(w, "Through the gateway (full stack): not measured in this run. Hook: `bench/run.sh -gateway HOST:PORT "+
			"-gateway-user ID -gateway-pass TOKEN` runs the same scenarios through a running gateway as the column "+
			"`gateway` (no CPU or RSS: the process is not ours).")
	} else {
		fmt.Fprintf(w, "Through the gateway: column `gateway` is %s, a running gateway (its CPU and RSS are not measured).\n", res.Gateway)
	}
	if len(notes) > 0 {
		fmt.Fprintln(w, "\n## Notes")
		for _, n := range notes {
			fmt.Fprintln(w, "- "+n)
		}
	}
}

func arrow(higher bool) string {
	if higher {
		return "↑"
	}
	return "↓"
}

// cell formats one broker's value and remembers it for the ratios.
func cell(r *run, mt metric, vals map[string]float64, broker string) string {
	if r == nil {
		return "-"
	}
	if r.Error != "" && r.Report == nil {
		return "error"
	}
	v, ok := mt.get(r)
	if !ok {
		return "-"
	}
	vals[broker] = v
	s := formatValue(v, mt.unit)
	if r.Exit != 0 || r.Crashed {
		s += " ✗"
	}
	return s
}

func formatValue(v float64, unit string) string {
	switch unit {
	case "msg/s", "msg", "conns", "µs":
		return thousands(int(math.Round(v)))
	case "%":
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func ratio(vals map[string]float64, base, peer string) string {
	b, okb := vals[base]
	p, okp := vals[peer]
	if !okb || !okp || p == 0 {
		return "-"
	}
	x := b / p
	if x >= 0.1 || x == 0 {
		return fmt.Sprintf("%.2f×", x)
	}
	return strconv.FormatFloat(x, 'g', 2, 64) + "×" // 0.0012×, not 0.00×

}

// runNotes explains failed or unusual runs.
func runNotes(sc scenario, r *run) []string {
	var out []string
	who := fmt.Sprintf("%s, %s:", sc.id, r.Broker)
	if r.Crashed {
		out = append(out, who+" the broker was not running at the end of the scenario (crashed)")
	}
	if r.Error != "" {
		out = append(out, who+" "+r.Error)
	}
	if r.Report != nil {
		for _, f := range r.Report.Failures {
			out = append(out, who+" "+f)
		}
		if r.Report.BlockedAtStop > 0 {
			out = append(out, fmt.Sprintf("%s %d publishers were still blocked writing when publishing stopped (broker saturated)",
				who, r.Report.BlockedAtStop))
		}
	}
	return out
}
