package replica

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// procCluster is three node processes (this test binary re-executed, see
// runNodeProc), each with its own data directory and peer port.
type procCluster struct {
	t     *testing.T
	specs map[uint64]nodeSpec
	mu    sync.Mutex
	procs map[uint64]*nodeProc
}

type nodeProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	ctl   string // control address
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func newProcCluster(t *testing.T, groups int, tick, liveness, propose time.Duration, dbURL string) *procCluster {
	c := &procCluster{t: t, specs: map[uint64]nodeSpec{}, procs: map[uint64]*nodeProc{}}
	addrs := map[uint64]string{1: freePort(t), 2: freePort(t), 3: freePort(t)}
	for id := uint64(1); id <= 3; id++ {
		peers := map[uint64]string{}
		for p, a := range addrs {
			if p != id {
				peers[p] = a
			}
		}
		c.specs[id] = nodeSpec{ID: id, Dir: t.TempDir(), Listen: addrs[id], Peers: peers,
			Secret: "berth-test-cluster-secret-0123456789", Groups: groups, Tick: tick, Liveness: liveness, Propose: propose,
			DatabaseURL: dbURL}
	}
	t.Cleanup(func() {
		for _, id := range c.live() {
			c.kill(id)
		}
	})
	for id := uint64(1); id <= 3; id++ {
		c.start(id)
	}
	return c
}

// start runs node id's process on its data directory and waits for it to
// be ready.
func (c *procCluster) start(id uint64) {
	c.t.Helper()
	spec, _ := json.Marshal(c.specs[id])
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), nodeProcEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line
		io.Copy(io.Discard, stdout)
	}()
	select {
	case line := <-ready:
		addr, ok := strings.CutPrefix(strings.TrimSpace(line), "ready ")
		if !ok {
			cmd.Process.Kill()
			cmd.Wait()
			c.t.Fatalf("node %d: %q", id, line)
		}
		c.mu.Lock()
		c.procs[id] = &nodeProc{cmd: cmd, stdin: stdin, ctl: addr}
		c.mu.Unlock()
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		c.t.Fatalf("node %d not ready within 20 s", id)
	}
}

// kill sends SIGKILL: no close, no flush, no fsync beyond what was done.
func (c *procCluster) kill(id uint64) {
	c.mu.Lock()
	p := c.procs[id]
	delete(c.procs, id)
	c.mu.Unlock()
	if p == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	p.cmd.Wait()
	p.stdin.Close()
}

// live is the ids of the node processes running, in order.
func (c *procCluster) live() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.procs))
}

func (c *procCluster) ctl(id uint64) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.procs[id]; p != nil {
		return p.ctl
	}
	return ""
}

// call sends one command on a fresh connection (for the test's own queries).
func (c *procCluster) call(id uint64, cmd string) (string, error) {
	addr := c.ctl(id)
	if addr == "" {
		return "", fmt.Errorf("node %d is down", id)
	}
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintln(conn, cmd); err != nil {
		return "", err
	}
	r := bufio.NewReaderSize(conn, 1<<16)
	line, err := r.ReadString('\n')
	return strings.TrimSpace(line), err
}

// leader returns the node that says it leads group g, with its term.
func (c *procCluster) leader(g int) (uint64, uint64) {
	for _, id := range c.live() {
		out, err := c.call(id, fmt.Sprintf("l %d", g))
		if err != nil {
			continue
		}
		var lead, term uint64
		if _, err := fmt.Sscan(out, &lead, &term); err == nil && lead == id {
			return lead, term
		}
	}
	return 0, 0
}

// entries is node id's state machine of group g.
func (c *procCluster) entries(id uint64, g int) ([]string, error) {
	out, err := c.call(id, fmt.Sprintf("d %d", g))
	if err != nil {
		return nil, err
	}
	_, list, _ := strings.Cut(out, " ")
	if list == "" {
		return nil, nil
	}
	return strings.Split(list, ","), nil
}
