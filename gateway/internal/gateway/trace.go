package gateway

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"berth.dev/broker/packet"
	"berth.dev/broker/tracing"
)

// tracerName is the instrumentation scope of the gateway's spans.
const tracerName = "berth.dev/gateway"

// Span names and attribute keys of a connect's trace, drawn in doc.go.
// The dashboard reads them: never change.
const (
	spanConnect = "gateway.connect"

	keyTenant     = tracing.KeyTenant
	keyVersion    = attribute.Key("protocol_version") // 3, 4 or 5
	keyTransport  = attribute.Key("transport")        // tcp, tls, ws, wss
	keyOutcome    = attribute.Key("outcome")          // connected, refused
	keyReason     = attribute.Key("reason")           // refusal label, as in berth_gateway_refusals_total
	keyReasonCode = attribute.Key("reason_code")      // MQTT 5 reason code of the refusal CONNACK, if one was sent
	keyClientID   = attribute.Key("client_id")
	keyCredential = attribute.Key("credential_id")
	keyLimit      = attribute.Key("max_connections") // admission: the tenant's limit
	keyNode       = attribute.Key("node_id")         // route: the node dialled, by its id (never its address)

	outcomeConnected = "connected"
	outcomeRefused   = "refused"
)

// phase is one child span of gateway.connect, in the order they happen.
type phase uint8

const (
	phaseParse     phase = iota // read and decode the CONNECT
	phaseAuth                   // verify the token, check revocation
	phaseAdmission              // placement and quota lookup, SNI, connection limit
	phaseRoute                  // dial the node, PROXY header and CONNECT written
	numPhases
)

var phaseNames = [numPhases]string{"parse", "auth", "admission", "route"}

// connTrace is what one connect's trace will say, noted as the connect
// goes. The spans are made only at the end (traceConnect): the W3C trace
// parent arrives inside the CONNECT, after the connect began, and the
// tenant is known only after auth, yet every span of the trace starts at
// its true time and carries tenant_id once it is known. Noting costs a
// few time.Now calls; an unsampled connect makes no spans at all.
type connTrace struct {
	start     time.Time // accept
	transport string
	cur       phase
	begun     [numPhases]time.Time
	ended     [numPhases]time.Time

	parent     trace.SpanContext // the device's span, from a traceparent user property
	version    byte
	clientID   string
	tenant     string
	credential string
	limit      int // the tenant's connection limit, once admission looked it up
	limitKnown bool
	node       string // the node's id (nodes.id)

	source netip.Prefix // the device's source, which its refusals count against (cooldown.go)
}

// enter ends the current phase at t and begins p.
func (ct *connTrace) enter(p phase, t time.Time) {
	ct.leave(t)
	ct.cur, ct.begun[p] = p, t
}

// leave ends the current phase at t, if it has not ended.
func (ct *connTrace) leave(t time.Time) {
	if b := ct.begun[ct.cur]; !b.IsZero() && ct.ended[ct.cur].IsZero() {
		ct.ended[ct.cur] = t
	}
}

// traceConnect makes the spans of a connect that ended at end: forwarded
// to the node when r is nil, else refused with r because of cause (which
// is recorded on the phase it happened in).
func (g *Gateway) traceConnect(ct *connTrace, end time.Time, r *refusal, cause error) {
	parent := context.Background()
	if ct.parent.IsValid() {
		parent = trace.ContextWithRemoteSpanContext(parent, ct.parent)
	}
	ctx, root := g.tr.Start(parent, spanConnect, trace.WithTimestamp(ct.start), trace.WithSpanKind(trace.SpanKindServer))
	if !root.IsRecording() {
		return // not sampled: nothing more to pay
	}
	ct.leave(end)
	var tenant []attribute.KeyValue
	if ct.tenant != "" {
		tenant = []attribute.KeyValue{keyTenant.String(ct.tenant)}
	}
	for p := phaseParse; p <= ct.cur; p++ {
		_, sp := g.tr.Start(ctx, phaseNames[p], trace.WithTimestamp(ct.begun[p]), trace.WithAttributes(tenant...))
		switch p {
		case phaseAuth:
			if ct.credential != "" {
				sp.SetAttributes(keyCredential.String(ct.credential))
			}
		case phaseAdmission:
			if ct.limitKnown {
				sp.SetAttributes(keyLimit.Int(ct.limit))
			}
		case phaseRoute:
			sp.SetAttributes(keyNode.String(ct.node))
		}
		if p == ct.cur && cause != nil && r != nil {
			pub := spanCause(*r, cause)
			sp.RecordError(pub, trace.WithTimestamp(ct.ended[p]))
			sp.SetStatus(codes.Error, pub.Error())
		}
		sp.End(trace.WithTimestamp(ct.ended[p]))
	}

	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs, keyTransport.String(ct.transport))
	attrs = append(attrs, tenant...)
	if ct.version != 0 {
		attrs = append(attrs, keyVersion.Int(int(ct.version)))
	}
	if ct.clientID != "" {
		attrs = append(attrs, keyClientID.String(ct.clientID))
	}
	if r == nil {
		attrs = append(attrs, keyOutcome.String(outcomeConnected))
	} else {
		attrs = append(attrs, keyOutcome.String(outcomeRefused), keyReason.String(r.label))
		if r.code != 0 {
			attrs = append(attrs, keyReasonCode.Int(int(r.code)))
		}
		root.SetStatus(codes.Error, r.label)
	}
	root.SetAttributes(attrs...)
	root.End(trace.WithTimestamp(end))
}

// spanCause is what a refused connect's spans say went wrong. The tenant
// reads them (GET /v1/tenants/{tid}/traces), so a cause from inside the
// service (the node, Redis, Postgres, the JWKS endpoint, shutdown) or from
// the network (its text names the gateway's and the peer's addresses)
// becomes its refusal's label; the gateway's log keeps the full error.
// Causes about what the device sent (a malformed CONNECT, its token, its
// server name, its tenant's limit) are kept: they help the device's owner.
func spanCause(r refusal, cause error) error {
	var ne net.Error
	if errors.As(cause, &ne) {
		return errors.New(r.label)
	}
	switch r {
	case refuseAuthDown, refuseNoRoute, refuseLimiterDown, refuseNodeDown, refuseShuttingDown, refuseTimeout:
		return errors.New(r.label)
	}
	return cause
}

// traceParent returns the span context of a W3C traceparent (and
// tracestate) MQTT 5 user property, invalid when there is none or it does
// not parse.
func traceParent(props []packet.UserProperty) trace.SpanContext {
	c := userProps(props)
	if c.Get("traceparent") == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), c)
	return trace.SpanContextFromContext(ctx)
}

// userProps reads MQTT 5 user properties as a propagation carrier. Keys
// match case-insensitively, as W3C trace context headers do over HTTP.
type userProps []packet.UserProperty

func (u userProps) Get(key string) string {
	for _, p := range u {
		if bytes.EqualFold(p.Key, []byte(key)) {
			return string(p.Value)
		}
	}
	return ""
}

func (userProps) Set(string, string) {}

func (u userProps) Keys() []string {
	keys := make([]string, len(u))
	for i, p := range u {
		keys[i] = string(p.Key)
	}
	return keys
}
