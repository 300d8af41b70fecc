package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The connect flood runs apart from what it measures: as a process of its
// own (cmd/connflood, built without -race like the stack's programs),
// inside a network namespace of the test's own, joined to this one by a
// veth pair, and inside a CPU cgroup with a budget of floodCPU cores. The gateway
// listens on the veth's address here; the established clients reach it
// there from this namespace, the flood from the other one, from
// floodSources addresses of its own.
const floodCPU = 1.0 // the flooder's CPU budget, in cores

// floodSourceSets is how many sets of floodSources addresses fit the
// veth's /24 (from .10 on).
const floodSourceSets = 240 / floodSources

// floodNet is the flood's network namespace and the addresses on both
// ends of its veth.
type floodNet struct {
	ns     string
	hostIP string // this namespace's end: the gateway listens here
	// The namespace's end: sets of floodSources addresses, a flood
	// connects from one set (a fresh one for each flood of a long run, so
	// that each meets the gateway's limits as a new flood would).
	sources [][]string
}

// run is a command that must succeed.
func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// newFloodNet creates a network namespace and a veth pair on a /24 of
// 10.253.0.0/16 that no interface here uses yet, with sets (at most
// floodSourceSets) of floodSources addresses on the namespace's end; it
// deletes the namespace (and with it the pair) when the test ends.
func newFloodNet(t *testing.T, sets int) *floodNet {
	t.Helper()
	needRoot(t, "the connect flood's network namespace")
	var b [3]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	n := &floodNet{ns: "berth-flood-" + id}
	subnet := -1
	for i := range 256 {
		c := (int(b[0]) + i) % 256
		if !addrInUse(t, fmt.Sprintf("10.253.%d.1", c)) {
			subnet = c
			break
		}
	}
	if subnet < 0 {
		t.Fatal("no free /24 in 10.253.0.0/16 for the flood's veth")
	}
	host, peer := "bfh"+id, "bfn"+id
	n.hostIP = fmt.Sprintf("10.253.%d.1", subnet)
	run(t, "ip", "netns", "add", n.ns)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "delete", n.ns).CombinedOutput(); err != nil {
			t.Errorf("ip netns delete %s: %v: %s", n.ns, err, out)
		}
		_ = exec.Command("ip", "link", "delete", host).Run() // gone with the namespace, normally
	})
	run(t, "ip", "link", "add", host, "type", "veth", "peer", "name", peer, "netns", n.ns)
	run(t, "ip", "addr", "add", n.hostIP+"/24", "dev", host)
	run(t, "ip", "link", "set", host, "up")
	in := func(args ...string) { run(t, "ip", append([]string{"-n", n.ns}, args...)...) }
	for set := range min(max(sets, 1), floodSourceSets) {
		var ips []string
		for i := range floodSources {
			ip := fmt.Sprintf("10.253.%d.%d", subnet, 10+set*floodSources+i)
			in("addr", "add", ip+"/24", "dev", peer)
			ips = append(ips, ip)
		}
		n.sources = append(n.sources, ips)
	}
	in("link", "set", "lo", "up")
	in("link", "set", peer, "up")
	return n
}

// addrInUse reports whether ip is already some interface's here.
func addrInUse(t *testing.T, ip string) bool {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if p, ok := a.(*net.IPNet); ok && p.IP.String() == ip {
			return true
		}
	}
	return false
}

// cpuCgroup is a cgroup with a CPU budget: cgroup v2's cpu.max when the
// unified hierarchy has the cpu controller, else v1's CFS quota.
type cpuCgroup struct {
	dir   string
	procs string // the file a process is moved in by writing its pid
}

// newCPUCgroup creates a cgroup limited to cores CPUs and removes it when
// the test ends (its processes must have ended by then).
func newCPUCgroup(t *testing.T, cores float64) *cpuCgroup {
	t.Helper()
	var b [3]byte
	_, _ = rand.Read(b[:])
	name := "berth-flood-" + hex.EncodeToString(b[:])
	const period = 100_000 // µs
	quota := strconv.Itoa(int(cores * period))
	var cg cpuCgroup
	var limits map[string]string
	if ctl, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(" "+string(ctl)+" ", " cpu ") {
		cg.dir = filepath.Join("/sys/fs/cgroup", name)
		limits = map[string]string{"cpu.max": quota + " " + strconv.Itoa(period)}
	} else if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); err == nil {
		cg.dir = filepath.Join("/sys/fs/cgroup/cpu", name)
		limits = map[string]string{"cpu.cfs_period_us": strconv.Itoa(period), "cpu.cfs_quota_us": quota}
	} else {
		t.Fatal("no cgroup CPU controller: neither cgroup v2 with cpu in /sys/fs/cgroup/cgroup.controllers nor v1 /sys/fs/cgroup/cpu")
	}
	cg.procs = filepath.Join(cg.dir, "cgroup.procs")
	if err := os.Mkdir(cg.dir, 0o755); err != nil {
		t.Fatalf("create cgroup: %v", err)
	}
	t.Cleanup(func() {
		if err := os.Remove(cg.dir); err != nil {
			t.Errorf("remove cgroup %s: %v", cg.dir, err)
		}
	})
	for _, f := range []string{"cpu.cfs_period_us", "cpu.cfs_quota_us", "cpu.max"} { // period before quota
		if v, ok := limits[f]; ok {
			if err := os.WriteFile(filepath.Join(cg.dir, f), []byte(v), 0o644); err != nil {
				t.Fatalf("cgroup %s = %s: %v", f, v, err)
			}
		}
	}
	return &cg
}

// startFlood starts the flooder bin in cg (the shell moves itself in
// before exec, so nothing of the flooder runs outside it) and in n's
// namespace, flooding addr from sources (one of n's sets). wait returns its counts once it has ended.
func startFlood(t *testing.T, bin string, n *floodNet, cg *cpuCgroup, addr string, sources []string, floodFor time.Duration) (wait func() floodCounts) {
	t.Helper()
	cmd := exec.Command("sh", "-c", `echo $$ > "$0" && exec ip netns exec "$1" "$2" -addr "$3" -sources "$4" -rate "$5" -for "$6" -workers "$7" -dial-timeout "$8"`,
		cg.procs, n.ns, bin, addr, strings.Join(sources, ","), strconv.Itoa(floodRate), floodFor.String(), strconv.Itoa(floodWorkers), floodDialTimeout.String())
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the flooder: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { // the flood ends by itself in floodFor; this only bounds a hang
		select {
		case <-done:
		case <-time.After(floodFor + 10*time.Second):
			_ = cmd.Process.Kill()
		}
	})
	return func() floodCounts {
		t.Helper()
		var err error
		select {
		case err = <-done:
		case <-time.After(floodFor + 10*time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("the flooder did not end within %v", floodFor+10*time.Second)
		}
		var c floodCounts
		if err == nil {
			_, err = fmt.Sscan(out.String(), &c.attempts, &c.refused, &c.connacked, &c.dialErr, &c.dropped, &c.took, &c.cpu)
		}
		if err != nil {
			t.Fatalf("the flooder: %v\nstdout: %s\nstderr: %s", err, out.String(), errOut.String())
		}
		return c
	}
}

// floodCounts is what the flooder reports.
type floodCounts struct {
	attempts, refused, connacked, dialErr int64
	dropped                               int64         // the SYN went unanswered within floodDialTimeout
	took, cpu                             time.Duration // wall time, and its CPU time (user + system)
}
