package node

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"berth.dev/broker/internal/quota"
	"berth.dev/broker/packet"
	"berth.dev/quotas"
)

// tenantLimits are a tenant's live quotas as the publish path reads them:
// tenant-wide token buckets and atomics, changed in place by a NOTIFY.
type tenantLimits struct {
	msgs, bytes *quota.Bucket // tenant-wide rates
	clientMsgs  atomic.Int64  // per-client rates, read when a connection starts and on change
	clientBytes atomic.Int64
	maxMsgSize  atomic.Int64
	maxSubs     atomic.Int64
	maxRetained atomic.Int64
	maxRetBytes atomic.Int64
	monthly     atomic.Int64 // monthly messages quota
	maxConns    atomic.Int64 // max_connections, enforced per node (admitConn)
	monthUsed   atomic.Int64 // messages in this calendar month, Postgres's count plus this node's since
	monthEnd    atomic.Int64 // when monthUsed's month ends (UTC), Unix nanoseconds
	now         func() time.Time
	clientsMu   sync.Mutex
	clients     map[*connLimiter]struct{}
}

// newTenantLimits starts the limits with monthUsed messages already used
// in the current calendar month (UTC).
func newTenantLimits(q quotas.Quotas, monthUsed int64) *tenantLimits {
	return newTenantLimitsClock(q, monthUsed, time.Now)
}

// newTenantLimitsClock is newTenantLimits on the clock now.
func newTenantLimitsClock(q quotas.Quotas, monthUsed int64, now func() time.Time) *tenantLimits {
	l := &tenantLimits{
		msgs:    quota.NewBucket(float64(q.MaxMsgsPerSec), float64(q.MaxMsgsPerSec)),
		bytes:   quota.NewBucket(float64(q.MaxBytesPerSec), float64(q.MaxBytesPerSec)),
		clients: make(map[*connLimiter]struct{}),
		now:     now,
	}
	l.monthUsed.Store(monthUsed)
	l.monthEnd.Store(nextMonth(now()).UnixNano())
	l.set(q)
	return l
}

// nextMonth is the first instant of the calendar month (UTC) after t's.
func nextMonth(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
}

// rollMonth starts the count of a new calendar month once now has passed
// the end of the counted one. A message admitted by another connection
// at the very instant of the roll may count in the month it left.
func (t *tenantLimits) rollMonth(now time.Time) {
	end := t.monthEnd.Load()
	if now.UnixNano() < end {
		return
	}
	if t.monthEnd.CompareAndSwap(end, nextMonth(now).UnixNano()) {
		t.monthUsed.Store(0)
	}
}

// set applies new quotas; live connections' buckets follow.
func (l *tenantLimits) set(q quotas.Quotas) {
	l.msgs.SetRate(float64(q.MaxMsgsPerSec), float64(q.MaxMsgsPerSec))
	l.bytes.SetRate(float64(q.MaxBytesPerSec), float64(q.MaxBytesPerSec))
	l.clientMsgs.Store(q.ClientMsgsPerSec)
	l.clientBytes.Store(q.ClientBytesPerSec)
	l.maxMsgSize.Store(q.MaxMessageSize)
	l.maxSubs.Store(q.MaxSubscriptions)
	l.maxRetained.Store(q.MaxRetainedMessages)
	l.maxRetBytes.Store(q.MaxRetainedBytes)
	l.monthly.Store(q.MonthlyMessages)
	l.maxConns.Store(q.MaxConnections)
	l.clientsMu.Lock()
	for c := range l.clients {
		c.msgs.SetRate(float64(q.ClientMsgsPerSec), float64(q.ClientMsgsPerSec))
		c.bytes.SetRate(float64(q.ClientBytesPerSec), float64(q.ClientBytesPerSec))
	}
	l.clientsMu.Unlock()
}

// connLimiter is one connection's view: its own per-client buckets plus
// the tenant's. It implements shard.Limiter.
type connLimiter struct {
	tenantAdmission
	msgs, bytes *quota.Bucket
	// Refusals in the current one-second window; past abuseThreshold the
	// connection is disconnected (0x96).
	window  int64
	refused int
}

// tenantAdmission is what a device connection and an HTTP publish admit
// alike against the tenant: the retained caps, the message size, and a
// will due after its connection ended (the tenant-wide admission, safe on
// any goroutine: it touches only the tenant's buckets and atomics).
type tenantAdmission struct{ t *tenantLimits }

// MaxRetained implements shard.Limiter.
func (a tenantAdmission) MaxRetained() (int, int64) {
	return int(a.t.maxRetained.Load()), a.t.maxRetBytes.Load()
}

// MaxMessageSize implements shard.Limiter.
func (a tenantAdmission) MaxMessageSize() int64 { return a.t.maxMsgSize.Load() }

// AdmitWill implements shard.Limiter.
func (a tenantAdmission) AdmitWill(size int) packet.ReasonCode {
	code, _ := a.t.admitTenant(size)
	return code
}

// Refund implements the shard's refunder: a message admitted and then
// refused by the shard (over the retained quota, a payload not in its
// format, a failed log append) gives its count in the monthly quota back,
// so that the quota counts the messages accepted, as billing does.
func (a tenantAdmission) Refund() { a.t.monthUsed.Add(-1) }

// abuseThreshold is how many refusals within one second count as
// sustained abuse: a client ignoring 0x97 rather than backing off.
const abuseThreshold = 100

func (t *tenantLimits) newConn() *connLimiter {
	c := &connLimiter{
		tenantAdmission: tenantAdmission{t},
		msgs:            quota.NewBucket(float64(t.clientMsgs.Load()), float64(t.clientMsgs.Load())),
		bytes:           quota.NewBucket(float64(t.clientBytes.Load()), float64(t.clientBytes.Load())),
	}
	t.clientsMu.Lock()
	t.clients[c] = struct{}{}
	t.clientsMu.Unlock()
	return c
}

// admitConn is newConn for a device connection, or nil when the tenant
// already has max_connections live connections on this node. The gateways
// enforce the quota globally in Redis; this is the backstop they rely on
// when Redis is unreachable and they admit without it (fail-open,
// gateway/internal/connlimit), so the limit still holds per node. A lower
// quota closes nobody: only new connections are refused.
func (t *tenantLimits) admitConn() *connLimiter {
	c := &connLimiter{
		tenantAdmission: tenantAdmission{t},
		msgs:            quota.NewBucket(float64(t.clientMsgs.Load()), float64(t.clientMsgs.Load())),
		bytes:           quota.NewBucket(float64(t.clientBytes.Load()), float64(t.clientBytes.Load())),
	}
	t.clientsMu.Lock()
	defer t.clientsMu.Unlock()
	if max := t.maxConns.Load(); max > 0 && int64(len(t.clients)) >= max {
		return nil
	}
	t.clients[c] = struct{}{}
	return c
}

func (c *connLimiter) close() {
	c.t.clientsMu.Lock()
	delete(c.t.clients, c)
	c.t.clientsMu.Unlock()
}

// AdmitPublish implements shard.Limiter. It is called on the connection's
// reader goroutine only, so the abuse window needs no lock.
func (c *connLimiter) AdmitPublish(size int, version byte) (packet.ReasonCode, time.Duration) {
	t := c.t
	if max := t.maxMsgSize.Load(); max > 0 && int64(size) > max {
		return packet.ErrPacketTooLarge, 0 // [MQTT-3.2.2-15]-style: a packet over the announced size
	}
	now := t.now()
	t.rollMonth(now)
	if t.monthUsed.Load() >= t.monthly.Load() {
		return c.refuse(now)
	}
	n := float64(size)
	if version != packet.Version5 {
		// 3.1.1 has no way to refuse a PUBLISH: throttle the reader instead.
		var wait time.Duration
		for _, b := range [...]struct {
			b *quota.Bucket
			n float64
		}{{c.msgs, 1}, {c.bytes, n}, {t.msgs, 1}, {t.bytes, n}} {
			d, ok := b.b.Reserve(now, b.n)
			if !ok {
				d = time.Second
			}
			wait = max(wait, d)
		}
		t.monthUsed.Add(1)
		return packet.CodeSuccess, wait
	}
	if !c.msgs.Take(now, 1) || !c.bytes.Take(now, n) || !t.msgs.Take(now, 1) || !t.bytes.Take(now, n) {
		return c.refuse(now)
	}
	t.monthUsed.Add(1)
	return packet.CodeSuccess, 0
}

func (c *connLimiter) refuse(now time.Time) (packet.ReasonCode, time.Duration) {
	if sec := now.Unix(); sec != c.window {
		c.window, c.refused = sec, 0
	}
	c.refused++
	if c.refused > abuseThreshold {
		return packet.ErrMessageRateTooHigh, 0
	}
	return packet.ErrQuotaExceeded, 0
}

// MaxSubscriptions implements shard.Limiter.
func (c *connLimiter) MaxSubscriptions() int { return int(c.t.maxSubs.Load()) }

// httpLimiter admits one HTTP publish (POST /publish) as a device's
// PUBLISH is admitted: size, the monthly messages quota and the
// tenant-wide rates (the API is no client, so no per-client rate), then
// the shard's retained caps through MaxRetained. It says why it refused.
// It implements shard.Limiter.
type httpLimiter struct {
	tenantAdmission
	quota   string // "size", "monthly" or "rate" after a refusal
	refusal string // the refusal, for the API's problem detail
}

// AdmitPublish implements shard.Limiter.
func (h *httpLimiter) AdmitPublish(size int, _ byte) (packet.ReasonCode, time.Duration) {
	t := h.t
	code, quota := t.admitTenant(size)
	switch quota {
	case "size":
		h.refusal = fmt.Sprintf("the payload is %d bytes, over the tenant's message size quota of %d bytes", size, t.maxMsgSize.Load())
	case "monthly":
		h.refusal = fmt.Sprintf("the tenant's monthly messages quota (%d) is used up until %s",
			t.monthly.Load(), time.Unix(0, t.monthEnd.Load()).UTC().Format(time.RFC3339))
	case "rate":
		h.refusal = "over the tenant's message rate quota (max_msgs_per_sec or max_bytes_per_sec); retry in a second"
	}
	h.quota = quota
	return code, 0
}

// admitTenant is the tenant-wide admission of one message that no
// connection reads (HTTP publish, a will when it is due): size, the
// monthly messages quota, the tenant's message and byte rates, never
// throttled. On success the message counts against the monthly quota;
// otherwise quota names the refusal: "size", "monthly" or "rate".
func (t *tenantLimits) admitTenant(size int) (code packet.ReasonCode, quota string) {
	if max := t.maxMsgSize.Load(); max > 0 && int64(size) > max {
		return packet.ErrPacketTooLarge, "size"
	}
	now := t.now()
	t.rollMonth(now)
	if t.monthUsed.Load() >= t.monthly.Load() {
		return packet.ErrQuotaExceeded, "monthly"
	}
	if !t.msgs.Take(now, 1) || !t.bytes.Take(now, float64(size)) {
		return packet.ErrQuotaExceeded, "rate"
	}
	t.monthUsed.Add(1)
	return packet.CodeSuccess, ""
}

// MaxSubscriptions implements shard.Limiter.
func (h *httpLimiter) MaxSubscriptions() int { return 0 }
