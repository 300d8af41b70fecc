package replica

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// freezer stands every node of a cluster still at once, as a stall of
// their process does: while frozen, each node's tick loop waits at its
// next tick and every incoming frame waits before it is taken. It records
// the liveness judgements and group wakes from the freeze on.
type freezer struct {
	mu       sync.Mutex
	ticksOn  chan struct{} // closed: ticks run
	framesOn chan struct{} // closed: frames are taken
	held     map[uint64]bool
	ticks    map[uint64]int // ticks each node ran since the ticks were last released
	record   bool
	events   []string
}

func newFreezer() *freezer {
	on := make(chan struct{})
	close(on)
	return &freezer{ticksOn: on, framesOn: on, held: map[uint64]bool{}, ticks: map[uint64]int{}}
}

func (f *freezer) hooks(id uint64) hooks {
	return hooks{
		tick: func() {
			f.mu.Lock()
			on := f.ticksOn
			f.held[id] = true
			f.mu.Unlock()
			<-on
			f.mu.Lock()
			f.held[id] = false
			f.ticks[id]++
			f.mu.Unlock()
		},
		frame: func() {
			f.mu.Lock()
			on := f.framesOn
			f.mu.Unlock()
			<-on
		},
		judged: func(peer uint64, up bool) { f.note(fmt.Sprintf("node %d judged peer %d alive=%v", id, peer, up)) },
		wake: func(group uint64, expired bool) {
			f.note(fmt.Sprintf("node %d woke group %d (timer run out: %v)", id, group, expired))
		},
	}
}

func (f *freezer) note(e string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.record {
		f.events = append(f.events, e)
	}
}

func (f *freezer) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ticksOn, f.framesOn, f.record = make(chan struct{}), make(chan struct{}), true
}

// held reports whether every node's tick loop waits at the freezer.
func (f *freezer) allHeld(ids []uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		if !f.held[id] {
			return false
		}
	}
	return true
}

func (f *freezer) releaseTicks() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.ticks)
	close(f.ticksOn)
}

func (f *freezer) releaseFrames() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.framesOn:
	default:
		close(f.framesOn)
	}
}

// ticked reports whether every node ran at least n ticks since the ticks
// were released.
func (f *freezer) ticked(ids []uint64, n int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		if f.ticks[id] < n {
			return false
		}
	}
	return true
}

func (f *freezer) recorded() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.events...)
}

// TestOwnStallKeepsPeersAlive: three nodes in one process, their groups
// quiesced, all stand still for twice the liveness window (every tick loop
// and every frame held, as in a stall of the process: a GC, a VM pause, a
// loaded machine). The ticks resume first and each node judges its peers
// before any frame of theirs is taken (the worst order a stall can end
// in). No node takes a peer for dead, no group wakes, no election starts:
// the peers were silent only while this node did not run either. Without
// the stall credit every node judges both peers dead on its first tick
// and the quiesced followers wake with their election timers run out.
func TestOwnStallKeepsPeersAlive(t *testing.T) {
	const groups = 20
	const liveness = 400 * time.Millisecond // 20 ticks: room for a loaded machine's late ticks around the stall
	f := newFreezer()
	c := newCluster(t, 3, func(cfg *Config) { cfg.Liveness, cfg.hooks = liveness, f.hooks(cfg.NodeID) })
	t.Cleanup(func() { f.releaseFrames() }) // before the cluster's cleanup closes the nodes
	c.openGroups(t, groups)
	ids := c.live()
	waitFor(t, 60*time.Second, "every group to elect and quiesce", func() bool {
		for _, id := range ids {
			if !c.group(id).Quiesced() {
				return false
			}
		}
		return c.allQuiesced(groups) && c.allLed(groups)
	})
	type state struct{ lead, term uint64 }
	before := map[string]state{}
	for _, id := range ids {
		for i := range groups {
			g := c.host(id).Group(uint64(1000 + i))
			before[fmt.Sprintf("node %d group %d", id, g.ID())] = state{g.Leader(), g.Term()}
		}
	}

	f.freeze()
	waitFor(t, 10*time.Second, "every node's tick loop to stand still", func() bool { return f.allHeld(ids) })
	stallStart := time.Now()
	time.Sleep(2 * liveness) // the stall itself, not a wait for a condition
	f.releaseTicks()
	waitFor(t, 10*time.Second, "every node to judge its peers once after the stall", func() bool { return f.ticked(ids, 2) })
	f.releaseFrames()
	stall := time.Since(stallStart)
	// Watch for what a spurious judgement sets off: woken groups elect
	// within an election timeout (10 ticks) of waking.
	waitFor(t, 30*time.Second, "every node to run 30 more ticks", func() bool { return f.ticked(ids, 32) })

	for _, e := range f.recorded() {
		t.Errorf("after the stall: %s", e)
	}
	for _, id := range ids {
		for i := range groups {
			g := c.host(id).Group(uint64(1000 + i))
			k := fmt.Sprintf("node %d group %d", id, g.ID())
			if now := (state{g.Leader(), g.Term()}); now != before[k] {
				t.Errorf("%s: leader, term %v before the stall, %v after", k, before[k], now)
			}
			if !g.Quiesced() {
				t.Errorf("%s is awake after the stall", k)
			}
		}
	}
	t.Logf("stood still %v (liveness window %v), %d groups on 3 nodes", stall.Round(time.Millisecond), liveness, groups)
}

// TestDeadPeerStillJudgedDead: the stall credit must not hide a real
// failure. A node killed (transport and log closed) while the others run
// is judged dead by both and its groups elect a new leader, whether the
// survivors' ticks come on time or every one of them late (a tick loop
// slowed by load, not stopped: it still counts stallTicks intervals of
// each tick).
func TestDeadPeerStillJudgedDead(t *testing.T) {
	cases := []struct {
		name string
		late time.Duration // every tick waits this long before it judges
	}{
		{"ticks on time", 0},
		{"every tick late", 60 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const groups = 10
			c := newCluster(t, 3, func(cfg *Config) {
				if tc.late > 0 {
					cfg.hooks.tick = func() { time.Sleep(tc.late) } // the simulated load
				}
			})
			c.openGroups(t, groups)
			waitFor(t, 60*time.Second, "every group to elect and quiesce", func() bool {
				return c.allQuiesced(groups) && c.allLed(groups)
			})
			victim := c.host(1).Group(1000).Leader()
			var led []int
			for i := range groups {
				if c.host(1).Group(uint64(1000+i)).Leader() == victim {
					led = append(led, 1000+i)
				}
			}
			killed := time.Now()
			c.kill(victim)
			for _, id := range c.live() {
				waitFor(t, 10*time.Second, fmt.Sprintf("node %d to judge node %d dead", id, victim), func() bool {
					return !c.host(id).Alive(victim)
				})
				t.Logf("node %d judged the killed node dead %v after the kill (liveness window %v, ticks late by %v)",
					id, time.Since(killed).Round(time.Millisecond), c.host(id).cfg.Liveness, tc.late)
			}
			for _, gid := range led {
				waitFor(t, 20*time.Second, fmt.Sprintf("group %d to elect a new leader", gid), func() bool {
					var lead uint64
					for _, id := range c.live() {
						l := c.host(id).Group(uint64(gid)).Leader()
						if l == 0 || l == victim || (lead != 0 && l != lead) {
							return false
						}
						lead = l
					}
					return true
				})
			}
			t.Logf("%d groups the killed node led have new leaders %v after the kill", len(led), time.Since(killed).Round(time.Millisecond))
		})
	}
}
