package shard

import "bytes"

// topicTally is a reader's count of the messages it has published to
// one topic and not yet added to the shard's per-topic counters
// (topicStats): a publisher sending a burst to one topic takes the
// stripe's lock and moves the topic's shared atomic counters once per
// burst, not once per message (on two cores, ten publishers to one
// topic made every PUBLISH bounce those cache lines between them). It
// lives in the reader's scratch (inbound.topic) and is flushed with the
// last packet the reader has buffered (before that packet is
// acknowledged), after outboxPackets messages, when the topic or the
// second changes, and before the scratch goes back to its pool: the
// admin view's counts are at most one read behind. The topic and its
// counters stay cached after a flush, so the next burst to the same
// topic looks nothing up either.
type topicTally struct {
	name        []byte     // the topic counted, a copy; nil none
	st          *topicStat // its counters (topicStats.stat)
	sec         int64      // the second msgs and bytes were counted in
	msgs, bytes uint64     // not yet added to st
}

// maxTalliedTopic bounds the topic a tally keeps a copy of; a longer one
// is counted at once, as it comes.
const maxTalliedTopic = 256

// tally counts one message of size bytes published to name in second
// sec through tl, flushing what tl held for another topic or second, and
// this message too when last (the reader has nothing more buffered).
func (t *topicStats) tally(tl *topicTally, name []byte, size int, sec int64, last bool) {
	if tl.st == nil || !bytes.Equal(name, tl.name) {
		tl.flush()
		if len(name) > maxTalliedTopic {
			t.add(name, size, sec)
			return
		}
		tl.st = t.stat(name)
		tl.name = append(tl.name[:0], name...)
		tl.sec = sec
	} else if sec != tl.sec {
		tl.flush() // the rate window counts per second
		tl.sec = sec
	}
	tl.msgs++
	tl.bytes += uint64(size)
	if last || tl.msgs >= outboxPackets {
		tl.flush()
	}
}

// flush adds what tl counted to its topic's counters.
func (tl *topicTally) flush() {
	if tl.msgs == 0 {
		return
	}
	st := tl.st
	st.msgs.Add(tl.msgs)
	st.bytes.Add(tl.bytes)
	st.window.add(tl.sec, tl.msgs, tl.bytes)
	tl.msgs, tl.bytes = 0, 0
}
