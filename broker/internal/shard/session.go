package shard

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"berth.dev/broker/internal/topic"
)

// neverExpires is the Session Expiry Interval that means "never"
// (MQTT 5.0 section 3.1.2.11.2), and what a 3.1.1 clean-session-0 session
// gets.
const neverExpires = 0xFFFFFFFF

// deliveryState tracks an outbound QoS 1/2 message (MQTT 5.0 section 4.3).
type deliveryState uint8

const (
	stateQueued   deliveryState = iota // waiting for the inflight window
	statePublish                       // PUBLISH sent, awaiting PUBACK or PUBREC
	stateReleased                      // PUBREL sent, awaiting PUBCOMP
)

// delivery is one copy of a message for one session. It is stored by value
// in the queue ring and the inflight map, so queueing allocates nothing.
type delivery struct {
	msg    *message
	qos    byte
	retain bool  // RETAIN flag to send
	nSub   uint8 // subscription identifiers in subIDs (more in extra)
	subIDs [2]uint32
	extra  []uint32 // identifiers beyond the second (rare)
	id     uint16
	state  deliveryState
	// runSlots: on the delivery that counted its message's slab chunk
	// into the queue (see ring), that chunk's messages; 0 on the others.
	runSlots uint8
	// live: routed from a client's PUBLISH to a connected session; its
	// write is a delivery latency sample (see Latency).
	live bool
	seq  uint64 // send order, for redelivery [MQTT-4.4.0-1]
}

func (d *delivery) setSubIDs(ids []uint32) {
	n := copy(d.subIDs[:], ids)
	d.nSub = uint8(n)
	if len(ids) > n {
		d.extra = append([]uint32(nil), ids[n:]...)
	}
}

func (d *delivery) appendSubIDs(dst []uint32) []uint32 {
	dst = append(dst, d.subIDs[:d.nSub]...)
	return append(dst, d.extra...)
}

// session is the state the broker keeps for one client id, across
// connections when it is persistent.
type session struct {
	shard    *Shard
	id       topic.SubscriberID
	clientID string
	online   atomic.Bool // conn != nil, readable without mu (share-group picking)
	// nextID, dirty and stalled fill online's word.
	nextID  uint16
	dirty   bool // cursor (below) may have moved since the session was saved
	stalled bool // see drained
	// owner is the credential id the session belongs to (ConnInfo.
	// CredentialID); empty: none (standalone, or restored from a record
	// written before owners were kept, until a credential resumes it).
	// Written with both s.mu and mu held; read with either.
	owner string

	mu          sync.Mutex
	conn        *conn
	gen         uint64 // incremented on every attach; invalidates timers
	attachedAt  int64  // when conn attached, Unix nanoseconds (the admin API's connected_at)
	version     byte   // protocol version of the last connection (0: none since the shard opened)
	expiry      uint32 // Session Expiry Interval, seconds
	queue       ring
	queuedBytes int
	inflight    map[uint16]delivery // outbound QoS 1/2 by packet id; nil until the first (putInflightLocked)
	seq         uint64
	// q2pos is the lowest log offset holding the session's QoS 2 state
	// (its aside's awaitingRel and relAt) as of the last checkpoint
	// (qos2.go).
	q2pos     uint64
	fullSince int64        // when the queue first hit its limit, Unix nanoseconds; 0 if not full
	rare      *sessionRare // drop counters, revoked subscriptions, traced copies; nil until one is needed
	// aside holds the timers, the pending will, the channel publishers
	// pause on and the QoS 2 id maps: nil until one is needed (sessionrare.go).
	aside *sessionAside
	// stored are deliveries whose message lives in the message log
	// (offline persistent sessions, restart, replay); they go out before
	// queue. replaying > 0 holds queue back while a replay is collected.
	stored    offRing
	replaying int
	// cursor is the lowest log offset the session may still need (saved
	// with the session; dirty, above, says it may have moved).
	cursor uint64
	sentAt int64 // when the writer last took queued messages, Unix nanoseconds
}

func newSession(s *Shard, id topic.SubscriberID, clientID string) *session {
	return &session{
		shard:    s,
		id:       id,
		clientID: clientID,
	}
}

// putInflightLocked records an outbound QoS 1/2 delivery under its
// packet id. The map is made on first use: a session that never had one
// (most idle ones) holds none.
func (sess *session) putInflightLocked(id uint16, d *delivery) {
	if sess.inflight == nil {
		sess.inflight = make(map[uint16]delivery)
	}
	sess.inflight[id] = *d
}

// putAwaitingRelLocked records an inbound QoS 2 id accepted and awaiting
// its PUBREL, with its log offset plus one (0: not logged); the map is
// made on first use.
func (sess *session) putAwaitingRelLocked(id uint16, off uint64) {
	a := sess.asideLocked()
	if a.awaitingRel == nil {
		a.awaitingRel = make(map[uint16]uint64)
	}
	a.awaitingRel[id] = off
}

// enqueue hands one delivery to the session. It never blocks on the
// client: a full queue drops the copy and counts it against this
// subscriber only, unless the copy is a persistent session's logged
// message, which goes to the stored ring with the queue's (no count
// bounds that ring; Retention does). It returns a connection to disconnect as a slow
// consumer, if the queue has stayed full past the limit, and the
// connection that now has output, which the caller must wake (or write
// for, conn.writeInline), and whether the session's connected client is
// behind (its queue at least half full, or full: stall.go).
func (sess *session) enqueue(d *delivery, now time.Time) (kick, out *conn, behind bool) {
	s := sess.shard
	size := d.msg.size
	sess.mu.Lock()
	c := sess.conn
	if c == nil && d.qos == 0 {
		sess.dropLocked(DropOffline)
		sess.mu.Unlock()
		return nil, nil, false
	}
	if c == nil && d.msg.off != 0 {
		// Offline: keep an offset into the log, not the message. No count
		// bounds it: the log's retention does (pushStoredLocked).
		sess.pushStoredLocked(d.storedEntry())
		sess.mu.Unlock()
		return nil, nil, false
	}
	if sess.queue.len() >= s.opts.MaxQueuedMessages || int64(sess.queuedBytes+size) > s.maxQueuedBytes.Load() {
		// A persistent session's logged message is not dropped for a full
		// queue: the queue goes to the log as offsets, order kept. Not while
		// a replay is collected: its entries go to the ring after the queue.
		spilled := d.msg.off != 0 && sess.expiry != 0 && sess.replaying == 0
		if spilled {
			sess.toStoredLocked()
			sess.pushStoredLocked(d.storedEntry())
		} else {
			sess.deadLetterLocked(DropQueueFull, d.msg, d.qos)
		}
		if c != nil {
			if sess.fullSince == 0 {
				sess.fullSince = now.UnixNano()
			} else if now.UnixNano()-sess.fullSince > int64(s.opts.SlowConsumerTimeout) {
				kick = c
			}
		}
		sess.mu.Unlock()
		if spilled && kick == nil {
			return nil, c, c != nil
		}
		return kick, nil, c != nil
	}
	if m := d.msg; m.chunk != nil && (c == nil || sess.queue.sparse(m.chunk)) {
		d.msg = m.own() // it may wait long: hold no more slab chunks
	}
	d.msg.ref() // the queue entry's (msgbuf.go)
	sess.queue.push(*d)
	sess.queuedBytes += size
	behind = c != nil && sess.behindLocked()
	sess.mu.Unlock()
	return nil, c, behind
}

// dropLocked counts one undelivered copy.
func (sess *session) dropLocked(r DropReason) {
	sess.rareLocked().dropped[r]++
	sess.shard.stats.drops[r].Add(1)
}

// dropCountsLocked returns the undelivered copies counted, by reason.
func (sess *session) dropCountsLocked() (n [numDropReasons]uint64) {
	if sess.rare != nil {
		n = sess.rare.dropped
	}
	return n
}

// nextIDLocked returns a packet identifier not in use by an inflight
// message [MQTT-2.2.1-3].
func (sess *session) nextIDLocked() uint16 {
	for {
		sess.nextID++
		if sess.nextID == 0 {
			sess.nextID = 1
		}
		if _, used := sess.inflight[sess.nextID]; !used {
			return sess.nextID
		}
	}
}

// stopTimers stops the will and expiry timers.
func (sess *session) stopTimers() {
	sess.mu.Lock()
	sess.stopTimersLocked()
	sess.mu.Unlock()
}

func (sess *session) stopTimersLocked() {
	a := sess.aside
	if a == nil {
		return
	}
	if a.willTimer != nil {
		a.willTimer.Stop()
		a.willTimer = nil
	}
	if a.expiryTimer != nil {
		a.expiryTimer.Stop()
		a.expiryTimer = nil
	}
}

// dropAllLocked discards everything queued or inflight (the session ended).
func (sess *session) dropAllLocked() {
	for sess.queue.len() > 0 {
		d := sess.queue.pop()
		d.msg.unref()
		sess.dropLocked(DropSessionEnded)
	}
	sess.queuedBytes = 0
	for sess.stored.len() > 0 {
		sess.stored.pop()
		sess.dropLocked(DropSessionEnded)
	}
	for _, d := range sess.inflight {
		d.msg.unref()
	}
	clear(sess.inflight)
	if a := sess.aside; a != nil {
		clear(a.awaitingRel)
		a.relAt = nil
	}
	sess.endAllTracesLocked("session ended before the acknowledgement")
}

// ring is a growable FIFO of deliveries. It counts the slab chunks its
// messages come from: a push whose chunk is not among the last
// recentChunks counted ones counts it again (a run), so interleaved
// publishers, each sending a chunk's worth, count each chunk about once.
// The chunks it holds on to are at most runs+recentChunks: a chunk with
// no counted delivery left in the queue was among the recent ones when
// the oldest queued delivery was pushed.
//
// Its counts are 32 bits wide (a queue never holds 2^31 deliveries), so
// that session fits its size class (TestConnStateSize).
type ring struct {
	buf        []delivery
	head, size int32
	runs       int32 // counted deliveries (runSlots > 0) in the queue
	slots      int32 // the counted chunks' messages, summed
	nextRecent int32
	recent     [recentChunks]*message
}

// recentChunks is how many interleaved publishers' chunks a queue tells
// apart without counting a new run.
const recentChunks = 16

func (r *ring) len() int { return int(r.size) }

// sparse reports whether a delivery of a message from chunk would pin one
// chunk too many: a new run past pinnedRunsMax while the counted chunks
// have fewer than half their messages, on average, in this queue. A
// queue fed by whole chunks (publishers sending back to back, however
// many and however interleaved) keeps them: copying would cost what it
// saves. One that would hold chunks mostly of other queues' messages
// gets an owned copy instead.
func (r *ring) sparse(chunk *message) bool {
	if r.runs < pinnedRunsMax || slices.Contains(r.recent[:], chunk) {
		return false
	}
	return r.slots > 2*(r.size+1)
}

func (r *ring) push(d delivery) {
	d.runSlots = 0
	if ch := d.msg.chunk; ch != nil && !slices.Contains(r.recent[:], ch) {
		d.runSlots = max(ch.chunkMsgs, 1)
		r.runs++
		r.slots += int32(d.runSlots)
		r.recent[r.nextRecent] = ch
		r.nextRecent = (r.nextRecent + 1) % recentChunks
	}
	if int(r.size) == len(r.buf) {
		nb := make([]delivery, max(16, 2*len(r.buf)))
		for i := range int(r.size) {
			nb[i] = r.buf[(int(r.head)+i)%len(r.buf)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(int(r.head)+int(r.size))%len(r.buf)] = d
	r.size++
}

func (r *ring) peek() *delivery { return &r.buf[r.head] }

func (r *ring) at(i int) *delivery { return &r.buf[(int(r.head)+i)%len(r.buf)] }

func (r *ring) pop() delivery {
	d := r.buf[r.head]
	r.buf[r.head] = delivery{}
	r.head = int32((int(r.head) + 1) % len(r.buf))
	r.size--
	if d.runSlots > 0 {
		r.runs--
		r.slots -= int32(d.runSlots)
	}
	if r.size == 0 {
		r.recent = [recentChunks]*message{}
	}
	return d
}

// storedEntry is the log form of a delivery of a logged message.
func (d *delivery) storedEntry() storedEntry {
	e := storedEntry{off: d.msg.off - 1, qos: d.qos, retain: d.retain}
	if d.nSub > 0 {
		e.subID = d.subIDs[0]
	}
	return e
}

// toStoredLocked moves the queued deliveries of logged messages to the
// stored ring, keeping their order, so an offline session holds offsets,
// not messages. Deliveries of unlogged messages (retained ones queued on
// subscribe) stay queued.
func (sess *session) toStoredLocked() {
	for i, n := 0, sess.queue.len(); i < n; i++ {
		d := sess.queue.pop()
		if d.msg.off != 0 {
			sess.queuedBytes -= d.msg.size
			sess.pushStoredLocked(d.storedEntry())
			d.msg.unref() // the log holds it now
			continue
		}
		sess.queue.push(d)
	}
}

// cursorLocked is the lowest log offset the session still needs: its
// stored, queued and inflight messages; next when it needs none.
func (sess *session) cursorLocked(next uint64) uint64 {
	cur := next
	for i := 0; i < sess.stored.len(); i++ {
		cur = min(cur, sess.stored.at(i).off)
	}
	for i := 0; i < sess.queue.len(); i++ {
		if m := sess.queue.at(i).msg; m.off != 0 {
			cur = min(cur, m.off-1)
		}
	}
	for _, d := range sess.inflight {
		if d.msg != nil && d.msg.off != 0 {
			cur = min(cur, d.msg.off-1)
		}
	}
	return cur
}

// ownMessagesLocked makes the session's queued and inflight messages
// owned copies (message.own): the session went offline and may keep them
// for long.
func (sess *session) ownMessagesLocked() {
	for i := 0; i < sess.queue.len(); i++ {
		if d := sess.queue.at(i); d.msg.chunk != nil {
			d.msg = d.msg.own() // a pooled message stays: its reference holds it
		}
	}
	for id, d := range sess.inflight {
		if d.msg != nil && d.msg.chunk != nil {
			d.msg = d.msg.own()
			sess.inflight[id] = d
		}
	}
}
