package replica

import (
	"flag"
	"sync"
	"syscall"
	"testing"
	"time"

	"berth.dev/broker/internal/wal"
)

var (
	idleGroups = flag.Int("idle-groups", 60, "groups (tenants) per node in TestIdleGroupsCPU; make replica-idle uses 1000")
	idleWindow = flag.Duration("idle-window", 2*time.Second, "CPU measurement window of TestIdleGroupsCPU")
	// The layouts quiescence is compared with only measure (their CPU is
	// the figure): make replica-idle asks for them, make test does not.
	idleCompare = flag.Bool("idle-compare", false, "TestIdleGroupsCPU also measures the ticking layouts (make replica-idle)")
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestIdleGroupsCPU measures what idle groups cost on 3 nodes (one process,
// production timing: 100 ms tick, election 10 ticks): groups per tenant with
// quiescence, the same without, and a group per bucket of 16 tenants
// without. It asserts the outcome quiescence promises (every group asleep,
// only node-liveness frames on the wire) and logs the CPU, which depends on
// the machine. `make replica-idle` runs it with 1,000 tenants, without -race,
// and with the two ticking layouts beside it (-idle-compare), which only
// measure.
func TestIdleGroupsCPU(t *testing.T) {
	n := *idleGroups
	cases := []struct {
		name    string
		groups  int
		quiesce bool
	}{
		{"group per tenant, quiesced", n, true},
		{"group per tenant, ticking", n, false},
		{"group per 16-tenant bucket, ticking", (n + 15) / 16, false},
	}
	if !*idleCompare {
		cases = cases[:1] // the one with outcomes to assert
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3, func(cfg *Config) {
				cfg.TickInterval, cfg.ElectionTick, cfg.Quiesce = 100*time.Millisecond, 10, tc.quiesce
				cfg.Fsync = wal.SyncAlways
			})
			start := time.Now()
			c.openGroups(t, tc.groups)
			waitFor(t, 120*time.Second, "every group to elect a leader", func() bool { return c.allLed(tc.groups) })
			if tc.quiesce {
				waitFor(t, 60*time.Second, "every group to quiesce", func() bool { return c.allQuiesced(tc.groups) })
			}
			setup := time.Since(start)
			framesBefore := c.framesOut()
			cpu0, wall0 := cpuTime(), time.Now()
			time.Sleep(*idleWindow) // the measurement window itself, not a wait for a condition
			cpu, wall := cpuTime()-cpu0, time.Since(wall0)
			frames := c.framesOut() - framesBefore
			if tc.quiesce {
				if !c.allQuiesced(tc.groups) {
					t.Error("a group woke up while nothing happened")
				}
				// Node liveness only: 3 nodes × 2 peers per tick, with slack for
				// a tick that lands on either side of the window.
				if limit := uint64(6 * (int(wall/(100*time.Millisecond)) + 2)); frames > limit {
					t.Errorf("%d frames in %v while idle, want at most %d (liveness only)", frames, wall, limit)
				}
			}
			t.Logf("%d groups on 3 nodes (race detector %v): CPU %.2f%% of one core over %v (%v), %d frames (%.0f/s); setup %v",
				tc.groups, raceEnabled, 100*cpu.Seconds()/wall.Seconds(), wall.Round(time.Millisecond), cpu.Round(time.Millisecond),
				frames, float64(frames)/wall.Seconds(), setup.Round(time.Millisecond))
		})
	}
}

// openGroups opens groups 1000..1000+n-1 on every node, in parallel per node.
func (c *cluster) openGroups(t *testing.T, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for _, id := range c.live() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				if _, err := c.host(id).OpenGroup(uint64(1000+i), c.voters(), &listSM{}); err != nil {
					t.Errorf("node %d group %d: %v", id, 1000+i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

func (c *cluster) allLed(n int) bool {
	for _, id := range c.live() {
		for i := range n {
			if c.host(id).Group(uint64(1000+i)).Leader() == 0 {
				return false
			}
		}
	}
	return true
}

func (c *cluster) allQuiesced(n int) bool {
	for _, id := range c.live() {
		for i := range n {
			if !c.host(id).Group(uint64(1000 + i)).Quiesced() {
				return false
			}
		}
	}
	return true
}

func (c *cluster) framesOut() uint64 {
	var f uint64
	for _, id := range c.live() {
		f += c.host(id).Stats().FramesOut
	}
	return f
}
