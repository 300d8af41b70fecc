package gateway

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the gateway's Prometheus series. tenant_id is empty for
// refusals before the tenant is known (rate limits, malformed CONNECTs,
// bad tokens), so label cardinality grows only with authenticated tenants.
type metrics struct {
	connects    *prometheus.CounterVec   // tenant_id, transport (tcp, tls, ws, wss)
	refusals    *prometheus.CounterVec   // tenant_id, reason
	latency     *prometheus.HistogramVec // tenant_id: accept to CONNECT forwarded
	rateLimited *prometheus.CounterVec   // scope: ip, cooldown, global, pending, proxy_header
	cooldowns   prometheus.Counter       // sources put in cool-down (cooldown.go)
	active      prometheus.Gauge
	pending     prometheus.Gauge // unauthenticated connections (pendingIPs)
	revoked     prometheus.Counter
	handoffs    *prometheus.CounterVec // result: taken, a refusal's reason, no_answer, node_gone
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		connects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berth_gateway_connects_total", Help: "Connections authenticated, admitted and relayed to a node.",
		}, []string{"tenant_id", "transport"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berth_gateway_refusals_total", Help: "CONNECTs refused, by reason.",
		}, []string{"tenant_id", "reason"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "berth_gateway_connect_duration_seconds",
			Help:    "From accept to the CONNECT forwarded to the node (TLS, read, auth, limit, route, dial).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"tenant_id"}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berth_gateway_rate_limited_total",
			Help: "Connections closed at accept: by a rate limit (scope ip, global), a source's cool-down (scope cooldown), the cap of pending connections per source (scope pending) or the cap of balancer connections waiting for their PROXY header (scope proxy_header).",
		}, []string{"scope"}),
		cooldowns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berth_gateway_flood_cooldowns_total",
			Help: "Sources refused for -flood-cooldown because their CONNECTs kept failing (bad token, malformed, timeout) over a quarter of their per-IP rate and burst.",
		}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "berth_gateway_active_connections", Help: "Connections being served (handshaking or relayed).",
		}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "berth_gateway_pending_connections", Help: "Connections accepted whose CONNECT is not yet verified and relayed.",
		}),
		revoked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berth_gateway_revoked_disconnects_total", Help: "Live connections closed because their credential was revoked.",
		}),
	}
	m.handoffs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_gateway_handoffs_total",
		Help: "Device sockets offered to a node on this host (-handoff-dir), by result: taken, the node's refusal (not-leader, bad-header, ...; relayed over TCP instead), no_answer, node_gone.",
	}, []string{"result"})
	reg.MustRegister(m.connects, m.refusals, m.latency, m.rateLimited, m.cooldowns, m.active, m.pending, m.revoked, m.handoffs)
	return m
}
