package gateway

import (
	"net/netip"
	"time"
)

// A source that floods with CONNECTs the per-IP limits let through (each
// costs the gateway an accept, a goroutine, a read and a token check,
// and the kernel a whole handshake and close) is refused for
// cfg.FloodCooldown once its refusals for its own fault (failedByClient)
// outrun a quarter of its per-IP rate past a quarter of its burst (5/s
// past 10 by default): in the kernel by the
// SYN filter (synfilter.Filter.Hold) when it is on, and at accept either
// way (admission.failed, allowIP). After the cool-down its bucket is
// empty, so it gets its rate, not a fresh burst. A fleet whose devices
// authenticate is never cooled, whatever its rate; devices with a bad
// token retrying, a few a second between them, stay under it.

// Log lines about cool-downs: one per coolLogEvery, then a summary.
const coolLogEvery = 10 * time.Second

// failedByClient reports whether a refusal is the client's own doing
// (what a flood of made-up CONNECTs gets), not the service's (a tenant at
// its connection limit, a node or Redis down, shutting down).
func failedByClient(r refusal) bool {
	switch r {
	case refuseMalformed, refuseMalformedV5, refuseProtocol, refuseClientID, refuseTooLarge,
		refuseTimeout, refuseBadCredentials, refuseRevoked, refuseNoTenant, refuseSNI:
		return true
	}
	return false
}

// refusedSource counts a CONNECT of src refused with r against src when
// it is the client's fault.
func (g *Gateway) refusedSource(src netip.Prefix, r refusal, now time.Time) {
	if failedByClient(r) {
		g.sourceFailed(src, now)
	}
}

// sourceFailed counts a connection of src that failed for its own fault
// (a refused CONNECT, a failed TLS handshake), and starts src's cool-down
// when its failures are over the bound.
func (g *Gateway) sourceFailed(src netip.Prefix, now time.Time) {
	if !g.adm.failed(src, now) {
		return
	}
	g.m.cooldowns.Inc()
	held := g.syn != nil
	if held {
		if err := g.syn.Hold(src, g.cfg.FloodCooldown); err != nil {
			held = false
			g.log.Warn("syn filter: cannot hold a source; its cool-down applies at accept", "source", src.String(), "err", err)
		}
	}
	if g.coolLog.allow(now) {
		g.log.Warn("source refused for a cool-down: its CONNECTs keep failing", "source", src.String(),
			"cooldown", g.cfg.FloodCooldown, "in_kernel", held)
	}
}
