package shard

import (
	"sync"
	"sync/atomic"
	"time"

	"berth.dev/broker/packet"
)

// Limiter enforces a tenant's live quotas on one connection. The node
// supplies one per connection (ConnInfo.Limiter) and changes its limits in
// place when the quotas change; the shard asks it on every inbound PUBLISH
// and SUBSCRIBE. Implementations must not allocate on AdmitPublish.
type Limiter interface {
	// AdmitPublish decides on one inbound PUBLISH with a payload of size
	// bytes from a client speaking version. It returns:
	//   - CodeSuccess, possibly with a delay: accept, after pausing this
	//     connection's reads that long (how a 3.1.1 client, which cannot be
	//     refused, is throttled);
	//   - ErrQuotaExceeded: refuse this message (PUBACK/PUBREC 0x97; QoS 0
	//     dropped and counted);
	//   - ErrMessageRateTooHigh or ErrPacketTooLarge: disconnect with it.
	AdmitPublish(size int, version byte) (packet.ReasonCode, time.Duration)
	// MaxSubscriptions is the subscriptions-per-client quota; 0 leaves the
	// shard's option in force.
	MaxSubscriptions() int
	// MaxRetained bounds the shard's retained messages and their bytes;
	// 0 means unlimited.
	MaxRetained() (messages int, bytes int64)
	// MaxMessageSize is the message size quota in payload bytes, 0 for
	// none; a will over it refuses the CONNECT (0x95).
	MaxMessageSize() int64
	// AdmitWill decides on publishing a will of size payload bytes when
	// it is due, as of a PUBLISH of it then: the tenant's size, monthly
	// and rate quotas (no per-client rate: the connection has ended). It
	// returns CodeSuccess (the message is counted against the quotas) or
	// the refusal. It may be called on any goroutine, after the
	// connection ended.
	AdmitWill(size int) packet.ReasonCode
}

// refunder is a Limiter that counts the messages it admits against a
// quota (the node's monthly messages quota) and can take one back. The
// shard calls Refund when it refuses a message its Limiter admitted (over
// the retained quota, a payload not in its format, a failed log append),
// so that the quota counts exactly the messages accepted
// (Stats.MessagesAccepted). Refusals only: never on the accepting path.
type refunder interface{ Refund() }

// refund gives back l's count of a message it admitted and the shard then
// refused.
func refund(l Limiter) {
	if r, ok := l.(refunder); ok {
		r.Refund()
	}
}

// maxThrottle bounds one read pause, so a throttled connection still
// answers PINGREQ within its keepalive.
const maxThrottle = time.Second

// admitPublish applies the topic rule governing the message
// (topicrules.go), the connection's limiter and the retained quota to an
// inbound PUBLISH. It returns a per-message refusal code (CodeSuccess to go
// on) with the reason to count it under, or an error that ends the
// connection. now is the clock as read for this PUBLISH; a reader that is
// throttled reads it again after its pause.
func (c *conn) admitPublish(name []byte, p *packet.Publish, now *time.Time) (packet.ReasonCode, DropReason, error) {
	s := c.shard
	if in := c.in; in != nil {
		// Counted once per burst (topictally.go): flushed after the last
		// packet buffered, before this one's acknowledgement is queued.
		s.topics.tally(&in.topic, name, len(p.Payload), now.Unix(), c.rd.Buffered() == 0)
	} else {
		s.topics.add(name, len(p.Payload), now.Unix())
	}
	var wait time.Duration
	if r := s.ruleFor(name); r != nil {
		code, d, err := c.admitRule(r, p)
		if code != packet.CodeSuccess || err != nil {
			return code, DropTopicRate, err
		}
		wait = d
	}
	l := c.info.Limiter
	if l == nil {
		throttle(wait, now)
		return packet.CodeSuccess, 0, nil
	}
	code, lwait := l.AdmitPublish(len(p.Payload), c.version)
	switch code {
	case packet.CodeSuccess:
		throttle(max(wait, lwait), now)
	case packet.ErrQuotaExceeded:
		return code, DropQuotaExceeded, nil
	default:
		return code, DropQuotaExceeded, code // disconnect with this reason
	}
	if p.Retain && s.overRetained(l, string(name), len(p.Payload)) {
		refund(l)
		return packet.ErrQuotaExceeded, DropQuotaExceeded, nil
	}
	return packet.CodeSuccess, 0, nil
}

// throttle pauses a connection's reads (an MQTT 3.1.1 publisher over a
// rate), at most maxThrottle at a time, and then reads the clock into now.
func throttle(wait time.Duration, now *time.Time) {
	if wait > 0 {
		time.Sleep(min(wait, maxThrottle))
		*now = time.Now()
	}
}

// tenantRetained counts the retained messages the tenant's clients own:
// all of them but the broker's own $SYS topics. Only a retained PUBLISH
// under a retained quota pays for the walk over $SYS.
func (s *Shard) tenantRetained() (msgs int, bytes int64) {
	msgs, bytes = s.retained.Len(), s.retained.Bytes()
	_ = s.retained.Match("$SYS/#", func(_ string, m *message) bool {
		msgs--
		bytes -= int64(m.size)
		return true
	})
	return msgs, bytes
}

// maxSubscriptions is the subscriptions-per-client quota in force.
func (c *conn) maxSubscriptions() int {
	if c.info.Limiter != nil {
		if n := c.info.Limiter.MaxSubscriptions(); n > 0 {
			return n
		}
	}
	return c.shard.opts.MaxSubscriptionsPerClient
}

// topicStats counts messages and bytes per published topic for the
// operator's live view, in stripes so concurrent publishers rarely share a
// lock. At most maxTrackedTopics topics are tracked; the rest are counted
// together.
type topicStats struct {
	stripes [16]topicStripe
	other   topicStat
}

const maxTrackedTopics = 10_000

type topicStripe struct {
	mu      sync.Mutex
	m       map[string]*topicStat
	lookups int // of m, under mu (tests: TestTopicCountedOncePerBurst)
}

type topicStat struct {
	msgs, bytes atomic.Uint64
	window      rateWindow
}

// rateWindow counts a topic's messages and bytes in the last rateSeconds
// seconds, one slot per second, so that its rates are a sliding window
// that readers only read. Each slot is one atomic word per meter: the
// second it counts (its low rateTagBits bits) above the count, so a
// publisher moves a slot to a new second and counts in it with a single
// compare-and-swap, without a lock or an allocation.
type rateWindow struct {
	msgs  [rateSeconds]atomic.Uint64
	bytes [rateSeconds]atomic.Uint64
}

const (
	// rateSeconds is the span of the live rates.
	rateSeconds = 10
	rateTagBits = 24 // the slot's second mod 2^24 (194 days)
	rateCount   = 1<<(64-rateTagBits) - 1
)

// add counts msgs messages of size bytes in all in second sec (Unix
// seconds).
func (w *rateWindow) add(sec int64, msgs, size uint64) {
	i := sec % rateSeconds
	addSlot(&w.msgs[i], sec, msgs)
	addSlot(&w.bytes[i], sec, size)
}

// rateTag is second sec as it is kept above a slot's count.
func rateTag(sec int64) uint64 {
	return (uint64(sec) & (1<<rateTagBits - 1)) << (64 - rateTagBits)
}

func addSlot(slot *atomic.Uint64, sec int64, n uint64) {
	tag := rateTag(sec)
	for {
		old := slot.Load()
		next := tag | min(n, rateCount)
		if old&^rateCount == tag {
			next = tag | min(old&rateCount+n, rateCount)
		}
		if slot.CompareAndSwap(old, next) {
			return
		}
	}
}

func loadSlot(slot *atomic.Uint64, sec int64) uint64 {
	if v := slot.Load(); v&^rateCount == rateTag(sec) {
		return v & rateCount
	}
	return 0
}

// rates returns the messages and bytes per second over the rateSeconds
// seconds ending with second now (the current, partial one included).
func (w *rateWindow) rates(now int64) (mps, bps float64) {
	var m, b uint64
	for sec := now - rateSeconds + 1; sec <= now; sec++ {
		i := sec % rateSeconds
		m += loadSlot(&w.msgs[i], sec)
		b += loadSlot(&w.bytes[i], sec)
	}
	return float64(m) / rateSeconds, float64(b) / rateSeconds
}

// add counts one message of size bytes published to name in second sec
// (Unix seconds): the caller's clock, read once per PUBLISH.
func (t *topicStats) add(name []byte, size int, sec int64) {
	st := t.stat(name)
	st.msgs.Add(1)
	st.bytes.Add(uint64(size))
	st.window.add(sec, 1, uint64(size))
}

// stat returns name's counters: its own, or the shared ones of the
// topics past maxTrackedTopics. A topicStat is never removed, so a
// reader may keep the pointer (topicTally).
func (t *topicStats) stat(name []byte) *topicStat {
	st := &t.other
	h := uint32(2166136261) // FNV-1a: picks a stripe, needs no seed
	for _, b := range name {
		h = (h ^ uint32(b)) * 16777619
	}
	stripe := &t.stripes[h%uint32(len(t.stripes))]
	stripe.mu.Lock()
	stripe.lookups++
	if x, ok := stripe.m[string(name)]; ok {
		st = x
	} else if len(stripe.m) < maxTrackedTopics/len(t.stripes) {
		if stripe.m == nil {
			stripe.m = make(map[string]*topicStat)
		}
		st = &topicStat{}
		stripe.m[string(name)] = st
	}
	stripe.mu.Unlock()
	return st
}

// TopicInfo is one topic's traffic as the admin API shows it.
type TopicInfo struct {
	Topic       string  `json:"topic"`
	Messages    uint64  `json:"messages"`
	Bytes       uint64  `json:"bytes"`
	MsgsPerSec  float64 `json:"msgs_per_sec"`
	BytesPerSec float64 `json:"bytes_per_sec"`
	Subscribers int     `json:"subscribers"`
}

// rates returns the topic's totals and its rates over the last
// rateSeconds seconds ending with second now. Reading changes nothing.
func (st *topicStat) rates(now int64) (msgs, bytes uint64, mps, bps float64) {
	mps, bps = st.window.rates(now)
	return st.msgs.Load(), st.bytes.Load(), mps, bps
}

// SetMaxPacketSize changes the largest packet accepted from a client
// (Options.MaxPacketSize) live: the next packet every connection reads is
// bounded by it, and later CONNACKs announce it. n <= 0 leaves it.
func (s *Shard) SetMaxPacketSize(n int) {
	if n > 0 {
		s.maxPacket.Store(int64(n))
	}
}

func (s *Shard) maxPacketSize() int { return int(s.maxPacket.Load()) }

// SetLimits changes the outbound inflight window cap (Options.MaxInflight)
// and the per-session queue bound in bytes (Options.MaxQueuedBytes) of the
// live shard; a value <= 0 leaves that limit as it is. Connected clients'
// windows follow at once, never above their own Receive Maximum
// [MQTT-3.3.4-9]; messages already inflight or queued beyond a lowered
// bound stay, and only new ones are held back or dropped.
func (s *Shard) SetLimits(maxInflight, maxQueuedBytes int) {
	if maxQueuedBytes > 0 {
		s.maxQueuedBytes.Store(int64(maxQueuedBytes))
	}
	if maxInflight <= 0 {
		return
	}
	maxInflight = min(maxInflight, 65535)
	s.maxInflight.Store(int64(maxInflight))
	s.mu.RLock() // attach sets sess.conn under s.mu: none is missed
	var wake []*conn
	for _, sess := range s.sessions {
		sess.mu.Lock()
		if c := sess.conn; c != nil {
			w := windowFor(c.recvMax, maxInflight)
			grew := w > c.window
			c.window = w
			if grew {
				wake = append(wake, c)
			}
		}
		sess.mu.Unlock()
	}
	s.mu.RUnlock()
	for _, c := range wake {
		c.wakeWriter() // a wider window lets queued messages go
	}
}

// Limits returns the live MaxInflight and MaxQueuedBytes (see SetLimits).
func (s *Shard) Limits() (maxInflight, maxQueuedBytes int) {
	return int(s.maxInflight.Load()), int(s.maxQueuedBytes.Load())
}
