package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, tt := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{7}, 7},
		{[]float64{9, 1, 5}, 5},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		in := slices.Clone(tt.in)
		if got := median(in); got != tt.want || !slices.Equal(in, tt.in) {
			t.Errorf("median(%v) = %v (input now %v); want %v, input untouched", tt.in, got, in, tt.want)
		}
	}
}

// TestSummarizeSkipsFailedRuns: the medians and per-round ratios count
// only runs that passed; a round missing one side has no round ratio.
func TestSummarizeSkipsFailedRuns(t *testing.T) {
	cfg := replConfig{pubs: 1, inflight: 1, rate: 1, dur: 1}
	scs := replScenarios(cfg)[:1] // ingest
	mk := func(round int, target string, rate float64, cpu float64, acked uint64, exit int) *replRun {
		return &replRun{Round: round, Target: target, Run: &run{Scenario: scs[0].id, Exit: exit, After: usage{CPUSeconds: cpu},
			Report: &loadReport{AcceptedPerSec: rate, Acked: acked}}}
	}
	res := &replResults{Rounds: 3, Runs: []*replRun{
		mk(1, "r1", 100, 2, 1_000_000, 0), mk(1, "r3", 80, 3, 1_000_000, 0),
		mk(2, "r1", 200, 2, 1_000_000, 0), mk(2, "r3", 90, 4, 2_000_000, 0),
		mk(3, "r1", 120, 2, 1_000_000, 0), mk(3, "r3", 10, 9, 1_000_000, 1), // failed its checks
	}}
	rows := summarize(res, scs)
	acc, cpu := rows[0], rows[1]
	if acc.Metric != "accepted" || acc.R1 != 120 || acc.N1 != 3 || acc.R3 != 85 || acc.N3 != 2 {
		t.Fatalf("accepted row %+v", acc)
	}
	if want := []float64{0.8, 0.45}; !slices.Equal(acc.RoundRatios, want) || acc.Ratio != 85.0/120 {
		t.Errorf("accepted ratios %v (of medians %v); want %v, %v", acc.RoundRatios, acc.Ratio, want, 85.0/120)
	}
	// CPU per million acknowledged: r1 2 s every round; r3 3 and 2 s.
	if cpu.R1 != 2 || cpu.R3 != 2.5 || cpu.Ratio != 1.25 {
		t.Errorf("node CPU row %+v", cpu)
	}
}

func TestParseRepl(t *testing.T) {
	for _, args := range [][]string{
		{"-addr", "x", "-pids", "1"},                              // no -bin
		{"-bin", "b", "-pids", "1"},                               // no -addr
		{"-bin", "b", "-addr", "x"},                               // no -pids
		{"-bin", "b", "-addr", "x", "-pids", "1,two"},             // bad pid
		{"-bin", "b", "-addr", "x", "-pids", "1", "-rounds", "0"}, // no rounds
		{"-bin", "b", "-addr", "x", "-pids", "1", "-duration", "10m"},
	} {
		if _, err := parseRepl(args); err == nil {
			t.Errorf("parseRepl(%q) accepted", args)
		}
	}
	c, err := parseRepl([]string{"-bin", "b", "-addr", "x", "-pids", "3, 4,5", "-quick", "-r3-note", "pro"})
	if err != nil || !slices.Equal(c.pids, []int{3, 4, 5}) || c.rounds != 2 || c.notes["r3"] != "pro" {
		t.Fatalf("parseRepl = %+v, %v", c, err)
	}
}

// TestReplSmoke runs `runner repl` for two tiny rounds against a broker
// (mosquitto, nothing to build) standing in for both tenants behind a
// gateway, its one process for the nodes, and checks what it wrote:
// the runs alternate R1, R3 in every round, each has a load report and
// the broker's CPU, and the summary has both medians and the ratios.
func TestReplSmoke(t *testing.T) {
	bin, out := t.TempDir(), t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "loadtest"), "berth.dev/broker/cmd/loadtest")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build loadtest: %v\n%s", err, b)
	}
	p, err := startBroker(kinds["mosquitto"], bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.stop() })
	err = runMain([]string{"repl", "-bin", bin, "-out", out, "-addr", p.addr, "-pids", fmt.Sprint(p.cmd.Process.Pid),
		"-rounds", "2", "-duration", "200ms", "-pubs", "2", "-inflight", "10", "-rate", "200",
		"-r1-note", "one voter", "-r3-note", "three voters", "-fsync", "interval"})
	if err != nil {
		t.Fatal(err)
	}
	mds, _ := filepath.Glob(filepath.Join(out, "*-repl.md"))
	jss, _ := filepath.Glob(filepath.Join(out, "*-repl.json"))
	if len(mds) != 1 || len(jss) != 1 {
		t.Fatalf("results: %v %v", mds, jss)
	}
	js, err := os.ReadFile(jss[0])
	if err != nil {
		t.Fatal(err)
	}
	var res replResults
	if err := json.Unmarshal(js, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 8 {
		t.Fatalf("%d runs, want 2 rounds × 2 scenarios × 2 tenants", len(res.Runs))
	}
	var ingestCPU float64
	for i, rr := range res.Runs {
		wantRound, wantTarget := i/4+1, replTargets[i%2]
		r := rr.Run
		if rr.Round != wantRound || rr.Target != wantTarget || r.Report == nil || r.Exit != 0 || r.Crashed || len(rr.NodeCPU) != 1 {
			t.Fatalf("run %d: round %d %s exit %d crashed %v error %q report %v, node CPU %v; want round %d %s, a passing report",
				i, rr.Round, rr.Target, r.Exit, r.Crashed, r.Error, r.Report != nil, rr.NodeCPU, wantRound, wantTarget)
		}
		if r.Scenario == "ingest-q1-64" {
			if r.Report.Acked == 0 {
				t.Errorf("run %d: nothing acknowledged", i)
			}
			ingestCPU += r.cpu()
		}
	}
	if ingestCPU <= 0 {
		t.Errorf("the broker used no CPU in 4 ingest runs")
	}
	if len(res.Summary) != 8 {
		t.Fatalf("%d summary rows, want 8", len(res.Summary))
	}
	for _, row := range res.Summary {
		if row.N1 != 2 || row.N3 != 2 {
			t.Errorf("summary row %+v: want both medians over 2 rounds", row)
		}
		// A 200 ms run may take less than one clock tick of CPU (10 ms):
		// only the CPU row may then have no ratio.
		if row.Unit != "s" && (row.R1 <= 0 || row.R3 <= 0 || row.Ratio <= 0 || len(row.RoundRatios) != 2) {
			t.Errorf("summary row %+v: want both medians and 2 round ratios", row)
		}
	}
	md, err := os.ReadFile(mds[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| scenario | metric | R1 | R3 | R3/R1 |", "| QoS 1 ingest, 64 B, 2 publishers × 10 in flight | accepted msg/s ↑ |",
		"node CPU per million s ↓", "e2e p50 µs ↓", "**R1**: one voter", "**R3**: three voters", "`-fsync interval`"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}
