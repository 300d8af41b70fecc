package msgtrace

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"berth.dev/broker/internal/quota"
)

// DefaultCap is how many messages per second a tenant may have traced on
// one node, sampled by rate or by the device's traceparent together.
const DefaultCap = 100

// Sampler decides which of one tenant's messages are traced. Its rate
// changes live (SetRate, from the tenant's trace_sample_rate); Sample
// allocates nothing and is safe for concurrent use.
type Sampler struct {
	rate atomic.Uint64 // math.Float64bits of the rate, 0 to 1
	cap  *quota.Bucket // sampled messages per second, burst one second
}

// NewSampler returns a sampler tracing a share rate (0 to 1) of new
// traces plus every message whose traceparent says sampled, at most
// capPerSec messages a second (<= 0: DefaultCap).
func NewSampler(rate, capPerSec float64) *Sampler {
	if capPerSec <= 0 {
		capPerSec = DefaultCap
	}
	s := &Sampler{cap: quota.NewBucket(capPerSec, capPerSec)}
	s.SetRate(rate)
	return s
}

// SetRate changes the share of messages traced; it is clamped to 0..1.
func (s *Sampler) SetRate(rate float64) {
	if !(rate > 0) { // NaN too
		rate = 0
	}
	s.rate.Store(math.Float64bits(min(rate, 1)))
}

// Rate returns the share of messages traced.
func (s *Sampler) Rate() float64 { return math.Float64frombits(s.rate.Load()) }

// Sample decides on one message: parentSampled when its traceparent says
// sampled. A yes within the cap is a yes. Only a yes reads the clock.
func (s *Sampler) Sample(parentSampled bool) bool {
	if !parentSampled {
		r := math.Float64frombits(s.rate.Load())
		if r == 0 || rand.Float64() >= r {
			return false
		}
	}
	return s.cap.Take(time.Now(), 1)
}

// TraceParent is a parsed W3C traceparent (version 00).
type TraceParent struct {
	TraceID [16]byte
	SpanID  [8]byte
	Sampled bool
}

// ParseTraceParent parses a W3C traceparent header value
// ("00-<32 hex trace id>-<16 hex span id>-<2 hex flags>") without
// allocating. A later version is read as version 00 when its first 55
// bytes have that shape; version ff, all-zero ids and bad hex are refused.
func ParseTraceParent(v []byte) (TraceParent, bool) {
	var tp TraceParent
	if len(v) < 55 || (len(v) > 55 && v[55] != '-') || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return tp, false
	}
	ver, ok := hexByte(v[0], v[1])
	if !ok || ver == 0xff || (ver == 0 && len(v) != 55) {
		return tp, false
	}
	for i := range tp.TraceID {
		if tp.TraceID[i], ok = hexByte(v[3+2*i], v[4+2*i]); !ok {
			return tp, false
		}
	}
	for i := range tp.SpanID {
		if tp.SpanID[i], ok = hexByte(v[36+2*i], v[37+2*i]); !ok {
			return tp, false
		}
	}
	flags, ok := hexByte(v[53], v[54])
	if !ok || tp.TraceID == [16]byte{} || tp.SpanID == [8]byte{} {
		return tp, false
	}
	tp.Sampled = flags&1 == 1
	return tp, true
}

// hexByte decodes two lowercase hex digits (the W3C format allows no
// uppercase).
func hexByte(hi, lo byte) (byte, bool) {
	h, ok1 := hexDigit(hi)
	l, ok2 := hexDigit(lo)
	return h<<4 | l, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// NewTraceID returns a random, non-zero trace id.
func NewTraceID() (id [16]byte) {
	for id == [16]byte{} {
		putUint64(id[:8], rand.Uint64())
		putUint64(id[8:], rand.Uint64())
	}
	return id
}

// NewSpanID returns a random, non-zero span id.
func NewSpanID() (id [8]byte) {
	for id == [8]byte{} {
		putUint64(id[:], rand.Uint64())
	}
	return id
}

func putUint64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (56 - 8*i))
	}
}
