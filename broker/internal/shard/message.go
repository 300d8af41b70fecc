package shard

import (
	"sync"
	"sync/atomic"
	"time"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/topic"
	"berth.dev/broker/packet"
)

// message is one published message, immutable once built and shared by
// every queue and inflight window it is delivered to. A big payload is
// never copied again after the inbound copy: the writer sends it as a
// vector of its own; a small one (copyPayloadMax) is copied into the
// writer's batch behind its header.
type message struct {
	topic     []byte
	payload   []byte
	qos       byte
	retain    bool
	chunkMsgs uint8 // on a slab chunk's first message: the chunk's messages (see slab)
	// The flags are together, and inID beside refs, so that they share
	// words: every byte of a message is allocated and zeroed per message.
	stored bool // read back from the log (see off)
	lost   bool // the log append failed: never acknowledge it as durable
	full   bool // lost because the disk is full (ENOSPC, EDQUOT): refused with 0x97
	dead   bool // a dead letter: never dead-lettered again
	// props are the forwarded properties (owned copies; no Topic Alias
	// or Subscription Identifiers), out of line: nil for a message
	// without any, which is nearly every small one (112 bytes less to
	// allocate, zero and scan per message; see pubProps).
	props     *pubProps
	created   int64 // unix nanoseconds
	readAt    int64 // monoOf the time its PUBLISH was read; 0 when not read from a client
	expireAt  int64 // unix nanoseconds; 0 never [MQTT-3.3.2-5]
	publisher topic.SubscriberID
	size      int // bytes counted against queue limits
	propBytes int // variable-length property bytes, to size headers

	// off is the message's offset in the message log plus one; 0 when it
	// was not logged. A stored message was read back from the log: its
	// payload (payLen bytes) stays in the segment file and is sent from
	// there (sendfile), payload is nil.
	off    uint64
	payLen int
	// trace is the message's trace when it was sampled (trace.go); nil
	// for nearly every message.
	trace *msgTrace

	// chunk is the first message of the slab chunk this one was carved
	// out of (see slab), nil for a message with memory of its own.
	// Holding a slab message holds its whole chunk: whatever keeps a
	// message for long keeps its owned copy instead.
	chunk *message
	owned atomic.Pointer[message] // the copy own made, once

	// buf is the pooled buffer the message was built in, nil for memory
	// of its own; refs counts its holders, the last gives buf back
	// (msgbuf.go).
	buf  *msgBuf
	refs atomic.Int32
	inID uint16 // packet id of an inbound QoS 2 PUBLISH: its log record marks it awaiting PUBREL (qos2.go)

	// hdr caches the encoded headers of a message with properties (see
	// hdrCache); nil for the others, which never use one: their headers
	// are encoded per delivery (appendBareHeader). Kept out of line, 240
	// bytes that most messages would allocate, zero and scan for nothing.
	// Set when the message is made for one with properties, else on the
	// first header call.
	hdr atomic.Pointer[hdrCache]
}

// hdrCache holds a message's cached encoded PUBLISH headers (fixed
// header, topic, placeholder packet id, properties) per protocol and QoS,
// built on first use and immutable afterwards; writers copy one and patch
// the packet id and flags. Headers are carved out of regions: region 0 is
// spare room at the end of the message's own buffer, so the first headers
// cost no allocation. A slot holds region<<56 | offset<<24 | length, 0
// while unbuilt; a region is written once, before any slot names it.
type hdrCache struct {
	mu      sync.Mutex // serializes building headers
	regions [7][]byte
	nreg    int // regions in use; guarded by mu
	used    int // bytes used in regions[nreg-1]; guarded by mu
	slot    [2][3]atomic.Uint64
}

// messageWithHeaders is a message, its header cache and its properties
// in one allocation.
type messageWithHeaders struct {
	m message
	h hdrCache
	p pubProps
}

// allocMessage returns a zero message; one that will cache headers
// (withHeaders: it has properties) gets its cache in the same allocation.
func allocMessage(withHeaders bool) *message {
	if !withHeaders {
		return new(message)
	}
	x := new(messageWithHeaders)
	x.m.hdr.Store(&x.h)
	x.m.props = &x.p
	return &x.m
}

// cachesHeaders reports whether a message made from a PUBLISH with these
// properties (propBytes of them, copySize) caches its headers: only one
// that may send properties does; it also gets headerReserve bytes of room.
func cachesHeaders(src *packet.Properties, propBytes int) bool {
	return src.Has&forwardedProps != 0 || propBytes > 0
}

// setHeaderRoom makes room, the spare bytes after a message's own copy,
// the first region of its header cache, if it has one.
func (m *message) setHeaderRoom(room []byte) {
	if h := m.hdr.Load(); h != nil {
		h.regions[0] = room
		h.nreg = 1
	}
}

// pubProps are the PUBLISH properties a message passes on
// (forwardedProps), field for field as in packet.Properties. A message
// keeps these rather than a whole packet.Properties, two thirds of which
// serve other packets: 216 bytes less to allocate, zero and scan in every
// message, which is most of the garbage of small-message ingest. A
// message keeps them out of line (message.props), nil when it has none;
// the methods take a nil *pubProps as no properties.
type pubProps struct {
	Has             packet.PropMask
	PayloadFormat   byte
	MessageExpiry   uint32
	ContentType     []byte
	ResponseTopic   []byte
	CorrelationData []byte
	UserProperties  []packet.UserProperty
}

// full returns the properties as a packet.Properties, to encode or store.
func (pp *pubProps) full() packet.Properties {
	if pp == nil {
		return packet.Properties{}
	}
	return packet.Properties{
		Has:             pp.Has,
		PayloadFormat:   pp.PayloadFormat,
		MessageExpiry:   pp.MessageExpiry,
		ContentType:     pp.ContentType,
		ResponseTopic:   pp.ResponseTopic,
		CorrelationData: pp.CorrelationData,
		UserProperties:  pp.UserProperties,
	}
}

// none reports whether there are no properties to send, by
// packet.Properties' rule: a flag in Has, or a non-nil field.
func (pp *pubProps) none() bool {
	return pp == nil || pp.Has == 0 && pp.ContentType == nil && pp.ResponseTopic == nil && pp.CorrelationData == nil &&
		len(pp.UserProperties) == 0
}

// hasForwarded reports whether src holds anything a message forwards
// (pubProps.none's rule, over forwardedProps): only then does the message
// keep a pubProps.
func hasForwarded(src *packet.Properties) bool {
	return src.Has&forwardedProps != 0 || src.ContentType != nil || src.ResponseTopic != nil ||
		src.CorrelationData != nil || len(src.UserProperties) > 0
}

// forwarded returns the forwarded properties of src, aliasing its bytes.
func forwarded(src *packet.Properties) pubProps {
	return pubProps{
		Has:             src.Has & forwardedProps,
		PayloadFormat:   src.PayloadFormat,
		MessageExpiry:   src.MessageExpiry,
		ContentType:     src.ContentType,
		ResponseTopic:   src.ResponseTopic,
		CorrelationData: src.CorrelationData,
		UserProperties:  src.UserProperties,
	}
}

// appendBareHeader appends the PUBLISH header (fixed header, topic,
// packet id 0 at QoS 1/2, MQTT 5's empty property length) of a message
// that sends no properties: a 3.1.1 delivery, or an MQTT 5 one of a
// message without forwarded properties (pubProps.none). Encoding it is
// as cheap as copying a cached header (message.header), which only
// messages with properties keep. topic is at most 65,535 bytes and the
// remaining length within 268,435,455, as a decoded PUBLISH has them.
func appendBareHeader(dst []byte, version, qos byte, topic []byte, payloadLen int) []byte {
	n := 2 + len(topic) + payloadLen
	if qos > 0 {
		n += 2
	}
	if version == packet.Version5 {
		n++ // Property Length 0
	}
	dst = append(dst, byte(packet.TypePublish)<<4|qos<<1)
	for ; n >= 0x80; n >>= 7 {
		dst = append(dst, byte(n)|0x80)
	}
	dst = append(dst, byte(n), byte(len(topic)>>8), byte(len(topic)))
	dst = append(dst, topic...)
	if qos > 0 {
		dst = append(dst, 0, 0)
	}
	if version == packet.Version5 {
		dst = append(dst, 0)
	}
	return dst
}

// headerReserve is the room newMessage leaves for two cached headers.
func headerReserve(topicLen, propBytes int) int { return 2 * (48 + topicLen + propBytes) }

// forwardedProps are the PUBLISH (and Will) properties passed on to
// subscribers; Topic Alias and Subscription Identifier belong to one
// connection, Will Delay only to the will.
var forwardedProps = packet.Mask(packet.PropPayloadFormat) | packet.Mask(packet.PropMessageExpiry) |
	packet.Mask(packet.PropContentType) | packet.Mask(packet.PropResponseTopic) |
	packet.Mask(packet.PropCorrelationData) | packet.Mask(packet.PropUserProperty)

// newMessage copies what p aliases (the connection's read buffer) into one
// allocation owned by the message.
func newMessage(p *packet.Publish, topicName []byte, now time.Time, publisher topic.SubscriberID) *message {
	n, propBytes := copySize(topicName, p.Payload, &p.Props)
	withHeaders := cachesHeaders(&p.Props, propBytes)
	if withHeaders {
		n += headerReserve(len(topicName), propBytes)
	}
	buf := make([]byte, 0, n)
	var ups []packet.UserProperty
	if len(p.Props.UserProperties) > 0 {
		ups = make([]packet.UserProperty, 0, len(p.Props.UserProperties))
	}
	m := allocMessage(withHeaders)
	m.build(buf, ups, p, topicName, now, publisher)
	return m
}

// copySize is how many bytes a message copies of what a PUBLISH aliases,
// and how many of its encoded properties those make.
func copySize(topicName, payload []byte, src *packet.Properties) (n, propBytes int) {
	n = len(src.ContentType) + len(src.ResponseTopic) + len(src.CorrelationData)
	for _, up := range src.UserProperties {
		n += len(up.Key) + len(up.Value)
	}
	propBytes = n + 5*len(src.UserProperties)
	return n + len(topicName) + len(payload), propBytes
}

// build fills the zero message m with copies of p's topic, payload and
// forwarded properties, made in buf (empty, with room for copySize, plus
// headerReserve for a message that caches headers) and ups (empty, with
// room for p's user properties). The room left in buf holds the first
// cached headers.
func (m *message) build(buf []byte, ups []packet.UserProperty, p *packet.Publish, topicName []byte, now time.Time, publisher topic.SubscriberID) {
	m.fill(func(b []byte) []byte {
		if b == nil {
			return nil
		}
		start := len(buf)
		buf = append(buf, b...)
		return buf[start:len(buf):len(buf)]
	}, ups, p, topicName, now, publisher)
	m.setHeaderRoom(buf[len(buf):cap(buf):cap(buf)])
}

// fill sets m's fields from p as build describes, with take giving the
// bytes m keeps of each of p's fields (a copy, or the bytes themselves
// when p was read into the message's own buffer: msgPool.inPlace).
func (m *message) fill(take func([]byte) []byte, ups []packet.UserProperty, p *packet.Publish, topicName []byte, now time.Time, publisher topic.SubscriberID) {
	m.qos = p.QoS
	m.retain = p.Retain
	m.created = now.UnixNano()
	m.publisher = publisher
	m.topic = take(topicName)
	m.payload = take(p.Payload)
	if m.payload == nil {
		m.payload = []byte{}
	}
	src := &p.Props
	if hasForwarded(src) {
		pp := m.props // the room its maker gave it (allocMessage, slab), if any
		if pp == nil {
			pp = new(pubProps)
			m.props = pp
		}
		pp.Has = src.Has & forwardedProps
		pp.PayloadFormat = src.PayloadFormat // [MQTT-3.3.2-4] passed on unaltered
		pp.MessageExpiry = src.MessageExpiry
		pp.ContentType = take(src.ContentType)         // [MQTT-3.3.2-20]
		pp.ResponseTopic = take(src.ResponseTopic)     // [MQTT-3.3.2-15]
		pp.CorrelationData = take(src.CorrelationData) // [MQTT-3.3.2-16]
		if len(src.UserProperties) > 0 {
			// [MQTT-3.3.2-17] [MQTT-3.3.2-18] user properties forwarded
			// unaltered and in order.
			for _, up := range src.UserProperties {
				ups = append(ups, packet.UserProperty{Key: take(up.Key), Value: take(up.Value)})
			}
			pp.UserProperties = ups[:len(ups):len(ups)]
		}
	}
	if src.Has.Has(packet.PropMessageExpiry) {
		m.expireAt = m.created + int64(src.MessageExpiry)*int64(time.Second)
	}
	_, m.propBytes = copySize(nil, nil, src)
	m.size = len(m.topic) + len(m.payload) + m.propBytes + 64
}

// newSimpleMessage builds a message without properties ($SYS, tests).
func newSimpleMessage(topicName string, payload []byte, qos byte, retain bool, now time.Time) *message {
	m := &message{
		topic:     []byte(topicName),
		payload:   payload,
		qos:       qos,
		retain:    retain,
		created:   now.UnixNano(),
		publisher: noPublisher,
	}
	m.size = len(m.topic) + len(m.payload) + 64
	return m
}

// expired reports whether the message's expiry interval has passed.
func (m *message) expired(now int64) bool { return m.expireAt != 0 && now >= m.expireAt }

// remainingExpiry is the Message Expiry Interval to send: the original
// minus the time the message waited in the broker [MQTT-3.3.2-6].
func (m *message) remainingExpiry(now int64) uint32 {
	left := (m.expireAt - now + int64(time.Second) - 1) / int64(time.Second)
	return uint32(max(left, 1))
}

// header returns the cached header for version and qos with packet id 0
// (or none for QoS 0), DUP and RETAIN clear. The result must not be
// modified.
func (m *message) header(version, qos byte) ([]byte, error) {
	vi := 0
	if version == packet.Version5 {
		vi = 1
	}
	hc := m.hdr.Load()
	if hc == nil {
		// A message made without a cache (read back from the log or the
		// retained store): the first caller's becomes everyone's.
		m.hdr.CompareAndSwap(nil, new(hdrCache))
		hc = m.hdr.Load()
	}
	slot := &hc.slot[vi][qos]
	if v := slot.Load(); v != 0 {
		return hc.slotBytes(v), nil
	}
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if v := slot.Load(); v != 0 {
		return hc.slotBytes(v), nil
	}
	p := packet.Publish{QoS: qos, Topic: m.topic, Payload: m.payload, Props: m.props.full()}
	if qos > 0 {
		p.PacketID = 1 // patched per subscriber
	}
	var dst []byte
	if hc.nreg > 0 {
		dst = hc.regions[hc.nreg-1][hc.used:hc.used]
	}
	h, err := p.AppendHeader(dst, version)
	if err != nil {
		return nil, err
	}
	if m.stored {
		h = addRemaining(h, 0, m.payLen)
	}
	if hc.nreg > 0 && cap(h) == cap(dst) {
		// Encoded in place, in the current region.
		slot.Store(uint64(hc.nreg-1)<<56 | uint64(hc.used)<<24 | uint64(len(h)))
		hc.used += len(h)
		return h, nil
	}
	// No room: the appended slice becomes a new region.
	hc.regions[hc.nreg] = h[:cap(h):cap(h)]
	slot.Store(uint64(hc.nreg)<<56 | uint64(len(h)))
	hc.nreg++
	hc.used = len(h)
	return h, nil
}

// slotBytes resolves a header slot value.
func (hc *hdrCache) slotBytes(v uint64) []byte {
	r := hc.regions[v>>56]
	off := int(v >> 24 & (1<<32 - 1))
	n := int(v & (1<<24 - 1))
	return r[off : off+n : off+n]
}

// toStore converts a retained message for the Store.
func (m *message) toStore() *store.Message {
	sm := &store.Message{
		Topic:   string(m.topic),
		Payload: m.payload,
		QoS:     m.qos,
		Props:   m.props.full(),
		Created: time.Unix(0, m.created),
	}
	if m.expireAt != 0 {
		sm.ExpiresAt = time.Unix(0, m.expireAt)
	}
	return sm
}

// messageFromStore rebuilds a retained message loaded from the Store.
func messageFromStore(sm *store.Message) *message {
	m := &message{
		topic:     []byte(sm.Topic),
		payload:   sm.Payload,
		qos:       sm.QoS,
		retain:    true,
		created:   sm.Created.UnixNano(),
		publisher: noPublisher,
	}
	if hasForwarded(&sm.Props) {
		pp := forwarded(&sm.Props)
		m.props = &pp
	}
	if !sm.ExpiresAt.IsZero() {
		m.expireAt = sm.ExpiresAt.UnixNano()
	}
	m.size = len(m.topic) + len(m.payload) + 64
	return m
}
