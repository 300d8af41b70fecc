package replica

import (
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	procCycles = flag.Int("proc-cycles", 3, "SIGKILLs of the leader process per timing in TestLeaderProcessKilled")
	procTiming = flag.String("proc-timing", "test,production", "timings TestLeaderProcessKilled runs (test: 20 ms tick, production: 100 ms)")
)

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
			waitFor(t, 30*time.Second, "every group has a leader", func() bool {
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
				waitFor(t, 20*time.Second, "acknowledgements before the kill", func() bool { return load.count.Load() >= before+30 })
				victim, term := c.leader(1)
				if victim == 0 {
					waitFor(t, 20*time.Second, "a leader of group 1", func() bool { victim, term = c.leader(1); return victim != 0 })
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
					waitFor(t, 30*time.Second, fmt.Sprintf("cycle %d: group %d acknowledged by a new leader", cycle, g), func() bool {
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
						waitFor(t, 20*time.Second, fmt.Sprintf("cycle %d: node %d holds group %d's %d entries acked before the kill", cycle, id, g, len(want)), func() bool {
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
	waitFor(t, 30*time.Second, fmt.Sprintf("group %d: all three nodes hold the same %d+ entries", g, len(acked)), func() bool {
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
