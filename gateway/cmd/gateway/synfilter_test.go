package main

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"berth.dev/testenv"
)

// lockedBuffer is a process's stderr, read while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSYNFilterWithoutCapability runs the gateway binary as an
// unprivileged user (uid 65534, no capabilities), where the kernel SYN
// filter cannot load: the gateway says so once, at INFO, logs no WARN,
// and serves with its userspace limits.
func TestSYNFilterWithoutCapability(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test switches to uid 65534: run the gateway's tests as root")
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
	rs := testenv.Redis(t)
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"keys":[]}`))
	}))
	defer jwks.Close()
	tcp := freeAddr(t)
	cmd := exec.Command(bin,
		"-listen", tcp, "-listen-ws", "", "-listen-tls", "", "-listen-wss", "", "-metrics-listen", freeAddr(t),
		"-database-url", testenv.DatabaseURL(t), "-redis-url", rs.URL, "-redis-prefix", rs.Prefix,
		"-jwks-url", jwks.URL, "-gateway-id", "gw-nocap", "-drain-grace", "100ms", "-log-format", "text")
	cmd.Env = []string{"BERTH_PROXY_SECRET=0123456789abcdef0123456789abcdef", "PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var logs lockedBuffer
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

	out := logs.String()
	var off []string
	for _, ln := range strings.Split(out, "\n") {
		if strings.Contains(ln, "level=WARN") || strings.Contains(ln, "level=ERROR") {
			t.Errorf("startup logged %q", ln)
		}
		if strings.Contains(ln, "syn filter") {
			off = append(off, ln)
		}
	}
	if len(off) != 1 || !strings.Contains(off[0], "level=INFO") || !strings.Contains(off[0], "syn filter off") {
		t.Fatalf("syn filter lines %q, want one INFO \"syn filter off\" line\n%s", off, out)
	}
	t.Logf("%s", off[0])
}
