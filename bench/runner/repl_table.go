package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// replRow is one metric's medians over the rounds and R3's ratio to R1.
type replRow struct {
	Scenario string  `json:"scenario"`
	Metric   string  `json:"metric"`
	Unit     string  `json:"unit"`
	Higher   bool    `json:"higher_is_better"`
	R1       float64 `json:"r1_median"`
	R3       float64 `json:"r3_median"`
	N1       int     `json:"r1_rounds"` // rounds with a value
	N3       int     `json:"r3_rounds"`
	// Ratio is R3's median over R1's; RoundRatios are R3/R1 within each
	// round that has both, whose median and range say how steady it is.
	Ratio       float64   `json:"r3_over_r1"`
	RoundRatios []float64 `json:"round_ratios"`
}

// summarize computes every metric's row from the runs; a run that failed
// its checks, crashed or errored counts for nothing.
func summarize(res *replResults, scs []scenario) []replRow {
	var rows []replRow
	for _, s := range scs {
		for _, m := range s.metrics {
			row := replRow{Scenario: s.id, Metric: m.name, Unit: m.unit, Higher: m.higher}
			vals := map[string][]float64{}
			byRound := map[int]map[string]float64{}
			for _, rr := range res.Runs {
				r := rr.Run
				if r.Scenario != s.id || r.Exit != 0 || r.Crashed || r.Error != "" {
					continue
				}
				v, good := m.get(r)
				if !good {
					continue
				}
				vals[rr.Target] = append(vals[rr.Target], v)
				if byRound[rr.Round] == nil {
					byRound[rr.Round] = map[string]float64{}
				}
				byRound[rr.Round][rr.Target] = v
			}
			row.R1, row.N1 = median(vals["r1"]), len(vals["r1"])
			row.R3, row.N3 = median(vals["r3"]), len(vals["r3"])
			if row.N1 > 0 && row.N3 > 0 && row.R1 != 0 {
				row.Ratio = row.R3 / row.R1
			}
			for round := 1; round <= res.Rounds; round++ {
				v := byRound[round]
				r1, ok1 := v["r1"]
				r3, ok3 := v["r3"]
				if ok1 && ok3 && r1 != 0 {
					row.RoundRatios = append(row.RoundRatios, r3/r1)
				}
			}
			rows = append(rows, row)
		}
	}
	return rows
}

// median is the middle value (the mean of the two middle ones for an even
// count), 0 for none (JSON has no NaN; the counts say a value is missing).
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// writeReplTable writes the Markdown report: medians with the ratios, then
// every run, then notes on failed runs.
func writeReplTable(w io.Writer, res *replResults, scs []scenario) {
	m := res.Machine
	fmt.Fprintf(w, "# make bench-repl — %s\n\n", res.Started)
	fmt.Fprintf(w, "Three replicating node processes (production Raft timing: 100 ms tick, election 10 ticks) and a gateway "+
		"on loopback; every run goes through the gateway at %s. %d CPUs shared by the nodes, the gateway, the load tool "+
		"and whatever else runs on the machine (load average %s at start, %s at the end). %s. Versions: berth %s.",
		res.Addr, m.CPUs, m.LoadStart, m.LoadEnd, m.Go, cmp.Or(m.Versions["berth"], "?"))
	if res.Fsync != "" {
		fmt.Fprintf(w, " Every node ran with `-data` and `-fsync %s`.", res.Fsync)
	}
	fmt.Fprint(w, "\n\n")
	for _, t := range replTargets {
		fmt.Fprintf(w, "- **%s**: %s\n", strings.ToUpper(t), cmp.Or(res.Notes[t], "(not described)"))
	}
	fmt.Fprintf(w, "\n%d rounds; in each, every scenario runs against R1 and then R3, so the two alternate "+
		"throughout and share the machine's moods. Node CPU is the user+system seconds of the %d node processes "+
		"together during a run, per million acknowledged messages; it includes their idle floor, "+
		"%.3f CPU s/s measured before the first round. Medians over the rounds; R3/R1 is the ratio of the medians, "+
		"and beside it the median and range of the ratios within each round. ↑ higher is better, ↓ lower.\n\n",
		res.Rounds, len(res.PIDs), res.IdleNodeCPU)

	fmt.Fprintln(w, "| scenario | metric | R1 | R3 | R3/R1 | per round R3/R1: median (min–max) |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | --- |")
	titles := map[string]string{}
	for _, s := range scs {
		titles[s.id] = s.title
	}
	last := ""
	for _, row := range res.Summary {
		title := ""
		if row.Scenario != last {
			title, last = titles[row.Scenario], row.Scenario
		}
		ratio, rounds := "-", "-"
		if row.N1 > 0 && row.N3 > 0 && row.R1 != 0 {
			ratio = fmt.Sprintf("%.2f×", row.Ratio)
		}
		if len(row.RoundRatios) > 0 {
			rounds = fmt.Sprintf("%.2f× (%.2f–%.2f×, %d rounds)", median(row.RoundRatios),
				slices.Min(row.RoundRatios), slices.Max(row.RoundRatios), len(row.RoundRatios))
		}
		fmt.Fprintf(w, "| %s | %s %s %s | %s | %s | %s | %s |\n", title, row.Metric, row.Unit, arrow(row.Higher),
			medianCell(row.R1, row.N1, row.Unit), medianCell(row.R3, row.N3, row.Unit), ratio, rounds)
	}

	var notes []string
	for _, s := range scs {
		fmt.Fprintf(w, "\n## Every run: %s\n\n", s.title)
		cols := []string{"round", "tenant"}
		for _, mt := range s.metrics {
			cols = append(cols, mt.name+" "+mt.unit)
		}
		cols = append(cols, "node CPU s (each node)", "acked")
		fmt.Fprintln(w, "| "+strings.Join(cols, " | ")+" |")
		fmt.Fprintln(w, "|"+strings.Repeat(" ---: |", len(cols)))
		for _, rr := range res.Runs {
			r := rr.Run
			if r.Scenario != s.id {
				continue
			}
			row := []string{fmt.Sprint(rr.Round), strings.ToUpper(rr.Target)}
			for _, mt := range s.metrics {
				row = append(row, cell(r, mt, map[string]float64{}, rr.Target))
			}
			each := make([]string, len(rr.NodeCPU))
			for i, c := range rr.NodeCPU {
				each[i] = fmt.Sprintf("%.2f", c)
			}
			acked := "-"
			if r.Report != nil {
				acked = thousands(int(r.Report.Acked))
			}
			row = append(row, fmt.Sprintf("%.2f (%s)", r.cpu(), strings.Join(each, " + ")), acked)
			fmt.Fprintln(w, "| "+strings.Join(row, " | ")+" |")
			for _, n := range runNotes(s, r) {
				notes = append(notes, fmt.Sprintf("round %d, %s", rr.Round, n))
			}
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w, "\n## Notes (runs marked ✗ or without a value count for nothing in the medians)")
		for _, n := range notes {
			fmt.Fprintln(w, "- "+n)
		}
	}
}

func medianCell(v float64, n int, unit string) string {
	if n == 0 {
		return "-"
	}
	return formatValue(v, unit)
}

// writeJSON writes v indented, with a final newline.
func writeJSON(path string, v any) error {
	js, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(js, '\n'), 0o644)
}
