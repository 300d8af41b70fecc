package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth.dev/testenv"
)

func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "api")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestRefusesUnsealedKeys: outside the dev stack (-dev) the API does not
// start without a key-encryption key, and says why in one line.
func TestRefusesUnsealedKeys(t *testing.T) {
	bin := build(t)
	cmd := exec.Command(bin, "-listen", freeAddr(t), "-metrics-listen", "")
	cmd.Env = append(os.Environ(), "DATABASE_URL=postgres://unused@127.0.0.1:1/none", "BERTH_KEY_ENCRYPTION_KEY=", "BERTH_DEV=")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("started without -key-encryption-key or -dev:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "-key-encryption-key") || !strings.Contains(lines[0], "-dev") {
		t.Fatalf("refusal %q: want one line naming -key-encryption-key and -dev", out)
	}
}

// TestServeAndShutdown runs the real binary with sealed signing keys: it
// migrates, serves /readyz publicly and /metrics only on the internal
// listener, and exits 0 on SIGTERM.
func TestServeAndShutdown(t *testing.T) {
	bin := build(t)
	addr, metricsAddr := freeAddr(t), freeAddr(t)

	cmd := exec.Command(bin, "-listen", addr, "-metrics-listen", metricsAddr, "-log-format", "text")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+testenv.DatabaseURL(t),
		"BERTH_KEY_ENCRYPTION_KEY="+strings.Repeat("5a", 32))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		res, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("never ready: %v", err)
		case err := <-done:
			t.Fatalf("exited early: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	res, err := http.Get("http://" + addr + "/v1/.well-known/jwks.json")
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("jwks: %v %v", res, err)
	}
	res.Body.Close()
	res, err = http.Get("http://" + addr + "/metrics")
	if err != nil || res.StatusCode != http.StatusNotFound {
		t.Fatalf("public /metrics: %v %v, want 404", res, err)
	}
	res.Body.Close()
	res, err = http.Get("http://" + metricsAddr + "/metrics")
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("internal /metrics: %v %v", res, err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(body), "berth_api_requests_total") {
		t.Fatalf("internal /metrics lacks the API's metrics:\n%s", body)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("no exit after SIGTERM")
	}
}
