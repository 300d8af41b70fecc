package packet

// PropID is an MQTT 5 property identifier. The values never change.
type PropID byte

// Property identifiers (MQTT 5.0 section 2.2.2.2).
const (
	PropPayloadFormat        PropID = 0x01 // byte: PUBLISH, Will
	PropMessageExpiry        PropID = 0x02 // four byte integer: PUBLISH, Will
	PropContentType          PropID = 0x03 // UTF-8 string: PUBLISH, Will
	PropResponseTopic        PropID = 0x08 // UTF-8 string: PUBLISH, Will
	PropCorrelationData      PropID = 0x09 // binary: PUBLISH, Will
	PropSubscriptionID       PropID = 0x0B // variable byte integer: PUBLISH (repeatable), SUBSCRIBE
	PropSessionExpiry        PropID = 0x11 // four byte integer: CONNECT, CONNACK, DISCONNECT
	PropAssignedClientID     PropID = 0x12 // UTF-8 string: CONNACK
	PropServerKeepAlive      PropID = 0x13 // two byte integer: CONNACK
	PropAuthMethod           PropID = 0x15 // UTF-8 string: CONNECT, CONNACK, AUTH
	PropAuthData             PropID = 0x16 // binary: CONNECT, CONNACK, AUTH
	PropRequestProblemInfo   PropID = 0x17 // byte: CONNECT
	PropWillDelay            PropID = 0x18 // four byte integer: Will
	PropRequestResponseInfo  PropID = 0x19 // byte: CONNECT
	PropResponseInfo         PropID = 0x1A // UTF-8 string: CONNACK
	PropServerReference      PropID = 0x1C // UTF-8 string: CONNACK, DISCONNECT
	PropReasonString         PropID = 0x1F // UTF-8 string: CONNACK, acks, SUBACK, UNSUBACK, DISCONNECT, AUTH
	PropReceiveMaximum       PropID = 0x21 // two byte integer: CONNECT, CONNACK
	PropTopicAliasMaximum    PropID = 0x22 // two byte integer: CONNECT, CONNACK
	PropTopicAlias           PropID = 0x23 // two byte integer: PUBLISH
	PropMaximumQoS           PropID = 0x24 // byte: CONNACK
	PropRetainAvailable      PropID = 0x25 // byte: CONNACK
	PropUserProperty         PropID = 0x26 // UTF-8 string pair: every packet with properties (repeatable)
	PropMaximumPacketSize    PropID = 0x27 // four byte integer: CONNECT, CONNACK
	PropWildcardSubAvailable PropID = 0x28 // byte: CONNACK
	PropSubIDAvailable       PropID = 0x29 // byte: CONNACK
	PropSharedSubAvailable   PropID = 0x2A // byte: CONNACK
)

// PropMask is a set of property identifiers, one bit per identifier.
type PropMask uint64

// Mask returns the set holding only id.
func Mask(id PropID) PropMask { return 1 << (id & 63) }

// Has reports whether id is in m.
func (m PropMask) Has(id PropID) bool { return m&Mask(id) != 0 }

// Set adds id to m.
func (m *PropMask) Set(id PropID) { *m |= Mask(id) }

func maskOf(ids ...PropID) PropMask {
	var m PropMask
	for _, id := range ids {
		m.Set(id)
	}
	return m
}

// Properties allowed in each packet (MQTT 5.0 section 2.2.2.2). A property
// outside its packet's set is a malformed packet.
var (
	allowConnect = maskOf(PropSessionExpiry, PropAuthMethod, PropAuthData, PropRequestProblemInfo,
		PropRequestResponseInfo, PropReceiveMaximum, PropTopicAliasMaximum, PropUserProperty, PropMaximumPacketSize)
	allowWill = maskOf(PropPayloadFormat, PropMessageExpiry, PropContentType, PropResponseTopic,
		PropCorrelationData, PropWillDelay, PropUserProperty)
	allowConnack = maskOf(PropSessionExpiry, PropAssignedClientID, PropServerKeepAlive, PropAuthMethod,
		PropAuthData, PropResponseInfo, PropServerReference, PropReasonString, PropReceiveMaximum,
		PropTopicAliasMaximum, PropMaximumQoS, PropRetainAvailable, PropUserProperty, PropMaximumPacketSize,
		PropWildcardSubAvailable, PropSubIDAvailable, PropSharedSubAvailable)
	allowPublish = maskOf(PropPayloadFormat, PropMessageExpiry, PropContentType, PropResponseTopic,
		PropCorrelationData, PropSubscriptionID, PropTopicAlias, PropUserProperty)
	allowAck         = maskOf(PropReasonString, PropUserProperty) // PUBACK..PUBCOMP, SUBACK, UNSUBACK
	allowSubscribe   = maskOf(PropSubscriptionID, PropUserProperty)
	allowUnsubscribe = maskOf(PropUserProperty)
	allowDisconnect  = maskOf(PropSessionExpiry, PropServerReference, PropReasonString, PropUserProperty)
	allowAuth        = maskOf(PropAuthMethod, PropAuthData, PropReasonString, PropUserProperty)
)

// Properties holds the MQTT 5 properties of one packet. Byte-slice fields
// alias the decoded buffer. Has records which properties were present;
// Append writes a numeric property only when its bit is in Has, and a
// byte-slice property when its bit is in Has or the slice is non-nil.
type Properties struct {
	Has PropMask

	PayloadFormat   byte
	MessageExpiry   uint32
	ContentType     []byte
	ResponseTopic   []byte
	CorrelationData []byte
	SubscriptionIDs []uint32
	TopicAlias      uint16

	SessionExpiry        uint32
	AssignedClientID     []byte
	ServerKeepAlive      uint16
	AuthMethod           []byte
	AuthData             []byte
	RequestProblemInfo   byte
	WillDelay            uint32
	RequestResponseInfo  byte
	ResponseInfo         []byte
	ServerReference      []byte
	ReasonString         []byte
	ReceiveMaximum       uint16
	TopicAliasMaximum    uint16
	MaximumQoS           byte
	RetainAvailable      byte
	MaximumPacketSize    uint32
	WildcardSubAvailable byte
	SubIDAvailable       byte
	SharedSubAvailable   byte

	UserProperties []UserProperty
}

// Reset clears p and keeps the capacity of its slices.
func (p *Properties) Reset() {
	*p = Properties{SubscriptionIDs: p.SubscriptionIDs[:0], UserProperties: p.UserProperties[:0]}
}

// decode reads a property length and the properties after it. A property
// not valid for the packet is malformed (section 2.2.2.2); repeating one
// that may appear once is a protocol error (each property's definition).
func (p *Properties) decode(d *decoder, allowed PropMask) error {
	p.Reset()
	n, err := d.varint("property length")
	if err != nil {
		return err
	}
	if n > d.left() {
		return d.malformed("property length runs past the end of the packet")
	}
	end := d.off + n
	s := decoder{b: d.b[:end], off: d.off, t: d.t}
	d.off = end
	for s.off < end {
		idb := s.b[s.off]
		s.off++
		id := PropID(idb)
		if idb > byte(PropSharedSubAvailable) || !allowed.Has(id) {
			return s.malformed("property 0x" + hex2(idb) + " not valid in this packet")
		}
		repeatable := id == PropUserProperty || (id == PropSubscriptionID && d.t == TypePublish)
		if p.Has.Has(id) && !repeatable {
			return errorf(ErrProtocol, d.t, "property 0x"+hex2(idb)+" included more than once")
		}
		p.Has.Set(id)
		if err := p.decodeOne(&s, id); err != nil {
			return err
		}
	}
	return nil
}

func (p *Properties) decodeOne(s *decoder, id PropID) error {
	var err error
	switch id {
	case PropPayloadFormat:
		p.PayloadFormat, err = s.flag("payload format indicator")
	case PropMessageExpiry:
		p.MessageExpiry, err = s.u32("message expiry interval")
	case PropContentType:
		p.ContentType, err = s.str("content type")
	case PropResponseTopic:
		p.ResponseTopic, err = s.str("response topic")
		if err == nil && !ValidTopicName(p.ResponseTopic) {
			err = errorf(ErrProtocol, s.t, "response topic is not a valid topic name") // [MQTT-3.3.2-14]
		}
	case PropCorrelationData:
		p.CorrelationData, err = s.binary("correlation data")
	case PropSubscriptionID:
		var v int
		v, err = s.varint("subscription identifier")
		if err == nil && v == 0 {
			err = errorf(ErrProtocol, s.t, "subscription identifier 0")
		}
		p.SubscriptionIDs = append(p.SubscriptionIDs, uint32(v))
	case PropTopicAlias:
		p.TopicAlias, err = s.u16("topic alias")
		if err == nil && p.TopicAlias == 0 {
			err = errorf(ErrTopicAliasInvalid, s.t, "topic alias 0") // [MQTT-3.3.2-8]
		}
	case PropSessionExpiry:
		p.SessionExpiry, err = s.u32("session expiry interval")
	case PropAssignedClientID:
		p.AssignedClientID, err = s.str("assigned client identifier")
	case PropServerKeepAlive:
		p.ServerKeepAlive, err = s.u16("server keep alive")
	case PropAuthMethod:
		p.AuthMethod, err = s.str("authentication method")
	case PropAuthData:
		p.AuthData, err = s.binary("authentication data")
	case PropRequestProblemInfo:
		p.RequestProblemInfo, err = s.flag("request problem information")
	case PropWillDelay:
		p.WillDelay, err = s.u32("will delay interval")
	case PropRequestResponseInfo:
		p.RequestResponseInfo, err = s.flag("request response information")
	case PropResponseInfo:
		p.ResponseInfo, err = s.str("response information")
	case PropServerReference:
		p.ServerReference, err = s.str("server reference")
	case PropReasonString:
		p.ReasonString, err = s.str("reason string")
	case PropReceiveMaximum:
		p.ReceiveMaximum, err = s.u16("receive maximum")
		if err == nil && p.ReceiveMaximum == 0 {
			err = errorf(ErrProtocol, s.t, "receive maximum 0") // MQTT 5.0 section 3.1.2.11.3
		}
	case PropTopicAliasMaximum:
		p.TopicAliasMaximum, err = s.u16("topic alias maximum")
	case PropMaximumQoS:
		p.MaximumQoS, err = s.flag("maximum QoS")
	case PropRetainAvailable:
		p.RetainAvailable, err = s.flag("retain available")
	case PropUserProperty:
		var up UserProperty
		if up.Key, err = s.str("user property name"); err == nil {
			up.Value, err = s.str("user property value")
		}
		p.UserProperties = append(p.UserProperties, up)
	case PropMaximumPacketSize:
		p.MaximumPacketSize, err = s.u32("maximum packet size")
		if err == nil && p.MaximumPacketSize == 0 {
			err = errorf(ErrProtocol, s.t, "maximum packet size 0")
		}
	case PropWildcardSubAvailable:
		p.WildcardSubAvailable, err = s.flag("wildcard subscription available")
	case PropSubIDAvailable:
		p.SubIDAvailable, err = s.flag("subscription identifier available")
	case PropSharedSubAvailable:
		p.SharedSubAvailable, err = s.flag("shared subscription available")
	}
	return err
}

// flag reads a byte property whose only valid values are 0 and 1; any other
// value is a protocol error.
func (d *decoder) flag(field string) (byte, error) {
	v, err := d.u8(field)
	if err == nil && v > 1 {
		return 0, errorf(ErrProtocol, d.t, field+" must be 0 or 1")
	}
	return v, err
}

func hex2(b byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[b>>4], digits[b&15]})
}

// present returns the properties Append will write.
func (p *Properties) present() PropMask {
	m := p.Has
	set := func(id PropID, b []byte) {
		if b != nil {
			m.Set(id)
		}
	}
	set(PropContentType, p.ContentType)
	set(PropResponseTopic, p.ResponseTopic)
	set(PropCorrelationData, p.CorrelationData)
	set(PropAssignedClientID, p.AssignedClientID)
	set(PropAuthMethod, p.AuthMethod)
	set(PropAuthData, p.AuthData)
	set(PropResponseInfo, p.ResponseInfo)
	set(PropServerReference, p.ServerReference)
	set(PropReasonString, p.ReasonString)
	if len(p.SubscriptionIDs) > 0 {
		m.Set(PropSubscriptionID)
	} else {
		m &^= Mask(PropSubscriptionID)
	}
	if len(p.UserProperties) > 0 {
		m.Set(PropUserProperty)
	} else {
		m &^= Mask(PropUserProperty)
	}
	return m
}

// encodedLen returns the size of the properties (without their length
// prefix) and checks that they fit the packet type t.
func (p *Properties) encodedLen(t Type, allowed PropMask) (PropMask, int, error) {
	m := p.present()
	if m&^allowed != 0 {
		return 0, 0, errorf(ErrMalformed, t, "property not valid in this packet")
	}
	if m == 0 {
		return 0, 0, nil
	}
	n := 0
	str := func(id PropID, b []byte) error {
		if m.Has(id) {
			if len(b) > 65535 {
				return errorf(ErrMalformed, t, "property longer than 65,535 bytes")
			}
			n += 3 + len(b)
		}
		return nil
	}
	fixed := func(id PropID, size int) {
		if m.Has(id) {
			n += 1 + size
		}
	}
	fixed(PropPayloadFormat, 1)
	fixed(PropMessageExpiry, 4)
	fixed(PropTopicAlias, 2)
	fixed(PropSessionExpiry, 4)
	fixed(PropServerKeepAlive, 2)
	fixed(PropRequestProblemInfo, 1)
	fixed(PropWillDelay, 4)
	fixed(PropRequestResponseInfo, 1)
	fixed(PropReceiveMaximum, 2)
	fixed(PropTopicAliasMaximum, 2)
	fixed(PropMaximumQoS, 1)
	fixed(PropRetainAvailable, 1)
	fixed(PropMaximumPacketSize, 4)
	fixed(PropWildcardSubAvailable, 1)
	fixed(PropSubIDAvailable, 1)
	fixed(PropSharedSubAvailable, 1)
	for _, e := range []error{
		str(PropContentType, p.ContentType), str(PropResponseTopic, p.ResponseTopic),
		str(PropCorrelationData, p.CorrelationData), str(PropAssignedClientID, p.AssignedClientID),
		str(PropAuthMethod, p.AuthMethod), str(PropAuthData, p.AuthData),
		str(PropResponseInfo, p.ResponseInfo), str(PropServerReference, p.ServerReference),
		str(PropReasonString, p.ReasonString),
	} {
		if e != nil {
			return 0, 0, e
		}
	}
	if t == TypeSubscribe && len(p.SubscriptionIDs) > 1 {
		return 0, 0, errorf(ErrProtocol, t, "more than one subscription identifier")
	}
	for _, id := range p.SubscriptionIDs {
		if id == 0 || id > MaxSubscriptionID {
			return 0, 0, errorf(ErrProtocol, t, "subscription identifier out of range")
		}
		n += 1 + varintLen(int(id))
	}
	for _, up := range p.UserProperties {
		if len(up.Key) > 65535 || len(up.Value) > 65535 {
			return 0, 0, errorf(ErrMalformed, t, "user property longer than 65,535 bytes")
		}
		n += 5 + len(up.Key) + len(up.Value)
	}
	return m, n, nil
}

// appendProps appends the property length n and the properties in m, in
// identifier order. m and n come from encodedLen.
func (p *Properties) appendProps(dst []byte, m PropMask, n int) []byte {
	dst = appendVarint(dst, n)
	if m == 0 {
		return dst
	}
	u8 := func(id PropID, v byte) {
		if m.Has(id) {
			dst = append(dst, byte(id), v)
		}
	}
	u16 := func(id PropID, v uint16) {
		if m.Has(id) {
			dst = appendUint16(append(dst, byte(id)), v)
		}
	}
	u32 := func(id PropID, v uint32) {
		if m.Has(id) {
			dst = appendUint32(append(dst, byte(id)), v)
		}
	}
	bin := func(id PropID, v []byte) {
		if m.Has(id) {
			dst = appendBinary(append(dst, byte(id)), v)
		}
	}
	u8(PropPayloadFormat, p.PayloadFormat)
	u32(PropMessageExpiry, p.MessageExpiry)
	bin(PropContentType, p.ContentType)
	bin(PropResponseTopic, p.ResponseTopic)
	bin(PropCorrelationData, p.CorrelationData)
	for _, id := range p.SubscriptionIDs {
		dst = appendVarint(append(dst, byte(PropSubscriptionID)), int(id))
	}
	u32(PropSessionExpiry, p.SessionExpiry)
	bin(PropAssignedClientID, p.AssignedClientID)
	u16(PropServerKeepAlive, p.ServerKeepAlive)
	bin(PropAuthMethod, p.AuthMethod)
	bin(PropAuthData, p.AuthData)
	u8(PropRequestProblemInfo, p.RequestProblemInfo)
	u32(PropWillDelay, p.WillDelay)
	u8(PropRequestResponseInfo, p.RequestResponseInfo)
	bin(PropResponseInfo, p.ResponseInfo)
	bin(PropServerReference, p.ServerReference)
	bin(PropReasonString, p.ReasonString)
	u16(PropReceiveMaximum, p.ReceiveMaximum)
	u16(PropTopicAliasMaximum, p.TopicAliasMaximum)
	u16(PropTopicAlias, p.TopicAlias)
	u8(PropMaximumQoS, p.MaximumQoS)
	u8(PropRetainAvailable, p.RetainAvailable)
	for _, up := range p.UserProperties {
		dst = appendBinary(append(dst, byte(PropUserProperty)), up.Key)
		dst = appendBinary(dst, up.Value)
	}
	u32(PropMaximumPacketSize, p.MaximumPacketSize)
	u8(PropWildcardSubAvailable, p.WildcardSubAvailable)
	u8(PropSubIDAvailable, p.SubIDAvailable)
	u8(PropSharedSubAvailable, p.SharedSubAvailable)
	return dst
}
