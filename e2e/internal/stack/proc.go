// Package stack runs a whole Berth stack of real processes for end-to-end
// tests: the api, a broker node and gateways, built from this checkout,
// against the private Postgres and Redis (a fresh database per stack).
// Every process is stopped by its PID when the test ends, and its log is
// printed if the test failed.
package stack

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"berth.dev/testenv"
)

// Binaries are the built programs.
type Binaries struct {
	API, Broker, Gateway, Berthctl string
	ConnFlood                      string // the fault suite's connect flood (e2e/cmd/connflood)
	Billing                        string // the billing worker (billing/cmd/billing)
}

// Build compiles the api, broker and gateway into dir. It is called once per
// test binary (from TestMain), not per test.
func Build(dir string) (Binaries, error) {
	root, err := repoRoot()
	if err != nil {
		return Binaries{}, err
	}
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator),
		"./services/cmd/api", "./services/cmd/berthctl", "./broker/cmd/broker", "./gateway/cmd/gateway", "./e2e/cmd/connflood",
		"./billing/cmd/billing")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return Binaries{}, fmt.Errorf("stack: go build: %v\n%s", err, out)
	}
	return Binaries{
		API:      filepath.Join(dir, "api"),
		Broker:   filepath.Join(dir, "broker"),
		Gateway:  filepath.Join(dir, "gateway"),
		Berthctl: filepath.Join(dir, "berthctl"),

		ConnFlood: filepath.Join(dir, "connflood"),
		Billing:   filepath.Join(dir, "billing"),
	}, nil
}

// repoRoot is the folder holding go.work.
func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOWORK").Output()
	if err != nil {
		return "", fmt.Errorf("stack: go env GOWORK: %w", err)
	}
	w := strings.TrimSpace(string(out))
	if w == "" || w == "off" {
		return "", fmt.Errorf("stack: not inside the Berth workspace")
	}
	return filepath.Dir(w), nil
}

// Proc is one running process.
type Proc struct {
	Name string
	cmd  *exec.Cmd
	log  *testenv.LogBuffer
	done chan struct{}
	err  error
}

// Start runs bin with args and env (added to this process's environment).
// When the test ends the process gets SIGTERM, then SIGKILL after 10 s.
func Start(t testing.TB, name, bin string, args, env []string) *Proc {
	t.Helper()
	p := &Proc{Name: name, log: &testenv.LogBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("---- %s log ----\n%s", name, p.Log())
		}
	})
	return p
}

// Pid is the process id (of the process that ended, once Exited).
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Log is everything the process printed so far.
func (p *Proc) Log() string { return p.log.String() }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM and waits up to grace before SIGKILL. It returns the
// process's exit error (nil for a clean exit).
func (p *Proc) Stop(grace time.Duration) error {
	if p.Exited() {
		return p.err
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return p.err
}

// Signal sends sig to the process without waiting for it to end.
func (p *Proc) Signal(t testing.TB, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil && !p.Exited() {
		t.Fatalf("signal %s: %v", p.Name, err)
	}
}

// Wait waits up to within for the process to end and returns its exit
// error (nil for a clean exit); it is an error if it is still running.
func (p *Proc) Wait(within time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(within):
		return fmt.Errorf("%s still running after %v", p.Name, within)
	}
}

// Kill ends the process with SIGKILL at once, as a crash would.
func (p *Proc) Kill() {
	if p.Exited() {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// FreeAddr returns a loopback address with a port that was free a moment
// ago and that no other FreeAddr call in this process has returned.
//
// Ports come from below the kernel's ephemeral range (32768 and up on
// Linux), walking upward from a random start: a port the kernel hands out
// for 127.0.0.1:0 is soon handed out again, to another test's stack or as
// the local port of an outgoing connection, and a process started a moment
// later then fails to bind it (seen in CI as "bind: address already in
// use" while another stack answered on that port).
func FreeAddr(t testing.TB) string {
	t.Helper()
	freePorts.Lock()
	defer freePorts.Unlock()
	if freePorts.next == 0 {
		freePorts.next = portLow + rand.IntN(portHigh-portLow)
	}
	for range portHigh - portLow {
		port := freePorts.next
		freePorts.next++
		if freePorts.next >= portHigh {
			freePorts.next = portLow
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		addr := l.Addr().String()
		l.Close()
		return addr
	}
	t.Fatalf("no free loopback port in [%d, %d)", portLow, portHigh)
	return ""
}

// The ports FreeAddr hands out: below Linux's default ephemeral range.
const portLow, portHigh = 20000, 32768

// freePorts is the process-wide cursor of FreeAddr: every stack of a test
// binary must draw from the same sequence for the ports to stay distinct.
var freePorts struct {
	sync.Mutex
	next int
}

// WaitListening waits until addr accepts TCP connections or the process ends.
func WaitListening(t testing.TB, p *Proc, addr string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if p.Exited() {
			t.Fatalf("%s exited before listening on %s: %v\n%s", p.Name, addr, p.err, p.Log())
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not listening on %s after %v\n%s", p.Name, addr, within, p.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
