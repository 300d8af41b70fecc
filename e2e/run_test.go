package e2e

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth.dev/e2e/internal/stack"
)

// runScript is infra/dev/run.sh, what `make run` runs.
func runScript(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOWORK").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(filepath.Dir(strings.TrimSpace(string(out))), "infra", "dev", "run.sh")
}

// runEnv gives `make run` a run folder and ports of its own, so it neither
// meets nor stops the shared dev Postgres and Redis. The folder is
// reachable by the postgres user (as root, run.sh initdb's as postgres).
func runEnv(t *testing.T) (dir string, env map[string]string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "berth-run-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	port := func() string { _, p, _ := net.SplitHostPort(stack.FreeAddr(t)); return p }
	env = map[string]string{"BERTH_RUN_DIR": dir, "BERTH_PG_PORT": port(), "BERTH_REDIS_PORT": port(), "BERTH_STRIPE_MOCK_PORT": port(), "BERTH_SKIP_WEB": "1"}
	for _, v := range []string{"BERTH_API_LISTEN", "BERTH_API_METRICS", "BERTH_MQTT_LISTEN", "BERTH_WS_LISTEN",
		"BERTH_GATEWAY_METRICS", "BERTH_NODE_MQTT", "BERTH_NODE_ADMIN"} {
		env[v] = stack.FreeAddr(t)
	}
	return dir, env
}

func environ(env map[string]string) []string {
	out := os.Environ()
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// With a port taken, `make run` starts nothing and says which port, whose
// it is and the variable that moves it, then exits 1, at once.
func TestMakeRunNamesATakenPort(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"BERTH_API_LISTEN", "BERTH_MQTT_LISTEN", "BERTH_NODE_ADMIN", "BERTH_PG_PORT"} {
		t.Run(v, func(t *testing.T) {
			dir, env := runEnv(t)
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			_, port, _ := net.SplitHostPort(l.Addr().String())
			env[v] = l.Addr().String()
			if strings.HasSuffix(v, "_PORT") {
				env[v] = port
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, runScript(t))
			cmd.Env = environ(env)
			start := time.Now()
			out, err := cmd.CombinedOutput()
			t.Logf("run.sh answered in %v", time.Since(start))
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("run.sh with %s taken: %v (want exit 1)\n%s", v, err, out)
			}
			for _, want := range []string{"port " + port + " ", "is taken", v} {
				if !bytes.Contains(out, []byte(want)) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "pg", "data", "PG_VERSION")); err == nil {
				t.Errorf("run.sh started Postgres before checking the ports")
			}
		})
	}
}

// A normal `make run` logs no WARN, starting or stopping; on SIGTERM (what Ctrl-C becomes) a
// connected MQTT 5 device gets DISCONNECT 0x8B, run.sh exits 0 and the
// Postgres and Redis it started are stopped.
func TestMakeRunStartsQuietlyAndStopsCleanly(t *testing.T) {
	t.Parallel()
	dir, env := runEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, runScript(t))
	cmd.Env = environ(env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A file, not a pipe: Postgres and Redis, daemons run.sh starts,
	// inherit it, and Wait would wait for them to close a pipe.
	out := &outputFile{name: filepath.Join(t.TempDir(), "run.out")}
	f, err := os.Create(out.name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var exitErr error
	go func() { exitErr = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default: // the test failed midway: stop the whole group
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			for _, s := range []string{"postgres.sh", "redis.sh"} {
				c := exec.Command(filepath.Join(filepath.Dir(runScript(t)), s), "stop")
				c.Env = environ(env)
				_ = c.Run()
			}
		}
		if t.Failed() {
			t.Logf("run.sh output:\n%s", out.String())
		}
	})
	start := time.Now()
	for !strings.Contains(out.String(), "Ctrl-C stops everything") {
		select {
		case <-done:
			t.Fatalf("run.sh ended before it was up: %v", exitErr)
		case <-ctx.Done():
			t.Fatal("run.sh not up within 3 minutes")
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Logf("make run up in %v", time.Since(start))

	demo, err := os.ReadFile(filepath.Join(dir, "demo.env"))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, line := range strings.Split(string(demo), "\n") {
		k, v, _ := strings.Cut(line, "=")
		vars[k] = strings.Trim(v, "'")
	}
	c := stack.Credential{Username: vars["BERTH_MQTT_USERNAME"], Password: vars["BERTH_MQTT_PASSWORD"]}
	cl := mustConnectV5(t, vars["BERTH_MQTT_ADDR"], c, "make-run-probe")
	cl.subscribe(t, "demo/#")

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case rc := <-cl.disconnected:
		if rc != 0x8B {
			t.Errorf("device got %#x on Ctrl-C, want DISCONNECT 0x8B", rc)
		}
	case <-time.After(30 * time.Second):
		t.Error("no DISCONNECT within 30 s of SIGTERM")
	}
	select {
	case <-done:
		if exitErr != nil {
			t.Fatalf("run.sh after SIGTERM: %v (want exit 0)", exitErr)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("run.sh still running 60 s after SIGTERM")
	}
	// Neither the start nor the stop logs a WARN or an ERROR.
	logs, _ := filepath.Glob(filepath.Join(dir, "logs", "*.log"))
	for _, f := range logs {
		b, _ := os.ReadFile(f)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
				t.Errorf("%s: %s", filepath.Base(f), line)
			}
		}
	}

	for _, v := range []string{"BERTH_PG_PORT", "BERTH_REDIS_PORT", "BERTH_STRIPE_MOCK_PORT"} {
		if c, err := net.Dial("tcp", "127.0.0.1:"+env[v]); err == nil {
			c.Close()
			t.Errorf("%s %s still listening after run.sh ended", v, env[v])
		}
	}
}

// outputFile is run.sh's output, read as it grows.
type outputFile struct{ name string }

func (o *outputFile) String() string {
	b, _ := os.ReadFile(o.name)
	return string(b)
}

// `make test` runs the Go tests through with-services.sh: Postgres and
// Redis are up while they run, and the ones it started are stopped after,
// with the tests' exit status kept.
func TestWithServicesStopsWhatItStarted(t *testing.T) {
	t.Parallel()
	_, env := runEnv(t)
	script := filepath.Join(filepath.Dir(runScript(t)), "with-services.sh")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The command sees both up, then fails: its status must come back.
	cmd := exec.CommandContext(ctx, script, "bash", "-c",
		`exec 3<>/dev/tcp/127.0.0.1/$BERTH_PG_PORT && exec 4<>/dev/tcp/127.0.0.1/$BERTH_REDIS_PORT && exit 7`)
	cmd.Env = environ(env)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 7 {
		t.Fatalf("with-services.sh: %v, want the command's exit 7\n%s", err, out)
	}
	for _, v := range []string{"BERTH_PG_PORT", "BERTH_REDIS_PORT", "BERTH_STRIPE_MOCK_PORT"} {
		if c, err := net.Dial("tcp", "127.0.0.1:"+env[v]); err == nil {
			c.Close()
			t.Errorf("%s %s still listening after with-services.sh\n%s", v, env[v], out)
		}
	}
}
