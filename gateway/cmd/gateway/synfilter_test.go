package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth.dev/testenv"
)

// capBPF is CAP_BPF's bit in /proc/<pid>/status (linux/capability.h).
const capBPF = 39

// TestSYNFilterPrivileges runs the gateway binary with the privileges a
// deployment may give it and checks whether the kernel SYN filter loads,
// and that the gateway serves either way:
//   - uid 65534 with no capability (the chart's default pod): off, said
//     once at INFO, no WARN, the userspace limits serve;
//   - uid 0 with CAP_BPF alone in every set and no_new_privs (the chart's
//     pod with gateway.synFilter.enabled: drop ALL, add BPF,
//     allowPrivilegeEscalation false): on;
//   - uid 0 with no capability (drop ALL without add): off.
func TestSYNFilterPrivileges(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test switches users and capabilities: run the gateway's tests as root")
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // the unprivileged user runs the binary from it
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "gateway")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// setpriv (util-linux) runs as root and execs the gateway in the same
	// process with what is left: for uid 0 the permitted and effective
	// sets become the bounding set, as runc gives a container's process.
	onlyCaps := func(bounding string) []string {
		return []string{"setpriv", "--bounding-set=-all" + bounding, "--inh-caps=-all", "--no-new-privs", "--"}
	}
	for _, tc := range []struct {
		name   string
		wrap   []string
		uid    uint32
		on     bool
		capEff uint64
	}{
		{"uid 65534, no capability", nil, 65534, false, 0},
		{"uid 0, CAP_BPF only", onlyCaps(",+bpf"), 0, true, 1 << capBPF},
		{"uid 0, no capability", onlyCaps(""), 0, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line, capEff := runForSYNFilter(t, bin, tc.wrap, tc.uid)
			if capEff != tc.capEff {
				t.Fatalf("the gateway ran with CapEff %#x, want %#x", capEff, tc.capEff)
			}
			want := "syn filter off"
			if tc.on {
				want = "syn filter on"
			}
			if !strings.Contains(line, "level=INFO") || !strings.Contains(line, want) {
				t.Fatalf("syn filter line %q, want an INFO %q line", line, want)
			}
			t.Logf("%s", line)
		})
	}
}

// runForSYNFilter starts the gateway binary bin (through the command
// wrap, if any, as uid) until it serves, and returns its one "syn
// filter" log line and its effective capabilities.
func runForSYNFilter(t *testing.T, bin string, wrap []string, uid uint32) (string, uint64) {
	t.Helper()
	rs := testenv.Redis(t)
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"keys":[]}`))
	}))
	defer jwks.Close()
	tcp := freeAddr(t)
	args := append(wrap, bin,
		"-listen", tcp, "-listen-ws", "", "-listen-tls", "", "-listen-wss", "", "-metrics-listen", freeAddr(t),
		"-database-url", testenv.DatabaseURL(t), "-redis-url", rs.URL, "-redis-prefix", rs.Prefix,
		"-jwks-url", jwks.URL, "-gateway-id", "gw-caps", "-drain-grace", "100ms", "-log-format", "text")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = []string{"BERTH_PROXY_SECRET=0123456789abcdef0123456789abcdef", "PATH=/usr/bin:/bin:/usr/sbin:/sbin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	var logs testenv.LogBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(logs.String(), "gateway started") {
		select {
		case err := <-exited:
			t.Fatalf("the gateway exited: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway did not start within 20 s:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond) // polling its log with a deadline
	}
	c, err := net.DialTimeout("tcp", tcp, 5*time.Second)
	if err != nil {
		t.Fatalf("the gateway does not accept: %v", err)
	}
	c.Close()
	capEff := effectiveCaps(t, cmd.Process.Pid) // setpriv exec'd the gateway: same pid

	out := logs.String()
	var lines []string
	for _, ln := range strings.Split(out, "\n") {
		if strings.Contains(ln, "level=WARN") || strings.Contains(ln, "level=ERROR") {
			t.Errorf("startup logged %q", ln)
		}
		if strings.Contains(ln, "syn filter") {
			lines = append(lines, ln)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("syn filter lines %q, want one\n%s", lines, out)
	}
	return lines[0], capEff
}

// effectiveCaps reads the CapEff line of /proc/<pid>/status.
func effectiveCaps(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, ln := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(ln, "CapEff:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("%q: %v", ln, err)
			}
			return n
		}
	}
	t.Fatal("no CapEff in /proc/<pid>/status")
	return 0
}
