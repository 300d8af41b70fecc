package gateway

import (
	"log/slog"
	"net"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/gateway/internal/synfilter"
)

// loadSYNFilter loads the kernel SYN filter (package synfilter) at the
// per-IP limiter's rate and burst when cfg wants it, and says in the
// startup log whether it is on and, if not, why. nil when off: behind a
// load balancer every source is the balancer, and without CAP_BPF (or an
// old kernel) it cannot load; the userspace limiters work either way.
func loadSYNFilter(cfg *Config, log *slog.Logger) *synfilter.Filter {
	switch {
	case !cfg.SYNFilter:
		log.Info("syn filter off", "reason", "-syn-filter=false")
		return nil
	case cfg.BehindLoadBalancer:
		log.Info("syn filter off", "reason", "-behind-load-balancer: every source is the balancer")
		return nil
	case cfg.ProxyProtocolFrom != "":
		log.Info("syn filter off", "reason", "-proxy-protocol-from: the balancer sends every SYN; the per-IP limits count devices by their PROXY headers")
		return nil
	}
	f, err := synfilter.New(cfg.PerIPRate, cfg.PerIPBurst)
	if err != nil {
		log.Info("syn filter off: it needs CAP_BPF or root; the per-IP limits apply at accept", "err", err)
		return nil
	}
	log.Info("syn filter on", "per_ip_rate", cfg.PerIPRate, "per_ip_burst", cfg.PerIPBurst)
	return f
}

// synDroppedMetric exports the filter's count of dropped SYNs (0 while
// it is off).
func synDroppedMetric(f *synfilter.Filter) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "berth_gateway_syn_dropped_total",
		Help: "SYNs dropped in the kernel by the per-source SYN filter (-syn-filter), before any SYN-ACK or accept.",
	}, func() float64 {
		if f == nil {
			return 0
		}
		return float64(f.Dropped())
	})
}

// attachSYNFilter puts the filter on a device listener; a failure is
// logged and leaves that listener to the userspace limiters.
func (g *Gateway) attachSYNFilter(kind string, ln net.Listener) {
	if g.syn == nil {
		return
	}
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return
	}
	if err := g.syn.Attach(sc); err != nil {
		g.log.Info("syn filter not attached; the per-IP limits apply at accept", "kind", kind, "err", err)
	}
}

// detachSYNFilter takes the filter off an admitted connection, which
// inherited it from its listener: relayed segments need not run it.
func (g *Gateway) detachSYNFilter(c net.Conn) {
	if g.syn == nil {
		return
	}
	if sc, ok := c.(syscall.Conn); ok {
		_ = synfilter.Detach(sc)
	}
}
