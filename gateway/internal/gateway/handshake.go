package gateway

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Handshake admission. What a CONNECT costs the gateway once its bytes
// have arrived is mostly two things: verifying its token's signature, and
// for a refused one the CONNACK and above all the close, whose TCP
// teardown the kernel does in the closing thread (about half of what a
// refused CONNECT costs, measured in a flood). A burst of them (a flood's
// sources each spending their per-IP burst in the same few milliseconds)
// would otherwise take every P, and the threads under them, from the
// established relays. So at most cfg.MaxHandshakes (default
// max(1, GOMAXPROCS/2)) CONNECTs do that work at once; the others wait,
// parked, for up to cfg.HandshakeWait. A token still unverified then is
// refused with MQTT 5 0x89 Server busy (3.1.1: 0x03 Server unavailable),
// counted as refusals_total{reason="server_busy"}; a refusal already
// decided goes out anyway. A refusal is counted, against its source too,
// before the wait, so a flood's cool-down (cooldown.go) starts as soon as
// without the slots.
//
// A slot is never held while waiting on the network or another service:
// not while the CONNECT is read (a slow client), not during the route,
// quota and node steps after a successful verification, and not while
// verifying a token whose JWT header has not verified here before, since
// an unknown kid makes the verifier fetch the key set and wait up to its
// MinRefresh (knownHeaders). Decoding the CONNECT (microseconds) is not
// under it either.
type handshakes struct {
	slots chan struct{}
	wait  time.Duration
	waits prometheus.Counter // times a CONNECT found every slot taken
	known knownHeaders
}

// defaultMaxHandshakes is the bound when cfg.MaxHandshakes is 0: half the
// Ps, so that the other half stay free for the relays.
func defaultMaxHandshakes() int { return max(1, runtime.GOMAXPROCS(0)/2) }

func newHandshakes(cfg *Config, reg prometheus.Registerer) *handshakes {
	n := cfg.MaxHandshakes
	if n <= 0 {
		n = defaultMaxHandshakes()
	}
	h := &handshakes{
		slots: make(chan struct{}, n),
		wait:  cfg.HandshakeWait,
		waits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berth_gateway_handshake_waits_total",
			Help: "CONNECTs and TLS handshakes that found all -max-handshakes slots taken and waited for one (up to -handshake-wait; a token still unverified then is refused, refusals_total{reason=\"server_busy\"}; a TLS handshake is abandoned, reason=\"tls_busy\").",
		}),
	}
	reg.MustRegister(h.waits, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "berth_gateway_handshakes_in_progress",
		Help: "CONNECTs whose token is being verified, or whose refusal is being sent and closed, and TLS handshakes whose server part is being computed, right now (at most -max-handshakes).",
	}, func() float64 { return float64(len(h.slots)) }))
	return h
}

// enter takes a slot, waiting for up to h.wait (or until ctx ends) when
// all are taken; false when none freed in time.
func (h *handshakes) enter(ctx context.Context) bool {
	select {
	case h.slots <- struct{}{}:
		return true
	default:
	}
	h.waits.Inc()
	t := time.NewTimer(h.wait)
	defer t.Stop()
	select {
	case h.slots <- struct{}{}:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// leave frees a slot taken by enter.
func (h *handshakes) leave() { <-h.slots }

// handshakeHold is one connection's hold on a handshake slot; its zero
// value holds none.
type handshakeHold struct {
	h    *handshakes
	held bool
}

// enter takes a slot unless one is held already.
func (s *handshakeHold) enter(ctx context.Context) bool {
	if !s.held {
		s.held = s.h.enter(ctx)
	}
	return s.held
}

// leave frees the slot, if held.
func (s *handshakeHold) leave() {
	if s.held {
		s.held = false
		s.h.leave()
	}
}

// end, deferred by handle, closes c and frees the slot if one is still
// held: the connection was refused, and its close (the TCP teardown) is
// part of the work a slot bounds.
func (s *handshakeHold) end(c net.Conn) {
	if s.held {
		c.Close()
		s.leave()
	}
}

// refuseInSlot is refuse with the CONNACK and the close under a handshake
// slot (the close at handle's return, handshakeHold.end). The refusal is
// counted first, against its source too, so that a flooding source's
// cool-down never waits for a slot. When none frees within HandshakeWait
// the refusal goes out anyway: it is decided.
func (g *Gateway) refuseInSlot(ctx context.Context, hs *handshakeHold, c net.Conn, log *slog.Logger, ct *connTrace, r refusal, cause error) {
	failed := time.Now()
	g.noteRefusal(log, ct, r, cause, failed)
	hs.enter(ctx)
	g.sendRefusal(c, ct, r, cause, failed)
}

// maxKnownHeaders bounds knownHeaders; when full it starts over.
const maxKnownHeaders = 64

// knownHeaders are the JWT headers (the token's first segment, as sent)
// of tokens that verified here: their key is in the verifier's key set,
// so verifying another token with the same header is CPU work (the
// signature) and no wait. The API signs every token of a key with the
// same header, so there are few; a forged token that copies one costs a
// slot's worth of CPU, no more.
type knownHeaders struct {
	mu sync.RWMutex
	m  map[string]struct{}
}

// header is token's first segment (nil when it has none).
func tokenHeader(token []byte) []byte {
	i := bytes.IndexByte(token, '.')
	if i <= 0 {
		return nil
	}
	return token[:i]
}

func (k *knownHeaders) has(token []byte) bool {
	hdr := tokenHeader(token)
	if hdr == nil {
		return false
	}
	k.mu.RLock()
	defer k.mu.RUnlock()
	_, ok := k.m[string(hdr)] // no allocation for the lookup
	return ok
}

func (k *knownHeaders) add(token []byte) {
	hdr := tokenHeader(token)
	if hdr == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.m[string(hdr)]; ok {
		return
	}
	if k.m == nil || len(k.m) >= maxKnownHeaders {
		k.m = map[string]struct{}{}
	}
	k.m[string(hdr)] = struct{}{}
}

// forget drops token's header: its key left the key set (rotated out).
func (k *knownHeaders) forget(token []byte) {
	hdr := tokenHeader(token)
	if hdr == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, string(hdr))
}
