package main

import (
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	tests := []struct {
		name string
		stat string
		want float64
	}{
		{"plain", "4272 (mosquitto) S 1 4272 4272 0 -1 4194560 300 0 0 0 250 130 0 0 20 0 1 0 100 10000000 2000", 3.8},
		{"spaces and parens in the name", "77 (my (odd) proc) R 1 77 77 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 5 1 1", 0.1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStatCPU(tt.stat)
			if err != nil || got != tt.want {
				t.Fatalf("parseStatCPU = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 x 2"} {
		if _, err := parseStatCPU(bad); err == nil {
			t.Errorf("parseStatCPU(%q) accepted", bad)
		}
	}
}

func TestStatusKiB(t *testing.T) {
	status := "Name:\tmochi\nVmHWM:\t   43120 kB\nVmRSS:\t   40000 kB\n"
	if got := statusKiB(status, "VmHWM:"); got != 43120 {
		t.Errorf("VmHWM = %d", got)
	}
	if got := statusKiB(status, "VmRSS:"); got != 40000 {
		t.Errorf("VmRSS = %d", got)
	}
	if got := statusKiB(status, "VmSwap:"); got != 0 {
		t.Errorf("missing key = %d", got)
	}
}

// TestPeerBrokers starts each peer the way make bench does, checks it
// accepts an MQTT session, reads its usage from /proc and stops it.
func TestPeerBrokers(t *testing.T) {
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "mochi"), "../mochi")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build mochi: %v\n%s", err, out)
	}
	for _, name := range []string{"mosquitto", "mochi"} {
		t.Run(name, func(t *testing.T) {
			p, err := startBroker(kinds[name], bin, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.stop() })
			// CONNECT (3.1.1, clean session, client id "b") then CONNACK accepted.
			c, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			connect := []byte{0x10, 13, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 60, 0, 1, 'b'}
			if _, err := c.Write(connect); err != nil {
				t.Fatal(err)
			}
			ack := make([]byte, 4)
			if _, err := io.ReadFull(c, ack); err != nil || string(ack) != "\x20\x02\x00\x00" {
				t.Fatalf("CONNACK %x, %v", ack, err)
			}
			u, err := readUsage(p.cmd.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			if u.RSSKiB <= 0 || u.PeakRSSKiB < u.RSSKiB || u.CPUSeconds < 0 {
				t.Fatalf("usage %+v", u)
			}
			if !p.stop() {
				t.Fatal("broker had exited before stop")
			}
			if processAlive(p) {
				t.Fatal("broker still running after stop")
			}
		})
	}
}

func processAlive(p *process) bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func TestWriteTable(t *testing.T) {
	scs := scenarios(quickScale())
	res := &results{
		Started: "2026-11-30T00:00:00Z", Brokers: []string{"berth", "mosquitto"},
		Machine: machine{CPUs: 2, LoadStart: "1 1 1", LoadEnd: "2 2 2", Go: "go1.26", Versions: map[string]string{"mosquitto": "2.0.11"}},
	}
	ing := scs[0].id
	res.Runs = []*run{
		{Broker: "berth", Scenario: ing, After: usage{CPUSeconds: 3, PeakRSSKiB: 20480}, Before: usage{CPUSeconds: 1},
			Report: &loadReport{AcceptedPerSec: 200000, Expected: 100, Lost: 0}},
		{Broker: "mosquitto", Scenario: ing, After: usage{CPUSeconds: 2, PeakRSSKiB: 8192}, Exit: 1,
			Report: &loadReport{AcceptedPerSec: 50000, Expected: 100, Lost: 10, Failures: []string{"3 messages never acknowledged"}}},
		{Broker: "berth", Scenario: scs[1].id, Error: "berth exited before listening"},
	}
	var b strings.Builder
	writeTable(&b, res, scs)
	out := b.String()
	for _, want := range []string{
		"| scenario | metric | berth | mosquitto | berth/mosquitto |",
		"| accepted msg/s ↑ | 200,000 | 50,000 ✗ | 4.00× | 2.00 / 2.00 | 20 / 8 |",
		"| loss % ↓ | 0.00 | 10.00 ✗ | 0.00× |",
		"| accepted msg/s ↑ | error | - | - |",
		"ingest-q0-64, mosquitto: 3 messages never acknowledged",
		"ingest-q1-64, berth: berth exited before listening",
		"Through the gateway (full stack): not measured",
		"mosquitto 2.0.11",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestScenarios(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range scenarios(fullScale()) {
		if seen[s.id] {
			t.Errorf("duplicate scenario id %s", s.id)
		}
		seen[s.id] = true
		if len(s.metrics) == 0 || len(s.args) == 0 || s.title == "" {
			t.Errorf("scenario %s incomplete", s.id)
		}
	}
	for _, id := range []string{"ingest-q0-64", "ingest-q1-64", "sweep-64", "sweep-65536", "fanout-100", "fanout-100-max", "latency-1k", "conn-10000"} {
		if !seen[id] {
			t.Errorf("scenario %s missing", id)
		}
	}
}

func TestParseFlags(t *testing.T) {
	if _, err := parse([]string{"-bin", "x", "-brokers", "berth,emqx"}); err == nil {
		t.Error("unknown broker accepted")
	}
	if _, err := parse(nil); err == nil {
		t.Error("missing -bin accepted")
	}
	if _, err := parse([]string{"-bin", "x", "-berth-fsync", "sometimes"}); err == nil {
		t.Error("unknown -berth-fsync policy accepted")
	}
	c, err := parse([]string{"-bin", "x", "-brokers", "mosquitto, mochi", "-only", "sweep"})
	if err != nil || len(c.brokers) != 2 || !c.only.MatchString("sweep-64") || c.only.MatchString("conn-10000") {
		t.Errorf("parse = %+v, %v", c, err)
	}
}

// TestBerthFsync: with -berth-fsync the standalone broker really runs on a
// message log in its private directory (as a node does), not in memory;
// the peers' command lines are left alone.
func TestBerthFsync(t *testing.T) {
	bin, dir := t.TempDir(), t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "broker"), "berth.dev/broker/cmd/broker")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build broker: %v\n%s", err, b)
	}
	if got, _ := withFsync(kinds["mosquitto"], "always").args(bin, "127.0.0.1:1", dir); slices.Contains(got, "-data") {
		t.Errorf("mosquitto given %v", got)
	}
	p, err := startBroker(withFsync(kinds["berth"], "always"), bin, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.stop() })
	if i := slices.Index(p.cmd.Args, "-fsync"); i < 0 || p.cmd.Args[i+1] != "always" {
		t.Errorf("broker args %v lack -fsync always", p.cmd.Args)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "data"))
	if err != nil || len(entries) == 0 {
		t.Fatalf("the broker's data directory: %v, %v; want its message log there", entries, err)
	}
}

// TestRunnerEndToEnd builds loadtest and the mochi peer, runs two quick
// scenarios against mosquitto and mochi, and checks the table and JSON.
func TestRunnerEndToEnd(t *testing.T) {
	bin, out := t.TempDir(), t.TempDir()
	for pkg, name := range map[string]string{"berth.dev/broker/cmd/loadtest": "loadtest", "../mochi": "mochi"} {
		build := exec.Command("go", "build", "-o", filepath.Join(bin, name), pkg)
		if b, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, b)
		}
	}
	// The gateway hook, pointed at one more mosquitto standing in for a
	// running gateway: a target make bench did not start.
	gw, err := startBroker(kinds["mosquitto"], bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.stop() })
	err = runMain([]string{"-bin", bin, "-out", out, "-brokers", "mosquitto,mochi", "-quick", "-only", "^(latency-1k|conn-300)$",
		"-gateway", gw.addr, "-gateway-user", "device-1", "-gateway-pass", "s3cret-token"})
	if err != nil {
		t.Fatal(err)
	}
	mds, _ := filepath.Glob(filepath.Join(out, "*.md"))
	jss, _ := filepath.Glob(filepath.Join(out, "*.json"))
	if len(mds) != 1 || len(jss) != 1 {
		t.Fatalf("results: %v %v", mds, jss)
	}
	md, err := os.ReadFile(mds[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| mosquitto | mochi | gateway | mosquitto/mochi | mosquitto/gateway |", "e2e p99 µs ↓",
		"| held conns ↑ | 300 | 300 | 300 | 1.00× | 1.00× |", "| RSS/conn held KiB ↓ |", "| RSS/conn peak KiB ↓ |",
		" / - |", "Through the gateway: column `gateway` is " + gw.addr} {
		if !strings.Contains(string(md), want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
	js, err := os.ReadFile(jss[0])
	if err != nil {
		t.Fatal(err)
	}
	var res results
	if err := json.Unmarshal(js, &res); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(js)+string(md), "s3cret-token") {
		t.Error("results hold the gateway password")
	}
	if len(res.Runs) != 6 {
		t.Fatalf("%d runs, want 6", len(res.Runs))
	}
	for _, r := range res.Runs {
		external := r.Broker == "gateway"
		if r.Report == nil || r.Exit != 0 || r.Crashed || (r.After.PeakRSSKiB <= 0) != external {
			t.Errorf("run %s/%s: exit %d crashed %v error %q report %v", r.Scenario, r.Broker, r.Exit, r.Crashed, r.Error, r.Report != nil)
			continue
		}
		// The RSS while held is read from the brokers the runner started
		// (their pid goes to loadtest), not from the gateway.
		if r.Scenario == "conn-300" && (len(r.Report.Levels) != 1 || (r.Report.Levels[0].HeldRSSKiB <= 0) != external) {
			t.Errorf("run %s/%s: levels %+v, want the held RSS read from a broker the runner started", r.Scenario, r.Broker, r.Report.Levels)
		}
	}
}

func TestRedact(t *testing.T) {
	args := []string{"-addr", "x", "-user", "u", "-pass", "token", "-json"}
	got := strings.Join(redact(args), " ")
	if got != "-addr x -user u -pass REDACTED -json" || args[5] != "token" {
		t.Fatalf("redact = %s (input %v)", got, args)
	}
}

// TestConnScenarios: -conns gives one held-connection scenario per count,
// and a count past one address's ephemeral ports dials from several
// 127.0.0.x addresses.
func TestConnScenarios(t *testing.T) {
	c, err := parse([]string{"-bin", "x", "-conns", "10000,100000"})
	if err != nil || !slices.Equal(c.conns, []int{10_000, 100_000}) {
		t.Fatalf("parse -conns = %v, %v", c.conns, err)
	}
	if _, err := parse([]string{"-bin", "x", "-conns", "10000,x"}); err == nil {
		t.Error("-conns with a bad count accepted")
	}
	sc := fullScale()
	sc.conns = c.conns
	args := map[string][]string{}
	for _, s := range scenarios(sc) {
		args[s.id] = s.args
	}
	if a := args["conn-10000"]; a == nil || slices.Contains(a, "-source-addrs") {
		t.Errorf("conn-10000 args %q: want one, from the default address", a)
	}
	a := args["conn-100000"]
	i := slices.Index(a, "-source-addrs")
	if i < 0 || i+1 >= len(a) || a[i+1] != "127.0.0.2,127.0.0.3,127.0.0.4,127.0.0.5" {
		t.Errorf("conn-100000 args %q: want four source addresses", a)
	}
}

// TestNATSPeer: the nats kind starts the distribution's nats-server with
// its MQTT listener on the scenario's address, and a real MQTT client
// (loadtest) publishes through it to a subscriber.
func TestNATSPeer(t *testing.T) {
	bin, dir := t.TempDir(), t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "loadtest"), "berth.dev/broker/cmd/loadtest")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build loadtest: %v\n%s", err, b)
	}
	p, err := startBroker(kinds["nats"], bin, dir)
	if err != nil {
		t.Fatal(err) // infra/dev/tools.sh installs nats-server
	}
	t.Cleanup(func() { p.stop() })
	out, err := exec.Command(filepath.Join(bin, "loadtest"), "-addr", p.addr, "-mode", "pub", "-pubs", "2",
		"-count", "500", "-qos", "0", "-json", "-quiet").Output()
	if err != nil {
		t.Fatalf("loadtest against nats: %v\n%s", err, out)
	}
	var rep loadReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Delivered == 0 {
		t.Fatalf("nothing delivered through nats: %s", out)
	}
}
