package shard

import (
	"time"

	"berth.dev/broker/internal/msgtrace"
	"berth.dev/broker/packet"
)

// Tracing configures the tracing of sampled messages (Options.Tracing):
// see internal/msgtrace for the span tree. Both fields set turns it on.
type Tracing struct {
	// TenantID is the tenant_id of every span.
	TenantID string
	// Sampler decides per message; the node changes its rate live.
	Sampler *msgtrace.Sampler
	// Sink takes the ended spans; it must not block.
	Sink msgtrace.Sink
}

func (t Tracing) on() bool { return t.Sampler != nil && t.Sink != nil }

// msgTrace is the trace of one sampled message: its ids, what every span
// of its tree carries, and the times one span leaves for the next. It is
// made on the publisher's reader; the stamps are written there (the fsync
// wait's end on the shard's ack loop, after the hand-over) and only read
// by delivery spans.
type msgTrace struct {
	sink    msgtrace.Sink
	traceID [16]byte
	root    [8]byte
	parent  [8]byte // the device's span; zero when it sent none
	tenant  string
	client  string
	topic   string
	qos     byte
	size    int
	start   time.Time // the root's start: the PUBLISH decoded and sampled
	routed  time.Time // routing began: where delivery spans start
	logged  time.Time // the log append ended: where the fsync wait starts
	parked  bool      // the root ends when its PUBACK/PUBREC is released (ackLoop)
}

// traceParentKey is the MQTT 5 user property carrying a W3C traceparent.
const traceParentKey = "traceparent"

// sampleTrace decides whether the PUBLISH p (to topic name) is traced and
// returns its trace, or nil. The unsampled path allocates nothing.
func (c *conn) sampleTrace(p *packet.Publish, name []byte) *msgTrace {
	tc := &c.shard.opts.Tracing
	var tp msgtrace.TraceParent
	var hasParent bool
	if c.version == packet.Version5 {
		for i := range p.Props.UserProperties {
			up := &p.Props.UserProperties[i]
			if string(up.Key) == traceParentKey {
				tp, hasParent = msgtrace.ParseTraceParent(up.Value)
				break
			}
		}
	}
	if !tc.Sampler.Sample(hasParent && tp.Sampled) {
		return nil
	}
	tr := &msgTrace{
		sink: tc.Sink, tenant: tc.TenantID, client: c.clientID, topic: string(name),
		qos: p.QoS, size: len(p.Payload), start: time.Now(), root: msgtrace.NewSpanID(),
	}
	if hasParent {
		tr.traceID, tr.parent = tp.TraceID, tp.SpanID
	} else {
		tr.traceID = msgtrace.NewTraceID()
	}
	return tr
}

// span returns a span of the trace named name, a child of the root, with
// the message's attributes.
func (tr *msgTrace) span(name string, start, end time.Time) msgtrace.Span {
	return msgtrace.Span{
		Name: name, TraceID: tr.traceID, SpanID: msgtrace.NewSpanID(), Parent: tr.root,
		Start: start, End: end, Tenant: tr.tenant, Client: tr.client, Topic: tr.topic,
		QoS: tr.qos, Size: tr.size,
	}
}

// child exports a child span of the root.
func (tr *msgTrace) child(name string, start, end time.Time, errText string) {
	sp := tr.span(name, start, end)
	sp.Error = errText
	tr.sink.Export(&sp)
}

// endRoot exports the root span, mqtt.publish, ending at end.
func (tr *msgTrace) endRoot(end time.Time, errText string) {
	sp := tr.span(msgtrace.NamePublish, tr.start, end)
	sp.SpanID, sp.Parent, sp.Error = tr.root, tr.parent, errText
	tr.sink.Export(&sp)
}

// deliver exports the delivery span of one subscriber's copy.
func (tr *msgTrace) deliver(subscriber string, qos byte, written, end time.Time, acked bool, errText string) {
	sp := tr.span(msgtrace.NameDeliver, tr.routed, end)
	sp.Subscriber, sp.SubQoS, sp.Written, sp.Acked, sp.Error = subscriber, qos, written, acked, errText
	tr.sink.Export(&sp)
}

// tracedWrite is a traced copy in a batch being written (batch.traced).
type tracedWrite struct {
	tr  *msgTrace
	qos byte
	id  uint16
}

// tracedDelivery is a traced QoS 1/2 copy inflight, waiting for its
// PUBACK or PUBCOMP (sessionRare.traced).
type tracedDelivery struct {
	tr      *msgTrace
	written time.Time
	qos     byte
}

// traceWritten notes the traced copies of the batch just written: a QoS 0
// copy's delivery span ends now; a QoS 1/2 copy's notes when it was
// written and waits for its acknowledgement. c.w.mu is held.
func (c *conn) traceWritten(list []tracedWrite) {
	now := time.Now()
	sess := c.sess
	for i := range list {
		w := &list[i]
		if w.qos == 0 {
			w.tr.deliver(sess.clientID, 0, now, now, false, "")
			continue
		}
		sess.mu.Lock()
		if d, ok := sess.tracedLocked()[w.id]; ok && d.tr == w.tr {
			d.written = now
			sess.rare.traced[w.id] = d
		}
		sess.mu.Unlock()
	}
	clear(list)
}

// traceInflightLocked registers a traced QoS 1/2 copy sent with packet id
// id; sess.mu is held.
func (sess *session) traceInflightLocked(id uint16, qos byte, tr *msgTrace) {
	r := sess.rareLocked()
	if r.traced == nil {
		r.traced = make(map[uint16]tracedDelivery)
	}
	r.traced[id] = tracedDelivery{tr: tr, qos: qos}
}

// endTraceLocked ends the delivery span of the traced copy with packet id
// id, if there is one; sess.mu is held.
func (sess *session) endTraceLocked(id uint16, acked bool, errText string) {
	traced := sess.tracedLocked()
	if len(traced) == 0 {
		return
	}
	d, ok := traced[id]
	if !ok {
		return
	}
	delete(traced, id)
	d.tr.deliver(sess.clientID, d.qos, d.written, time.Now(), acked, errText)
}

// endAllTracesLocked ends every traced copy still waiting for its
// acknowledgement (the connection ended); sess.mu is held.
func (sess *session) endAllTracesLocked(errText string) {
	for id := range sess.tracedLocked() {
		sess.endTraceLocked(id, false, errText)
	}
}

// traceACL exports the acl span: from the sample to now.
func (tr *msgTrace) traceACL(allowed bool) {
	errText := ""
	if !allowed {
		errText = "not authorized"
	}
	tr.child(msgtrace.NameACL, tr.start, time.Now(), errText)
}

// traceQuota exports the quota span, begun at start, with the limiter's
// verdict.
func (tr *msgTrace) traceQuota(start time.Time, code packet.ReasonCode) {
	errText := ""
	if code != packet.CodeSuccess {
		errText = code.String()
	}
	tr.child(msgtrace.NameQuota, start, time.Now(), errText)
}

// traceAppend exports the wal.append span, begun at start.
func (tr *msgTrace) traceAppend(start time.Time, err error) {
	tr.logged = time.Now()
	errText := ""
	if err != nil {
		errText = err.Error()
	}
	tr.child(msgtrace.NameAppend, start, tr.logged, errText)
}

// traceRoute exports the route span, begun at tr.routed, after the message
// was handed to matched sessions.
func (tr *msgTrace) traceRoute(matched int) {
	sp := tr.span(msgtrace.NameRoute, tr.routed, time.Now())
	sp.Matched = matched
	tr.sink.Export(&sp)
}
