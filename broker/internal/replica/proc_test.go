package replica

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

var (
	procCycles = flag.Int("proc-cycles", 3, "SIGKILLs of the leader process per timing in TestLeaderProcessKilled")
	procTiming = flag.String("proc-timing", "test,production", "timings TestLeaderProcessKilled runs (test: 20 ms tick, production: 100 ms)")
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

func (c *procCluster) live() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []uint64
	for id := range c.procs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
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

// ack is one acknowledged proposal.
type ack struct {
	data string
	node uint64
	at   time.Time
}

// procLoad is the writers: per group, writers that propose unique values
// one at a time to the group's leader, re-finding it after any error.
type procLoad struct {
	c     *procCluster
	stop  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	acked map[int][]ack // by group, in acknowledgement order
	maybe map[string]bool
	count atomic.Int64
}

func startLoad(c *procCluster, groups, writers int) *procLoad {
	l := &procLoad{c: c, stop: make(chan struct{}), acked: map[int][]ack{}, maybe: map[string]bool{}}
	for g := 1; g <= groups; g++ {
		for w := range writers {
			l.wg.Go(func() { l.write(g, w) })
		}
	}
	return l
}

func (l *procLoad) write(g, w int) {
	conns := map[uint64]*bufio.ReadWriter{}
	raw := map[uint64]net.Conn{}
	defer func() {
		for _, c := range raw {
			c.Close()
		}
	}()
	var lead uint64
	for seq := 0; ; {
		select {
		case <-l.stop:
			return
		default:
		}
		if lead == 0 {
			if lead, _ = l.c.leader(g); lead == 0 {
				time.Sleep(10 * time.Millisecond) // election under way: ask again shortly
				continue
			}
		}
		rw := conns[lead]
		if rw == nil {
			addr := l.c.ctl(lead)
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if addr == "" || err != nil {
				lead = 0
				continue
			}
			raw[lead], rw = conn, bufio.NewReadWriter(bufio.NewReader(conn), bufio.NewWriter(conn))
			conns[lead] = rw
		}
		data := fmt.Sprintf("g%d.w%d.%d", g, w, seq)
		seq++ // never reused: a value is proposed once
		fmt.Fprintf(rw, "p %d %s\n", g, data)
		err := rw.Flush()
		var line string
		if err == nil {
			line, err = rw.ReadString('\n')
		}
		switch line = strings.TrimSpace(line); {
		case err == nil && line == "ok":
			l.mu.Lock()
			l.acked[g] = append(l.acked[g], ack{data, lead, time.Now()})
			l.mu.Unlock()
			l.count.Add(1)
			continue
		case err == nil && line == "notleader":
		default: // the node died, or the proposal timed out: it may still commit
			l.mu.Lock()
			l.maybe[data] = true
			l.mu.Unlock()
			if err != nil {
				raw[lead].Close()
				delete(raw, lead)
				delete(conns, lead)
			}
		}
		lead = 0
	}
}

func (l *procLoad) halt() {
	close(l.stop)
	l.wg.Wait()
}

// firstAck is the first acknowledgement for group g after t by a node other than not.
func (l *procLoad) firstAck(g int, after time.Time, not uint64) (ack, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range l.acked[g] {
		if a.at.After(after) && a.node != not {
			return a, true
		}
	}
	return ack{}, false
}

func (l *procLoad) ackedBefore(g int, t time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, a := range l.acked[g] {
		if a.at.Before(t) {
			out = append(out, a.data)
		}
	}
	return out
}

// poll waits for cond, bounded.
func poll(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}

// TestLeaderProcessKilled runs three node processes hosting a few groups
// over real TCP with the HMAC transport, each on its own data directory
// with fsync always, under proposals from several writers per group. It
// SIGKILLs the process leading group 1, several times, restarting it
// between cycles. It checks that a new leader acknowledges, that the
// survivors hold every entry acknowledged before the kill, and at the end
// that every node (the killed ones after their restarts) holds every
// acknowledged entry exactly once and each writer's entries in the order
// it was acknowledged. Failover (kill → first acknowledgement by another
// node, for each group the killed process led) is logged for the test
// timing (20 ms tick) and the production timing (100 ms tick, 1 s
// liveness, 1–2 s election timeout).
func TestLeaderProcessKilled(t *testing.T) {
	timings := []struct {
		name           string
		tick, liveness time.Duration
	}{
		{"test", 20 * time.Millisecond, 200 * time.Millisecond},
		{"production", 100 * time.Millisecond, 0}, // the defaults: liveness = election timeout = 1 s
	}
	for _, tm := range timings {
		if !slices.Contains(strings.Split(*procTiming, ","), tm.name) {
			continue
		}
		t.Run(tm.name, func(t *testing.T) {
			const groups, writers = 3, 2
			pl := newPlacementDB(t, groups)
			c := newProcCluster(t, groups, tm.tick, tm.liveness, 20*tm.tick, pl.url)
			poll(t, 30*time.Second, "every group has a leader", func() bool {
				for g := 1; g <= groups; g++ {
					if l, _ := c.leader(g); l == 0 {
						return false
					}
				}
				return true
			})
			load := startLoad(c, groups, writers)
			halted := false
			defer func() {
				if !halted {
					load.halt()
				}
			}()
			var failovers []time.Duration
			for cycle := range *procCycles {
				before := load.count.Load()
				poll(t, 20*time.Second, "acknowledgements before the kill", func() bool { return load.count.Load() >= before+30 })
				victim, term := c.leader(1)
				if victim == 0 {
					poll(t, 20*time.Second, "a leader of group 1", func() bool { victim, term = c.leader(1); return victim != 0 })
				}
				var led []int // groups the victim leads
				for g := 1; g <= groups; g++ {
					if l, _ := c.leader(g); l == victim {
						led = append(led, g)
					}
				}
				epochs := map[int]uint64{}
				for _, g := range led {
					epochs[g] = pl.epoch(g)
				}
				killed := time.Now()
				c.kill(victim)
				for _, g := range led {
					var a ack
					poll(t, 30*time.Second, fmt.Sprintf("cycle %d: group %d acknowledged by a new leader", cycle, g), func() bool {
						var ok bool
						a, ok = load.firstAck(g, killed, victim)
						return ok
					})
					failovers = append(failovers, a.at.Sub(killed))
					t.Logf("cycle %d: killed node %d (leader of group 1 in term %d); group %d: first ack by node %d after %v",
						cycle, victim, term, g, a.node, a.at.Sub(killed).Round(time.Millisecond))
				}
				for _, g := range led {
					pl.waitMoved(t, g, victim, epochs[g], killed)
				}
				for _, g := range led {
					want := load.ackedBefore(g, killed)
					for _, id := range c.live() {
						poll(t, 20*time.Second, fmt.Sprintf("cycle %d: node %d holds group %d's %d entries acked before the kill", cycle, id, g, len(want)), func() bool {
							got, err := c.entries(id, g)
							return err == nil && containsAll(got, want)
						})
					}
				}
				c.start(victim)
			}
			load.halt()
			halted = true
			acked := 0
			for g := 1; g <= groups; g++ {
				acked += verifyGroup(t, c, load, g)
			}
			t.Logf("%s timing: %d kills, %d entries acknowledged, 0 lost, %d ambiguous (timed out or cut by the kill)",
				tm.name, *procCycles, acked, len(load.maybe))
			t.Logf("failover with %s timing, %d group failovers: %s", tm.name, len(failovers), durations(failovers))
		})
	}
}

func containsAll(got, want []string) bool {
	have := make(map[string]bool, len(got))
	for _, v := range got {
		have[v] = true
	}
	for _, v := range want {
		if !have[v] {
			return false
		}
	}
	return true
}

// durations formats the values sorted, with the median.
func durations(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	var b strings.Builder
	for i, d := range s {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(d.Round(time.Millisecond).String())
	}
	if len(s) > 0 {
		fmt.Fprintf(&b, " (p50 %v, max %v)", s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
	}
	return b.String()
}

// verifyGroup waits until every node holds the same entries of group g,
// then checks them against what the writers saw: every acknowledged value
// exactly once, nothing that was never proposed, each writer's values in
// the order it proposed them. It returns how many values were acknowledged.
func verifyGroup(t *testing.T, c *procCluster, l *procLoad, g int) int {
	t.Helper()
	l.mu.Lock()
	acked := make([]string, 0, len(l.acked[g]))
	for _, a := range l.acked[g] {
		acked = append(acked, a.data)
	}
	l.mu.Unlock()
	var ref []string
	poll(t, 30*time.Second, fmt.Sprintf("group %d: all three nodes hold the same %d+ entries", g, len(acked)), func() bool {
		ref = nil
		for i, id := range c.live() {
			got, err := c.entries(id, g)
			if err != nil || (i > 0 && !slices.Equal(got, ref)) {
				return false
			}
			ref = got
		}
		return len(c.live()) == 3 && containsAll(ref, acked)
	})
	seen := map[string]bool{}
	last := map[string]int{} // writer → last seq
	for i, v := range ref {
		if seen[v] {
			t.Fatalf("group %d: %q applied twice (second at %d)", g, v, i)
		}
		seen[v] = true
		var gg, w, seq int
		if _, err := fmt.Sscanf(v, "g%d.w%d.%d", &gg, &w, &seq); err != nil || gg != g {
			t.Fatalf("group %d: entry %q was never proposed to it", g, v)
		}
		writer := strconv.Itoa(w)
		if prev, ok := last[writer]; ok && seq <= prev {
			t.Fatalf("group %d: writer %d's %d applied after its %d", g, w, seq, prev)
		}
		last[writer] = seq
	}
	for _, v := range acked {
		if !seen[v] {
			t.Fatalf("group %d: acknowledged %q lost", g, v) // containsAll held: unreachable
		}
	}
	for v := range seen {
		if !slices.Contains(acked, v) && !l.maybe[v] {
			t.Fatalf("group %d: %q applied but neither acknowledged nor ambiguous", g, v)
		}
	}
	return len(acked)
}
