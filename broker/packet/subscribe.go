package packet

import "bytes"

// sharePrefix starts a shared subscription filter (MQTT 5.0 section 4.8.2).
var sharePrefix = []byte("$share/")

// Subscription option bits (MQTT 5.0 section 3.8.3.1).
const (
	subQoS               = 0x03
	subNoLocal           = 0x04
	subRetainAsPublished = 0x08
	subRetainHandling    = 0x30
	subReservedV5        = 0xC0
	subReservedV3        = 0xFC
)

// decodePacketID reads a packet identifier that must not be 0 [MQTT-2.2.1-3].
func decodePacketID(d *decoder) (uint16, error) {
	id, err := d.u16("packet identifier")
	if err == nil && id == 0 {
		err = errorf(ErrProtocol, d.t, "packet identifier 0")
	}
	return id, err
}

// Decode parses a SUBSCRIBE body. Filters alias body; they are checked to be
// non-empty MQTT UTF-8 but wildcard placement is left to the caller (see
// ValidTopicFilter) so that MQTT 5 can refuse one filter in the SUBACK.
func (s *Subscribe) Decode(version byte, fh FixedHeader, body []byte) error {
	if err := checkFixed(version, fh, TypeSubscribe, body); err != nil { // [MQTT-3.8.1-1]
		return err
	}
	d := decoder{b: body, t: TypeSubscribe}
	s.Subscriptions = s.Subscriptions[:0]
	var err error
	if s.PacketID, err = decodePacketID(&d); err != nil {
		return err
	}
	if version == Version5 {
		if err := s.Props.decode(&d, allowSubscribe); err != nil {
			return err
		}
	} else {
		s.Props.Reset()
	}
	if d.left() == 0 {
		return errorf(ErrProtocol, TypeSubscribe, "no topic filters") // [MQTT-3.8.3-3]
	}
	for d.left() > 0 {
		var sub Subscription
		if sub.Filter, err = d.str("topic filter"); err != nil { // [MQTT-3.8.3-1]
			return err
		}
		if len(sub.Filter) == 0 {
			return errorf(ErrTopicFilterInvalid, TypeSubscribe, "empty topic filter") // [MQTT-4.7.3-1]
		}
		opts, err := d.u8("subscription options")
		if err != nil {
			return err
		}
		reserved := byte(subReservedV5)
		if version < Version5 {
			reserved = subReservedV3
		}
		if opts&reserved != 0 {
			return errorf(ErrMalformed, TypeSubscribe, "reserved subscription option bits set") // [MQTT-3-8.3-4] [MQTT-3.8.3-5]
		}
		sub.QoS = opts & subQoS
		if sub.QoS == 3 {
			return errorf(ErrMalformed, TypeSubscribe, "QoS 3") // [MQTT-3-8.3-4]
		}
		sub.NoLocal = opts&subNoLocal != 0
		sub.RetainAsPublished = opts&subRetainAsPublished != 0
		sub.RetainHandling = opts & subRetainHandling >> 4
		if sub.RetainHandling == 3 {
			return errorf(ErrProtocol, TypeSubscribe, "retain handling 3") // section 3.8.3.1
		}
		if sub.NoLocal && bytes.HasPrefix(sub.Filter, sharePrefix) {
			return errorf(ErrProtocol, TypeSubscribe, "no local on a shared subscription") // [MQTT-3.8.3-4] (5.0)
		}
		s.Subscriptions = append(s.Subscriptions, sub)
	}
	return nil
}

// Append encodes the SUBSCRIBE. MQTT 5 options are dropped for older
// versions.
func (s *Subscribe) Append(dst []byte, version byte) ([]byte, error) {
	if err := checkVersion(version, TypeSubscribe); err != nil {
		return dst, err
	}
	if s.PacketID == 0 {
		return dst, errorf(ErrProtocol, TypeSubscribe, "packet identifier 0")
	}
	if len(s.Subscriptions) == 0 {
		return dst, errorf(ErrProtocol, TypeSubscribe, "no topic filters")
	}
	n := 2
	for i := range s.Subscriptions {
		sub := &s.Subscriptions[i]
		if len(sub.Filter) == 0 || len(sub.Filter) > 65535 {
			return dst, errorf(ErrTopicFilterInvalid, TypeSubscribe, "topic filter length out of range")
		}
		if sub.QoS > 2 || sub.RetainHandling > 2 {
			return dst, errorf(ErrMalformed, TypeSubscribe, "QoS or retain handling out of range")
		}
		n += 3 + len(sub.Filter)
	}
	var pm PropMask
	var pn int
	if version == Version5 {
		var err error
		if pm, pn, err = s.Props.encodedLen(TypeSubscribe, allowSubscribe); err != nil {
			return dst, err
		}
		n += varintLen(pn) + pn
	}
	if err := checkRemaining(TypeSubscribe, n); err != nil {
		return dst, err
	}
	dst = appendFixedHeader(dst, TypeSubscribe, fixedFlags[TypeSubscribe], n)
	dst = appendUint16(dst, s.PacketID)
	if version == Version5 {
		dst = s.Props.appendProps(dst, pm, pn)
	}
	for i := range s.Subscriptions {
		sub := &s.Subscriptions[i]
		opts := sub.QoS
		if version == Version5 {
			if sub.NoLocal {
				opts |= subNoLocal
			}
			if sub.RetainAsPublished {
				opts |= subRetainAsPublished
			}
			opts |= sub.RetainHandling << 4
		}
		dst = append(appendBinary(dst, sub.Filter), opts)
	}
	return dst, nil
}

// Decode parses a SUBACK body.
func (s *Suback) Decode(version byte, fh FixedHeader, body []byte) error {
	if err := checkFixed(version, fh, TypeSuback, body); err != nil {
		return err
	}
	d := decoder{b: body, t: TypeSuback}
	s.Reasons = s.Reasons[:0]
	var err error
	if s.PacketID, err = decodePacketID(&d); err != nil {
		return err
	}
	valid := &subackV3Reasons
	if version == Version5 {
		valid = &subackReasons
		if err := s.Props.decode(&d, allowAck); err != nil {
			return err
		}
	} else {
		s.Props.Reset()
	}
	if d.left() == 0 {
		return errorf(ErrProtocol, TypeSuback, "no reason codes")
	}
	for _, c := range d.rest() {
		if !valid.has(ReasonCode(c)) {
			return errorf(ErrProtocol, TypeSuback, "reason code not valid in SUBACK") // [MQTT-3.9.3-2]
		}
		s.Reasons = append(s.Reasons, ReasonCode(c))
	}
	return nil
}

// Append encodes the SUBACK. For 3.1.1 every failure code is sent as 0x80.
func (s *Suback) Append(dst []byte, version byte) ([]byte, error) {
	return appendAckList(dst, version, TypeSuback, s.PacketID, &s.Props, s.Reasons, &subackReasons)
}

// appendAckList encodes SUBACK and UNSUBACK.
func appendAckList(dst []byte, version byte, t Type, id uint16, props *Properties, reasons []ReasonCode, valid *codeSet) ([]byte, error) {
	if err := checkVersion(version, t); err != nil {
		return dst, err
	}
	if id == 0 {
		return dst, errorf(ErrProtocol, t, "packet identifier 0")
	}
	if version < Version5 && t == TypeUnsuback {
		dst = appendFixedHeader(dst, t, 0, 2)
		return appendUint16(dst, id), nil
	}
	if len(reasons) == 0 {
		return dst, errorf(ErrProtocol, t, "no reason codes")
	}
	for _, c := range reasons {
		if !valid.has(c) {
			return dst, errorf(ErrProtocol, t, "reason code not valid in this packet")
		}
	}
	n := 2 + len(reasons)
	var pm PropMask
	var pn int
	if version == Version5 {
		var err error
		if pm, pn, err = props.encodedLen(t, allowAck); err != nil {
			return dst, err
		}
		n += varintLen(pn) + pn
	}
	if err := checkRemaining(t, n); err != nil {
		return dst, err
	}
	dst = appendFixedHeader(dst, t, 0, n)
	dst = appendUint16(dst, id)
	if version == Version5 {
		dst = props.appendProps(dst, pm, pn)
		for _, c := range reasons {
			dst = append(dst, byte(c))
		}
		return dst, nil
	}
	for _, c := range reasons {
		if c.IsFailure() {
			c = ErrUnspecified
		}
		dst = append(dst, byte(c))
	}
	return dst, nil
}

// Decode parses an UNSUBSCRIBE body. Filters alias body.
func (u *Unsubscribe) Decode(version byte, fh FixedHeader, body []byte) error {
	if err := checkFixed(version, fh, TypeUnsubscribe, body); err != nil { // [MQTT-3.10.1-1]
		return err
	}
	d := decoder{b: body, t: TypeUnsubscribe}
	u.Filters = u.Filters[:0]
	var err error
	if u.PacketID, err = decodePacketID(&d); err != nil {
		return err
	}
	if version == Version5 {
		if err := u.Props.decode(&d, allowUnsubscribe); err != nil {
			return err
		}
	} else {
		u.Props.Reset()
	}
	if d.left() == 0 {
		return errorf(ErrProtocol, TypeUnsubscribe, "no topic filters") // [MQTT-3.10.3-2]
	}
	for d.left() > 0 {
		f, err := d.str("topic filter") // [MQTT-3.10.3-1]
		if err != nil {
			return err
		}
		if len(f) == 0 {
			return errorf(ErrTopicFilterInvalid, TypeUnsubscribe, "empty topic filter") // [MQTT-4.7.3-1]
		}
		u.Filters = append(u.Filters, f)
	}
	return nil
}

// Append encodes the UNSUBSCRIBE.
func (u *Unsubscribe) Append(dst []byte, version byte) ([]byte, error) {
	if err := checkVersion(version, TypeUnsubscribe); err != nil {
		return dst, err
	}
	if u.PacketID == 0 {
		return dst, errorf(ErrProtocol, TypeUnsubscribe, "packet identifier 0")
	}
	if len(u.Filters) == 0 {
		return dst, errorf(ErrProtocol, TypeUnsubscribe, "no topic filters")
	}
	n := 2
	for _, f := range u.Filters {
		if len(f) == 0 || len(f) > 65535 {
			return dst, errorf(ErrTopicFilterInvalid, TypeUnsubscribe, "topic filter length out of range")
		}
		n += 2 + len(f)
	}
	var pm PropMask
	var pn int
	if version == Version5 {
		var err error
		if pm, pn, err = u.Props.encodedLen(TypeUnsubscribe, allowUnsubscribe); err != nil {
			return dst, err
		}
		n += varintLen(pn) + pn
	}
	if err := checkRemaining(TypeUnsubscribe, n); err != nil {
		return dst, err
	}
	dst = appendFixedHeader(dst, TypeUnsubscribe, fixedFlags[TypeUnsubscribe], n)
	dst = appendUint16(dst, u.PacketID)
	if version == Version5 {
		dst = u.Props.appendProps(dst, pm, pn)
	}
	for _, f := range u.Filters {
		dst = appendBinary(dst, f)
	}
	return dst, nil
}

// Decode parses an UNSUBACK body. Before MQTT 5 it holds only the packet
// identifier.
func (u *Unsuback) Decode(version byte, fh FixedHeader, body []byte) error {
	if err := checkFixed(version, fh, TypeUnsuback, body); err != nil {
		return err
	}
	d := decoder{b: body, t: TypeUnsuback}
	u.Reasons = u.Reasons[:0]
	var err error
	if u.PacketID, err = decodePacketID(&d); err != nil {
		return err
	}
	if version < Version5 {
		u.Props.Reset()
		if d.left() != 0 {
			return errorf(ErrMalformed, TypeUnsuback, "remaining length is not 2")
		}
		return nil
	}
	if err := u.Props.decode(&d, allowAck); err != nil {
		return err
	}
	if d.left() == 0 {
		return errorf(ErrProtocol, TypeUnsuback, "no reason codes")
	}
	for _, c := range d.rest() {
		if !unsubackReasons.has(ReasonCode(c)) {
			return errorf(ErrProtocol, TypeUnsuback, "reason code not valid in UNSUBACK")
		}
		u.Reasons = append(u.Reasons, ReasonCode(c))
	}
	return nil
}

// Append encodes the UNSUBACK; Reasons are dropped before MQTT 5.
func (u *Unsuback) Append(dst []byte, version byte) ([]byte, error) {
	return appendAckList(dst, version, TypeUnsuback, u.PacketID, &u.Props, u.Reasons, &unsubackReasons)
}
