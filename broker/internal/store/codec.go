package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"berth.dev/broker/packet"
)

// ErrBadRecord means a stored record did not decode: it was written by
// another format version or is damaged (the log's checksum passed, so the
// bytes are what was written).
var ErrBadRecord = errors.New("store: bad record")

// The first byte of an encoded Meta. Never change: version 2 is version
// 1 followed by the origin of an inbound QoS 2 message (AppendOrigin).
const (
	metaVersion       byte = 1
	metaVersionOrigin byte = 2
)

// Meta is everything of a stored PUBLISH but its payload. Decoded slices
// alias the record they were decoded from.
type Meta struct {
	Topic   []byte
	QoS     byte
	Retain  bool
	Created int64 // unix nanoseconds
	Expires int64 // unix nanoseconds; 0 never
	Props   packet.Properties
	// Origin and OriginID (version 2 only): the client id of the session
	// that published the message at QoS 2 and its packet id, awaiting
	// PUBREL from when the record is durable.
	Origin   []byte
	OriginID uint16
}

// metaProps are the properties a Meta keeps (those forwarded to
// subscribers).
const metaProps = packet.PropMask(1)<<packet.PropPayloadFormat | packet.PropMask(1)<<packet.PropMessageExpiry |
	packet.PropMask(1)<<packet.PropContentType | packet.PropMask(1)<<packet.PropResponseTopic |
	packet.PropMask(1)<<packet.PropCorrelationData | packet.PropMask(1)<<packet.PropUserProperty

// AppendMeta appends the encoding of a message's metadata to dst (see
// doc.go for the layout). It allocates only when dst must grow.
func AppendMeta(dst, topic []byte, qos byte, retain bool, created, expires int64, props *packet.Properties) []byte {
	flags := qos & 3
	if retain {
		flags |= 4
	}
	dst = append(dst, metaVersion, flags)
	dst = binary.BigEndian.AppendUint64(dst, uint64(created))
	dst = binary.BigEndian.AppendUint64(dst, uint64(expires))
	dst = appendBytes16(dst, topic)
	has := props.Has & metaProps
	if len(props.UserProperties) > 0 {
		has |= packet.Mask(packet.PropUserProperty)
	}
	dst = binary.BigEndian.AppendUint64(dst, uint64(has))
	if has == 0 {
		return dst
	}
	dst = append(dst, props.PayloadFormat)
	dst = binary.BigEndian.AppendUint32(dst, props.MessageExpiry)
	dst = appendBytes16(dst, props.ContentType)
	dst = appendBytes16(dst, props.ResponseTopic)
	dst = appendBytes16(dst, props.CorrelationData)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(props.UserProperties)))
	for _, up := range props.UserProperties {
		dst = appendBytes16(dst, up.Key)
		dst = appendBytes16(dst, up.Value)
	}
	return dst
}

// DecodeMeta decodes an AppendMeta encoding into m; m's slices alias b.
// It returns the number of bytes used.
func DecodeMeta(b []byte, m *Meta) (int, error) {
	d := decoder{b: b}
	v := d.byte()
	if v != metaVersion && v != metaVersionOrigin {
		return 0, fmt.Errorf("%w: meta version %d", ErrBadRecord, v)
	}
	flags := d.byte()
	m.QoS, m.Retain = flags&3, flags&4 != 0
	m.Created = int64(d.u64())
	m.Expires = int64(d.u64())
	m.Topic = d.bytes16()
	m.Props = packet.Properties{Has: packet.PropMask(d.u64())}
	if m.Props.Has != 0 {
		m.Props.PayloadFormat = d.byte()
		m.Props.MessageExpiry = d.u32()
		m.Props.ContentType = d.bytes16()
		m.Props.ResponseTopic = d.bytes16()
		m.Props.CorrelationData = d.bytes16()
		if n := int(d.u16()); n > 0 && d.err == nil {
			m.Props.UserProperties = make([]packet.UserProperty, n)
			for i := range n {
				m.Props.UserProperties[i] = packet.UserProperty{Key: d.bytes16(), Value: d.bytes16()}
			}
		}
	}
	m.Origin, m.OriginID = nil, 0
	if v == metaVersionOrigin {
		m.OriginID = d.u16()
		m.Origin = d.bytes16()
	}
	if d.err != nil {
		return 0, d.err
	}
	return d.pos, nil
}

func appendBytes16(dst, b []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(b)))
	return append(dst, b...)
}

func appendString16(dst []byte, s string) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(s)))
	return append(dst, s...)
}

// decoder reads big-endian fields; the first short read sets err and every
// later read returns zero values.
type decoder struct {
	b   []byte
	pos int
	err error
}

func (d *decoder) take(n int) []byte {
	if d.err != nil || d.pos+n > len(d.b) {
		if d.err == nil {
			d.err = fmt.Errorf("%w: short record at byte %d", ErrBadRecord, d.pos)
		}
		return nil
	}
	v := d.b[d.pos : d.pos+n : d.pos+n]
	d.pos += n
	return v
}

func (d *decoder) byte() byte {
	if v := d.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if v := d.take(2); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if v := d.take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if v := d.take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (d *decoder) bytes16() []byte {
	n := int(d.u16())
	if n == 0 {
		return nil
	}
	return d.take(n)
}

// The first byte of an encoded Session. Never change: version 1 records
// have no owner; version 2 records carry the owning credential id after
// the version byte, the rest as in version 1.
const (
	sessionVersion      byte = 1
	sessionVersionOwner byte = 2
)

// appendSession encodes s (see doc.go): version 1 when s has no owner, so
// a standalone broker writes what it always wrote, version 2 otherwise.
func appendSession(dst []byte, s *Session) []byte {
	if s.Owner == "" {
		dst = append(dst, sessionVersion)
	} else {
		dst = append(dst, sessionVersionOwner)
		dst = appendString16(dst, s.Owner)
	}
	dst = binary.BigEndian.AppendUint32(dst, s.ExpiryInterval)
	var disc int64
	if !s.DisconnectedAt.IsZero() {
		disc = s.DisconnectedAt.UnixNano()
	}
	dst = binary.BigEndian.AppendUint64(dst, uint64(disc))
	dst = binary.BigEndian.AppendUint64(dst, s.Cursor)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(s.Subscriptions)))
	for _, sub := range s.Subscriptions {
		dst = appendString16(dst, sub.Filter)
		var flags byte
		if sub.NoLocal {
			flags |= 1
		}
		if sub.RetainAsPublished {
			flags |= 2
		}
		dst = append(dst, sub.QoS, flags, sub.RetainHandling)
		dst = binary.BigEndian.AppendUint32(dst, sub.SubscriptionID)
	}
	if s.QoS2From != 0 {
		dst = append(dst, sessionExtQoS2From)
		dst = binary.BigEndian.AppendUint16(dst, 8)
		dst = binary.BigEndian.AppendUint64(dst, s.QoS2From)
	}
	return dst
}

// Extensions after the subscriptions of a session record: tag 1 B |
// length 2 B | body. A decoder skips tags it does not know; records
// without extensions are as they always were. Never change.
const sessionExtQoS2From byte = 1

// decodeSession decodes an appendSession encoding; the result owns its
// memory.
func decodeSession(clientID string, b []byte) (*Session, error) {
	d := decoder{b: b}
	s := &Session{ClientID: clientID}
	switch v := d.byte(); v {
	case sessionVersion:
	case sessionVersionOwner:
		s.Owner = string(d.bytes16())
	default:
		return nil, fmt.Errorf("%w: session version %d", ErrBadRecord, v)
	}
	s.ExpiryInterval = d.u32()
	if disc := int64(d.u64()); disc != 0 {
		s.DisconnectedAt = timeFromNanos(disc)
	}
	s.Cursor = d.u64()
	n := int(d.u16())
	for range n {
		sub := Subscription{Filter: string(d.bytes16()), QoS: d.byte()}
		flags := d.byte()
		sub.NoLocal, sub.RetainAsPublished = flags&1 != 0, flags&2 != 0
		sub.RetainHandling = d.byte()
		sub.SubscriptionID = d.u32()
		if d.err != nil {
			break
		}
		s.Subscriptions = append(s.Subscriptions, sub)
	}
	for d.err == nil && d.pos < len(d.b) {
		tag := d.byte()
		body := d.take(int(d.u16()))
		if tag == sessionExtQoS2From && len(body) == 8 {
			s.QoS2From = binary.BigEndian.Uint64(body)
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	return s, nil
}
