package shard

import "time"

// A publisher faster than the only subscribers it feeds would otherwise
// have most of its messages read, decoded, routed and then dropped at
// their full queues: CPU spent for nothing, and on a shared machine taken
// from the subscribers that are behind. So a reader pauses, briefly, when
// every copy it queued since its last flush went to a connected subscriber
// that is behind (its queue at least half full by count or bytes): it
// stops reading, TCP holds the publisher back, and it goes on as soon as
// one of those queues is back under half (the writer's fill closes
// session.drained), or after stallWait at most.
//
// One slow subscriber never delays another's messages: a reader that
// queued a single copy for a subscriber keeping up does not pause, so a
// slow subscriber beside fast ones gets its copies dropped for it alone
// (DropQueueFull), as before. A subscriber that does not drain at all
// within stallWait, and whose writer has sent nothing for stallQuiet
// either, is marked stalled: no reader pauses on it again until its queue
// is back under half, so a client that stopped reading costs its
// publishers stallQuiet of pauses, then drops; past SlowConsumerTimeout
// full it is disconnected. (A slow client that does read is woken for by
// the kernel only once its socket's send buffer is half free, up to 2 MiB
// at a time: hence a quiet time far longer than one pause, and clients
// slower than about 2 MB/s alternate between pacing and drops.) Readers only
// queue within their own shard: no other tenant is ever paused.
const (
	stallWait  = 5 * time.Millisecond
	stallQuiet = time.Second
)

// behindLocked reports whether the session's queue is at least half full
// by count or bytes; sess.mu is held.
func (sess *session) behindLocked() bool {
	s := sess.shard
	return 2*sess.queue.len() >= s.opts.MaxQueuedMessages || 2*int64(sess.queuedBytes) >= s.maxQueuedBytes.Load()
}

// caughtUpLocked lets the readers pausing on the session go on and clears
// its stalled mark; sess.mu is held.
func (sess *session) caughtUpLocked() {
	if a := sess.aside; a != nil && a.drained != nil {
		close(a.drained)
		a.drained = nil
	}
	sess.stalled = false
}

// noteQueued records, for a reader's pause, a copy queued for sess and
// whether sess is behind.
func (o *outbox) noteQueued(sess *session, behind bool) {
	o.queued++
	if behind {
		o.behind++
		o.lag = sess
	}
}

// forgetQueued starts the reader's count again.
func (o *outbox) forgetQueued() { o.queued, o.behind, o.lag = 0, 0, nil }

// pauseForLagging is the reader's pause (see stallWait), after its outbox
// is flushed and before it reads on.
func (c *conn) pauseForLagging() {
	o := &c.in.out
	sess, all := o.lag, o.behind == o.queued
	o.forgetQueued()
	if sess == nil || !all {
		return
	}
	sess.mu.Lock()
	if sess.stalled || sess.conn == nil || !sess.behindLocked() {
		sess.mu.Unlock()
		return
	}
	a := sess.asideLocked()
	if a.drained == nil {
		a.drained = make(chan struct{}) // one per pause, shared by every reader waiting
	}
	drained := a.drained
	sess.mu.Unlock()
	if o.timer == nil {
		o.timer = time.NewTimer(stallWait) // kept with the reader's pooled scratch
	} else {
		o.timer.Reset(stallWait)
	}
	c.shard.stats.pauses.Add(1)
	select {
	case <-drained:
		o.timer.Stop()
	case <-o.timer.C:
		sess.mu.Lock()
		quiet := time.Now().UnixNano() - max(sess.sentAt, sess.attachedAt)
		if sess.aside.drained == drained && sess.behindLocked() && quiet > int64(stallQuiet) {
			sess.stalled = true // nothing sent for stallQuiet: drop for it, pause no more
			c.shard.stats.pausesStalled.Add(1)
		}
		sess.mu.Unlock()
	}
}
