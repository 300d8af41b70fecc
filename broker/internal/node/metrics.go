package node

import (
	"cmp"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"berth.dev/broker/internal/shard"
)

// metricsTopTenants is how many tenants get their own series in /metrics:
// the busiest open shards by messages in and out since they opened. Every
// other number is node-wide, so the node's series stay bounded whatever
// the number of tenants (and a tenant's label appears only while it is among
// the busiest).
const metricsTopTenants = 10

// nodeMetrics are the node's Prometheus metrics (GET /metrics on the admin
// listener, behind the node token). Counters are node-wide and monotonic:
// each shard's counters since the last scrape (or its close) are folded in,
// so a shard closing for idleness loses nothing and resets nothing.
type nodeMetrics struct {
	reg   *prometheus.Registry
	fsync prometheus.Histogram

	mu                                 sync.Mutex // guards the totals
	msgsIn, msgsOut, bytesIn, bytesOut uint64
	drops                              map[string]uint64
}

// metrics returns the node's metrics, made on first use.
func (n *Node) metrics() *nodeMetrics {
	n.metricsOnce.Do(func() {
		m := &nodeMetrics{reg: prometheus.NewRegistry(), drops: make(map[string]uint64)}
		m.fsync = prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "berth_node_wal_fsync_seconds",
			Help: "Time of each group-commit fsync of a tenant's write-ahead log (messages, retained, sessions).",
			// 50 µs to about 3.3 s.
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 17),
		})
		m.reg.MustRegister(m.fsync, &nodeCollector{n: n, m: m}, raftCollector{n: n}, // raftmetrics.go
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "berth_node_usage_flush_errors_total",
				Help: "Usage flushes that failed (their deltas are kept and retried).",
			}, func() float64 {
				if n.flusher == nil {
					return 0
				}
				return float64(n.flusher.Errors())
			}))
		n.metricsState = m
	})
	return n.metricsState
}

// observeFsync records one fsync's time (store.WALOptions.OnFsync).
func (m *nodeMetrics) observeFsync(d time.Duration) { m.fsync.Observe(d.Seconds()) }

// fold adds the tenant's shard counters since the last fold to the node's
// totals and returns the shard's stats. It is called at every scrape and
// once more when the shard has closed.
func (n *Node) fold(t *tenant) shard.Stats {
	m := n.metrics()
	s := t.sh.Stats()
	t.mu.Lock()
	last := t.metricsLast
	t.metricsLast = s
	t.mu.Unlock()
	m.mu.Lock()
	m.msgsIn += s.MessagesIn - last.MessagesIn
	m.msgsOut += s.MessagesOut - last.MessagesOut
	m.bytesIn += s.BytesIn - last.BytesIn
	m.bytesOut += s.BytesOut - last.BytesOut
	for reason, v := range s.Dropped {
		m.drops[reason] += v - last.Dropped[reason]
	}
	m.mu.Unlock()
	return s
}

// metricsHandler serves the registry in the Prometheus text format.
func (n *Node) metricsHandler() http.Handler {
	return promhttp.HandlerFor(n.metrics().reg, promhttp.HandlerOpts{})
}

var (
	descConnections = prometheus.NewDesc("berth_node_connections", "Open MQTT connections on the node, all tenants.", nil, nil)
	descShards      = prometheus.NewDesc("berth_node_open_shards", "Tenant shards open on the node.", nil, nil)
	descMsgsIn      = prometheus.NewDesc("berth_node_messages_in_total", "PUBLISH packets read from clients (and HTTP publishes), all tenants.", nil, nil)
	descMsgsOut     = prometheus.NewDesc("berth_node_messages_out_total", "PUBLISH packets written to clients, all tenants.", nil, nil)
	descBytesIn     = prometheus.NewDesc("berth_node_bytes_in_total", "Bytes of MQTT packets read from clients (and HTTP publish payloads), all tenants.", nil, nil)
	descBytesOut    = prometheus.NewDesc("berth_node_bytes_out_total", "Bytes of MQTT packets written to clients, all tenants.", nil, nil)
	descDrops       = prometheus.NewDesc("berth_node_drops_total", "Undelivered or refused message copies by reason, all tenants.", []string{"reason"}, nil)
	descTenantIn    = prometheus.NewDesc("berth_tenant_messages_in_total", "Messages in of the busiest open tenant shards, since each opened on this node.", []string{"tenant_id"}, nil)
	descTenantOut   = prometheus.NewDesc("berth_tenant_messages_out_total", "Messages out of the busiest open tenant shards, since each opened on this node.", []string{"tenant_id"}, nil)
	descTenantConns = prometheus.NewDesc("berth_tenant_connections", "Open connections of the busiest open tenant shards.", []string{"tenant_id"}, nil)
)

// nodeCollector reads the shards at scrape time.
type nodeCollector struct {
	n *Node
	m *nodeMetrics
}

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descConnections, descShards, descMsgsIn, descMsgsOut, descBytesIn, descBytesOut, descDrops, descTenantIn, descTenantOut, descTenantConns} {
		ch <- d
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	n.mu.Lock()
	ts := make([]*tenant, 0, len(n.tenants))
	for _, t := range n.tenants {
		ts = append(ts, t)
	}
	n.mu.Unlock()
	type busy struct {
		id string
		s  shard.Stats
	}
	all := make([]busy, len(ts))
	var conns int64
	for i, t := range ts {
		s := n.fold(t)
		all[i] = busy{t.id, s}
		conns += s.ClientsConnected
	}
	ch <- prometheus.MustNewConstMetric(descConnections, prometheus.GaugeValue, float64(conns))
	ch <- prometheus.MustNewConstMetric(descShards, prometheus.GaugeValue, float64(len(ts)))
	c.m.mu.Lock()
	ch <- prometheus.MustNewConstMetric(descMsgsIn, prometheus.CounterValue, float64(c.m.msgsIn))
	ch <- prometheus.MustNewConstMetric(descMsgsOut, prometheus.CounterValue, float64(c.m.msgsOut))
	ch <- prometheus.MustNewConstMetric(descBytesIn, prometheus.CounterValue, float64(c.m.bytesIn))
	ch <- prometheus.MustNewConstMetric(descBytesOut, prometheus.CounterValue, float64(c.m.bytesOut))
	for reason, v := range c.m.drops {
		ch <- prometheus.MustNewConstMetric(descDrops, prometheus.CounterValue, float64(v), reason)
	}
	c.m.mu.Unlock()
	slices.SortFunc(all, func(a, b busy) int {
		return cmp.Or(cmp.Compare(b.s.MessagesIn+b.s.MessagesOut, a.s.MessagesIn+a.s.MessagesOut), cmp.Compare(a.id, b.id))
	})
	for _, b := range all[:min(len(all), metricsTopTenants)] {
		ch <- prometheus.MustNewConstMetric(descTenantIn, prometheus.CounterValue, float64(b.s.MessagesIn), b.id)
		ch <- prometheus.MustNewConstMetric(descTenantOut, prometheus.CounterValue, float64(b.s.MessagesOut), b.id)
		ch <- prometheus.MustNewConstMetric(descTenantConns, prometheus.GaugeValue, float64(b.s.ClientsConnected), b.id)
	}
}
