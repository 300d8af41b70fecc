package replica

import (
	"sync/atomic"
	"time"
)

// Node liveness: every frame from a peer is a sign of life (handleFrame
// stamps its arrival), the Host sends each peer one liveness frame per
// tick, and each tick judges a peer dead once it has been silent for
// Config.Liveness — counted only while this node ran. A node that stalls
// (a long GC, a VM pause, a machine so loaded no goroutine runs for a
// second) finds on resuming every peer silent for as long as it stood
// still, though no peer failed: taking them for dead would wake every
// quiesced group with its election timer run out and start elections with
// no reason. So each tick measures its own lateness against the ticker's
// schedule: beyond stallTicks tick intervals, the excess is time this node
// did not run, and every peer's silence is credited with it (its last-seen
// moves forward by the stall, never past now). A peer that really died is
// then judged dead once it has been silent for the window after the stall,
// and one that dies while this node runs normally exactly as before. A
// tick loop that is slow every time (each tick late) still counts up to
// stallTicks intervals of every tick, so a dead peer is found after at
// most Liveness / (stallTicks × TickInterval) ticks: raft's own timers
// count ticks, not wall time, too.

// stallTicks is how late (in tick intervals since the previous tick) a
// tick may come before the rest counts as this node's own stall: the
// ticker's jitter and a loop turn that ran long stay far below it.
const stallTicks = 2

// hooks are test-only interception points; all nil in production.
type hooks struct {
	tick   func()                           // each tick, before its time is read
	frame  func()                           // each incoming frame, before it is taken
	judged func(peer uint64, up bool)       // a peer's judged liveness changed
	wake   func(group uint64, expired bool) // a quiesced group wakes
}

// clock is this Host's monotonic time in nanoseconds since New, never 0 (a
// peer's last-seen 0 means never heard). Monotonic: a step of the wall
// clock is no stall and no silence.
func (h *Host) clock() int64 { return max(1, int64(time.Since(h.born))) }

// stallOf is how long this node stood still between two ticks gap apart.
func stallOf(gap, tick time.Duration) time.Duration {
	return max(0, gap-stallTicks*tick)
}

// judgeLivenessLocked sends every peer a liveness frame and judges each
// alive or dead as of now, after crediting every peer's silence with this
// node's own stall since the previous tick. It reports whether any peer's
// liveness changed. h.mu is held.
func (h *Host) judgeLivenessLocked(now int64, stall time.Duration) (changed bool) {
	for id, s := range h.seen {
		h.tr.send(id, kindAlive, 0, h.ids.hello)
		last := s.Load()
		if stall > 0 && last != 0 {
			last = creditStall(s, last, int64(stall), now)
		}
		up := last != 0 && now-last < int64(h.cfg.Liveness)
		if up != h.live[id] {
			h.live[id], changed = up, true
			h.log.Info("replica: peer liveness", "peer", id, "alive", up)
			if h.cfg.hooks.judged != nil {
				h.cfg.hooks.judged(id, up)
			}
		}
	}
	return changed
}

// creditStall moves a peer's last-seen forward by stall, never past now,
// unless a frame stamped it meanwhile (that one is fresher); it returns the
// last-seen to judge by.
func creditStall(s *atomic.Int64, last, stall, now int64) int64 {
	v := min(last+stall, now)
	if v <= last || s.CompareAndSwap(last, v) {
		return max(v, last)
	}
	return s.Load()
}
