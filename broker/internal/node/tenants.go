package node

import (
	"net"
	"sync"
	"time"

	"berth.dev/broker/internal/msgtrace"
	"berth.dev/broker/internal/shard"
	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/usage"
	"berth.dev/broker/packet"
	"berth.dev/quotas"
)

// tenant is one tenant's shard on this node and what the node tracks of it.
type tenant struct {
	id     string
	sh     *shard.Shard
	usage  *usage.Counters
	limits *tenantLimits
	traces *msgtrace.Sampler // its rate follows the tenant's trace_sample_rate
	store  *store.WAL        // nil without a data directory; closed after the shard
	shared *store.WAL        // replicated: the group's store, which outlives the shard (replication.go)

	// Guarded by Node.mu: holders (connections being served, admin calls)
	// and since when there have been none; drained, when set, is closed
	// when the last holder goes (a deletion waits for it).
	refs      int
	idleSince time.Time
	drained   chan struct{}

	mu   sync.Mutex
	last shard.Stats // counters already folded into usage
	// metricsLast are the counters already folded into the node's
	// Prometheus totals (Node.fold).
	metricsLast shard.Stats
	// Live connections by credential id, each with its traffic meters
	// (shard.ConnInfo.Traffic): one block per connection, so connections
	// of a credential never contend for a cache line; sample sums them per
	// credential. ended holds the traffic of connections that ended since.
	conns map[string]map[net.Conn]*shard.Traffic
	ended map[string]usage.Traffic
	// Connection time since the shard opened (the admin /usage): live
	// connections, since when that number holds, and the time before.
	live      int64
	liveSince time.Time
	connTime  time.Duration
}

// packetHeadroom is what a PUBLISH carries besides its payload, at most:
// the fixed header, a topic of up to 65535 bytes and its properties.
const packetHeadroom = 64 << 10

// maxPacketSize is the largest packet the tenant's shard reads: the message
// size quota is on the payload (the limiter enforces it exactly, with
// 0x95), so the packet bound leaves room for the rest of a PUBLISH.
func maxPacketSize(q quotas.Quotas) int { return int(q.MaxMessageSize) + packetHeadroom }

// shardOptions maps a tenant's quotas onto its shard's limits.
func shardOptions(q quotas.Quotas, n *Node, tenantID string) shard.Options {
	maxSessions, maxExpiry := sessionCaps(q)
	o := shard.Options{
		Logger:                    n.log.With("tenant_id", tenantID),
		MaxPacketSize:             maxPacketSize(q),
		MaxInflight:               int(q.MaxInflight),
		MaxQueuedBytes:            int(q.MaxQueuedBytes),
		MaxSubscriptionsPerClient: int(q.MaxSubscriptions),
		MaxSessions:               maxSessions,
		MaxSessionExpiry:          maxExpiry,
		// The storage-retention quota is how far back berth-replay-from
		// may reach in the tenant's message log.
		ReplayHistory: time.Duration(q.RetentionSeconds) * time.Second,
		// The storage-retention quotas also bound the log whatever offline
		// sessions still need: older or excess segments go and their
		// pending messages count as "retention" drops.
		Retention: retention(q),
		// Every tenant may watch its dropped QoS 1/2 messages under
		// $berth/dlq/<reason>.
		DeadLetters: true,
	}
	if n.poller != nil {
		o.Poller = n.poller // idle connections park (docs/idle-connections.md)
	}
	return o
}

// retention is the message-log retention of a tenant's quotas.
func retention(q quotas.Quotas) shard.Retention {
	return shard.Retention{Bytes: q.RetentionBytes, Age: time.Duration(q.RetentionSeconds) * time.Second}
}

// Bounds of a tenant's message-log segment size (see segmentBytes).
const (
	minSegmentBytes = 16 << 10
	maxSegmentBytes = 64 << 20 // the wal default
)

// segmentBytes sizes a tenant's message-log segments from its
// retention_bytes quota (when the shard opens): retention deletes whole
// segments, so a segment is an eighth of the quota and the log keeps most
// of what the tenant pays for, not one active segment.
func segmentBytes(retentionBytes int64) int64 {
	if retentionBytes <= 0 {
		return maxSegmentBytes
	}
	return min(max(retentionBytes/8, minSegmentBytes), maxSegmentBytes)
}

// release drops a hold taken by tenant.
func (n *Node) release(t *tenant) {
	n.mu.Lock()
	t.refs--
	if t.refs == 0 {
		t.idleSince = time.Now()
		if t.drained != nil {
			close(t.drained)
			t.drained = nil
		}
	}
	n.mu.Unlock()
}

// track records a live connection of credential cred and returns the
// meters its shard connection counts into.
func (t *tenant) track(cred string, c net.Conn) *shard.Traffic {
	tr := new(shard.Traffic)
	t.mu.Lock()
	m := t.conns[cred]
	if m == nil {
		m = make(map[net.Conn]*shard.Traffic)
		t.conns[cred] = m
	}
	m[c] = tr
	now := time.Now()
	t.accrueLocked(now)
	t.live++
	t.mu.Unlock()
	t.usage.Connected(now)
	return tr
}

func (t *tenant) untrack(cred string, c net.Conn) {
	t.mu.Lock()
	if tr := t.conns[cred][c]; tr != nil {
		if t.ended == nil {
			t.ended = make(map[string]usage.Traffic)
		}
		t.ended[cred] = addTraffic(t.ended[cred], tr)
	}
	delete(t.conns[cred], c)
	if len(t.conns[cred]) == 0 {
		delete(t.conns, cred)
	}
	now := time.Now()
	t.accrueLocked(now)
	t.live--
	t.mu.Unlock()
	t.usage.Disconnected(now)
}

func (t *tenant) accrueLocked(now time.Time) {
	if !t.liveSince.IsZero() && now.After(t.liveSince) {
		t.connTime += time.Duration(t.live) * now.Sub(t.liveSince)
	}
	t.liveSince = now
}

// connectionTime is the time of the tenant's connections on this node,
// summed over connections, since its shard opened.
func (t *tenant) connectionTime(now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.accrueLocked(now)
	return t.connTime
}

// storedBytes is the size of the tenant's logs on this node's disk (0
// without a data directory).
func (t *tenant) storedBytes() int64 {
	switch {
	case t.store != nil:
		return t.store.Size()
	case t.shared != nil:
		return t.shared.Size()
	}
	return 0
}

// closeCredential ends every live connection of a revoked credential (MQTT
// 5: DISCONNECT 0x87 not authorized, then close; 3.1.1: close) and reports
// how many there were.
func (t *tenant) closeCredential(cred string) int {
	t.mu.Lock()
	var cs []net.Conn
	for c := range t.conns[cred] {
		cs = append(cs, c)
	}
	t.mu.Unlock()
	for _, c := range cs {
		if !t.sh.End(c, packet.ErrNotAuthorized) {
			c.Close() // not (or no longer) served by the shard
		}
	}
	return len(cs)
}

// sample folds the shard's counters since the last sample into usage.
func (t *tenant) sample() {
	s := t.sh.Stats()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.usage.MessagesIn.Add(int64(s.MessagesIn - t.last.MessagesIn))
	t.usage.MessagesAccepted.Add(int64(s.MessagesAccepted - t.last.MessagesAccepted))
	t.usage.MessagesOut.Add(int64(s.MessagesOut - t.last.MessagesOut))
	t.usage.BytesIn.Add(int64(s.BytesIn - t.last.BytesIn))
	t.usage.BytesOut.Add(int64(s.BytesOut - t.last.BytesOut))
	for reason, v := range s.Dropped {
		t.usage.AddDrops(reason, int64(v-t.last.Dropped[reason]))
	}
	t.last = s
	t.usage.StoredBytes.Store(t.storedBytes()) // a gauge, read at every flush
	for cred, m := range t.conns {
		sum := t.ended[cred]
		for _, tr := range m {
			sum = addTraffic(sum, tr)
		}
		t.usage.AddCredential(cred, sum)
	}
	for cred, sum := range t.ended {
		if t.conns[cred] == nil {
			t.usage.AddCredential(cred, sum)
		}
	}
	t.ended = nil
}

// addTraffic drains tr's counters into sum.
func addTraffic(sum usage.Traffic, tr *shard.Traffic) usage.Traffic {
	sum.MessagesIn += int64(tr.MessagesIn.Swap(0))
	sum.MessagesOut += int64(tr.MessagesOut.Swap(0))
	sum.BytesIn += int64(tr.BytesIn.Swap(0))
	sum.BytesOut += int64(tr.BytesOut.Swap(0))
	return sum
}

// sampleAll brings every tenant's usage up to date.
func (n *Node) sampleAll() {
	n.mu.Lock()
	ts := make([]*tenant, 0, len(n.tenants))
	for _, t := range n.tenants {
		ts = append(ts, t)
	}
	n.mu.Unlock()
	for _, t := range ts {
		t.sample()
	}
}

// lookup returns an open tenant without opening it.
func (n *Node) lookup(id string) (*tenant, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	t, ok := n.tenants[id]
	return t, ok
}
