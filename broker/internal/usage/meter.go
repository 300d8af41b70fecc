// Package usage meters what each tenant does on a node (messages and bytes
// in and out, messages accepted, connection-seconds, stored bytes, drops by
// reason; messages and bytes per credential too) and flushes it to
// Postgres.
//
// Counting is a handful of atomic adds on a per-tenant Counters that the
// shard holds a pointer to, so the publish path neither locks nor allocates.
// Flushing is idempotent: every flush is a batch tagged (node id, sequence)
// and recorded in usage_flushes in the same transaction as its deltas, so a
// retry after a timeout whose commit did in fact land counts nothing twice.
// A batch that fails stays pending and is retried, unchanged, before any new
// deltas are taken; a crash loses at most the deltas since the last flush.
package usage

import (
	"sync"
	"sync/atomic"
	"time"
)

// Counters are one tenant's running totals since the last flush.
type Counters struct {
	MessagesIn atomic.Int64 // PUBLISH packets read, refused ones too
	// MessagesAccepted are the messages of MessagesIn the node accepted:
	// what the monthly messages quota counts and billing bills.
	MessagesAccepted atomic.Int64
	MessagesOut      atomic.Int64
	BytesIn          atomic.Int64
	BytesOut         atomic.Int64
	// StoredBytes is a gauge (the tenant's log size), not a delta.
	StoredBytes atomic.Int64
	// Latency is every message's and connection's latency (latency.go).
	Latency Latency

	// Drops by reason, and connection time integrated over changes in the
	// number of live connections: both are rare next to publishes.
	mu        sync.Mutex
	drops     map[string]int64
	creds     map[string]Traffic // by credential id, since the last flush
	conns     int64
	since     time.Time
	connNanos int64
}

// AddDrops counts n messages dropped for reason (a stable snake_case name
// such as "queue_full" or "rate_limited").
func (c *Counters) AddDrops(reason string, n int64) {
	if n == 0 {
		return
	}
	c.mu.Lock()
	if c.drops == nil {
		c.drops = make(map[string]int64)
	}
	c.drops[reason] += n
	c.mu.Unlock()
}

// Traffic is what the connections of one credential read and wrote: the
// tenant's meters of the same names, restricted to those connections.
type Traffic struct {
	MessagesIn  int64
	MessagesOut int64
	BytesIn     int64
	BytesOut    int64
}

func (t Traffic) zero() bool {
	return t.MessagesIn == 0 && t.MessagesOut == 0 && t.BytesIn == 0 && t.BytesOut == 0
}

// AddCredential adds tr to the credential's traffic since the last flush.
// A node calls it when it folds its connections' counters in (once per
// credential per flush), never per message.
func (c *Counters) AddCredential(credentialID string, tr Traffic) {
	if tr.zero() {
		return
	}
	c.mu.Lock()
	if c.creds == nil {
		c.creds = make(map[string]Traffic)
	}
	t := c.creds[credentialID]
	t.MessagesIn += tr.MessagesIn
	t.MessagesOut += tr.MessagesOut
	t.BytesIn += tr.BytesIn
	t.BytesOut += tr.BytesOut
	c.creds[credentialID] = t
	c.mu.Unlock()
}

// Connected records a connection opening at now.
func (c *Counters) Connected(now time.Time) { c.adjustConns(now, 1) }

// Disconnected records a connection closing at now.
func (c *Counters) Disconnected(now time.Time) { c.adjustConns(now, -1) }

func (c *Counters) adjustConns(now time.Time, d int64) {
	c.mu.Lock()
	c.accrueLocked(now)
	c.conns += d
	c.mu.Unlock()
}

func (c *Counters) accrueLocked(now time.Time) {
	if !c.since.IsZero() && now.After(c.since) {
		c.connNanos += c.conns * int64(now.Sub(c.since))
	}
	c.since = now
}

// Connections is the number of live connections.
func (c *Counters) Connections() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conns
}

// Delta is what a tenant did between two flushes.
type Delta struct {
	TenantID         string
	MessagesIn       int64
	MessagesAccepted int64
	MessagesOut      int64
	BytesIn          int64
	BytesOut         int64
	// ConnectionNanos is connection time; rows store whole seconds, the
	// remainder carries over to the next flush.
	ConnectionNanos int64
	StoredBytes     int64
	Drops           map[string]int64
	Latency         []LatencyDelta     // non-empty histograms only
	Credentials     map[string]Traffic // by credential id, non-zero only
}

func (d Delta) empty() bool {
	return d.MessagesIn == 0 && d.MessagesAccepted == 0 && d.MessagesOut == 0 && d.BytesIn == 0 && d.BytesOut == 0 &&
		d.ConnectionNanos < int64(time.Second) && len(d.Drops) == 0 && len(d.Latency) == 0 &&
		len(d.Credentials) == 0
}

// take moves the counters' totals into a Delta, leaving them at zero (the
// stored-bytes gauge is read, not reset). Connection time is reported in
// whole seconds, the rest carried over; the final take of a retired
// tenant rounds the rest to the nearest second instead.
func (c *Counters) take(id string, now time.Time, final bool) Delta {
	d := Delta{
		TenantID:         id,
		MessagesIn:       c.MessagesIn.Swap(0),
		MessagesAccepted: c.MessagesAccepted.Swap(0),
		MessagesOut:      c.MessagesOut.Swap(0),
		BytesIn:          c.BytesIn.Swap(0),
		BytesOut:         c.BytesOut.Swap(0),
		StoredBytes:      c.StoredBytes.Load(),
		Latency:          c.Latency.take(),
	}
	c.mu.Lock()
	if len(c.drops) > 0 {
		d.Drops, c.drops = c.drops, nil
	}
	if len(c.creds) > 0 {
		d.Credentials, c.creds = c.creds, nil
	}
	c.accrueLocked(now)
	whole := c.connNanos / int64(time.Second) * int64(time.Second)
	if final && c.connNanos-whole >= int64(time.Second/2) {
		whole += int64(time.Second)
		c.connNanos = whole
	}
	d.ConnectionNanos = whole
	c.connNanos -= whole
	c.mu.Unlock()
	return d
}

// Meter holds the Counters of every tenant on a node.
type Meter struct {
	mu      sync.Mutex
	tenants map[string]*Counters
	retired map[string]bool // forgotten at the next take
}

// NewMeter returns an empty meter.
func NewMeter() *Meter {
	return &Meter{tenants: make(map[string]*Counters), retired: make(map[string]bool)}
}

// Retire forgets a tenant that is gone (deleted) once what it counted is
// taken: the next flush reports its last deltas, with a stored-bytes level
// of zero (its logs are erased), and then drops its counters. Call it
// after nothing counts into them any more.
func (m *Meter) Retire(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.tenants[id]; ok {
		c.StoredBytes.Store(0)
		m.retired[id] = true
	}
}

// Tenant returns the tenant's counters, creating them on first use. Callers
// keep the pointer; the hot path never looks it up again.
func (m *Meter) Tenant(id string) *Counters {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.tenants[id]
	if !ok {
		c = new(Counters)
		m.tenants[id] = c
	}
	return c
}

// take drains every tenant's counters into deltas, skipping tenants with
// nothing to report.
func (m *Meter) take(now time.Time) []Delta {
	m.mu.Lock()
	ids := make([]string, 0, len(m.tenants))
	cs := make([]*Counters, 0, len(m.tenants))
	var final []string // retired: their last take
	for id, c := range m.tenants {
		if m.retired[id] {
			final = append(final, id)
			continue
		}
		ids = append(ids, id)
		cs = append(cs, c)
	}
	finalCs := make([]*Counters, len(final))
	for i, id := range final {
		finalCs[i] = m.tenants[id]
	}
	m.mu.Unlock()
	var out []Delta
	add := func(d Delta) {
		if !d.empty() || d.StoredBytes != 0 {
			out = append(out, d)
		}
	}
	for i, c := range cs {
		add(c.take(ids[i], now, false))
	}
	for i, c := range finalCs {
		add(c.take(final[i], now, true))
	}
	if len(final) > 0 {
		m.mu.Lock()
		for _, id := range final {
			delete(m.tenants, id)
			delete(m.retired, id)
		}
		m.mu.Unlock()
	}
	return out
}
