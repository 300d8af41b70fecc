package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Where the connect flood's cost lands, read from /proc around each phase
// of TestFaultConnectFlood: the machine's CPU split (softirq is the
// kernel's packet processing, the SYNs' included), NET_RX softirqs, and
// for each process of interest its CPU time and its run delay (time spent
// runnable but waiting for a CPU, from schedstat: a process starved by
// others shows it there, not in its CPU time), and the gateway's SYN
// filter's own run time (kernel.bpf_stats_enabled, from its program's
// fdinfo).

// sysSnap is one reading.
type sysSnap struct {
	at      time.Time
	cpu     [8]int64 // /proc/stat's first line: user nice system idle iowait irq softirq steal, ticks
	netRx   int64    // NET_RX softirqs, all CPUs
	procs   map[string]schedStat
	bpfNs   int64 // the gateway's socket filters' run time, ns
	bpfRuns int64 // and run count
	load1   string
}

// schedStat is a process's CPU time and run delay, summed over its
// threads (/proc/pid/task/*/schedstat).
type schedStat struct{ cpu, delay time.Duration }

// snapSys reads the machine and each of procs (name → pid); bpfPid is the
// process whose BPF programs' statistics to read (0: none).
func snapSys(procs map[string]int, bpfPid int) sysSnap {
	s := sysSnap{at: time.Now(), procs: map[string]schedStat{}}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		for i := 0; i < len(s.cpu) && i+1 < len(f); i++ {
			s.cpu[i], _ = strconv.ParseInt(f[i+1], 10, 64)
		}
	}
	if b, err := os.ReadFile("/proc/softirqs"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 0 && f[0] == "NET_RX:" {
				for _, v := range f[1:] {
					n, _ := strconv.ParseInt(v, 10, 64)
					s.netRx += n
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		s.load1, _, _ = strings.Cut(string(b), " ")
	}
	for name, pid := range procs {
		s.procs[name] = schedOf(pid)
	}
	if bpfPid > 0 {
		s.bpfNs, s.bpfRuns = bpfStats(bpfPid)
	}
	return s
}

// schedOf sums schedstat (run time ns, run delay ns, timeslices) over
// pid's threads; threads that have ended are not counted.
func schedOf(pid int) schedStat {
	var st schedStat
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		v := strings.Fields(string(b))
		if len(v) < 2 {
			continue
		}
		run, _ := strconv.ParseInt(v[0], 10, 64)
		delay, _ := strconv.ParseInt(v[1], 10, 64)
		st.cpu += time.Duration(run)
		st.delay += time.Duration(delay)
	}
	return st
}

// bpfStats sums run_time_ns and run_cnt over the socket filter programs
// pid holds (its fdinfo), which the kernel counts only while
// kernel.bpf_stats_enabled is 1.
func bpfStats(pid int) (ns, runs int64) {
	infos, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fdinfo/*", pid))
	for _, f := range infos {
		b, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(b), "prog_type:\t1\n") { // BPF_PROG_TYPE_SOCKET_FILTER
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			switch {
			case !ok:
			case k == "run_time_ns":
				ns += n
			case k == "run_cnt":
				runs += n
			}
		}
	}
	return ns, runs
}

// enableBPFStats turns kernel.bpf_stats_enabled on for the test and back
// to what it was after; false when it cannot.
func enableBPFStats(t *testing.T) bool {
	t.Helper()
	const path = "/proc/sys/kernel/bpf_stats_enabled"
	old, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	if err := os.WriteFile(path, []byte("1"), 0o644); err != nil {
		return false
	}
	t.Cleanup(func() { _ = os.WriteFile(path, old, 0o644) })
	return true
}

// sysDelta is what happened between two snapshots, as a line of the
// report.
func sysDelta(a, b sysSnap) string {
	var total int64
	for i := range a.cpu {
		total += b.cpu[i] - a.cpu[i]
	}
	total = max(total, 1)
	pct := func(i ...int) float64 {
		var n int64
		for _, k := range i {
			n += b.cpu[k] - a.cpu[k]
		}
		return 100 * float64(n) / float64(total)
	}
	secs := b.at.Sub(a.at).Seconds()
	var sb strings.Builder
	fmt.Fprintf(&sb, "load %s; machine busy %.0f%% (user %.0f%%, system %.0f%%, softirq %.1f%%, steal %.1f%%), NET_RX %.0f/s",
		a.load1, 100-pct(3, 4), pct(0, 1), pct(2), pct(6), pct(7), float64(b.netRx-a.netRx)/secs)
	for _, name := range []string{"gateway", "node", "probe", "flooder"} {
		x, okA := a.procs[name]
		y, okB := b.procs[name]
		if !okA || !okB {
			continue
		}
		fmt.Fprintf(&sb, "; %s CPU %.0f ms/s, run delay %.1f ms/s", name,
			float64((y.cpu-x.cpu).Microseconds())/1000/secs, float64((y.delay-x.delay).Microseconds())/1000/secs)
	}
	if runs := b.bpfRuns - a.bpfRuns; runs > 0 {
		fmt.Fprintf(&sb, "; SYN filter %d runs, %.0f ns each, %.1f ms in all", runs, float64(b.bpfNs-a.bpfNs)/float64(runs), float64(b.bpfNs-a.bpfNs)/1e6)
	}
	return sb.String()
}

// listenDrops is TcpExt ListenDrops of this network namespace
// (/proc/net/netstat): SYNs and handshakes a listener dropped itself, its
// accept queue full (a gateway starved of CPU accepts late), 0 when
// unknown.
func listenDrops() int64 {
	b, err := os.ReadFile("/proc/net/netstat")
	if err != nil {
		return 0
	}
	lines := strings.Split(string(b), "\n")
	for i := 0; i+1 < len(lines); i++ {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || names[0] != "TcpExt:" || len(values) != len(names) {
			continue
		}
		for k, name := range names {
			if name == "ListenDrops" {
				n, _ := strconv.ParseInt(values[k], 10, 64)
				return n
			}
		}
	}
	return 0
}

// slowWhen says when, from the flood's start, the flood phase's slow
// samples were sent: those over alone99 (the probe's p99 without the
// flood) counted by offset, and the offsets of the slowest 1% (the ones
// that make its p99).
func slowWhen(under latencyResult, start time.Time, alone99 time.Duration) string {
	edges := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond, time.Second, time.Hour}
	counts := make([]int, len(edges))
	type sample struct {
		off, lat time.Duration
	}
	var slow []sample
	for i, lat := range under.unsort {
		off := under.sent[i].Sub(start)
		slow = append(slow, sample{off, lat})
		if lat <= alone99 {
			continue
		}
		for k, e := range edges {
			if off < e {
				counts[k]++
				break
			}
		}
	}
	sort.Slice(slow, func(i, j int) bool { return slow[i].lat > slow[j].lat })
	slow = slow[:min(len(slow), (len(slow)+99)/100)]
	var sb strings.Builder
	fmt.Fprintf(&sb, "samples over the alone p99 %v by when sent after the flood began: <50ms %d, 50-100ms %d, 100-200ms %d, 200-500ms %d, 0.5-1s %d, later %d; the slowest 1%%:",
		alone99, counts[0], counts[1], counts[2], counts[3], counts[4], counts[5])
	for _, s := range slow {
		fmt.Fprintf(&sb, " %v@%v", s.lat.Round(10*time.Microsecond), s.off.Round(time.Millisecond))
	}
	return sb.String()
}
