package packet

// Decode parses a PUBACK, PUBREC, PUBREL or PUBCOMP body; Type is taken
// from fh.
func (a *Ack) Decode(version byte, fh FixedHeader, body []byte) error {
	if fh.Type < TypePuback || fh.Type > TypePubcomp {
		return errorf(ErrProtocol, fh.Type, "not an acknowledgement")
	}
	if err := checkFixed(version, fh, fh.Type, body); err != nil {
		return err
	}
	a.Type = fh.Type
	a.Reason = CodeSuccess
	d := decoder{b: body, t: fh.Type}
	var err error
	if a.PacketID, err = d.u16("packet identifier"); err != nil {
		return err
	}
	if a.PacketID == 0 {
		return errorf(ErrProtocol, a.Type, "packet identifier 0") // [MQTT-2.2.1-3]
	}
	if version < Version5 {
		a.Props.Reset()
		if d.left() != 0 {
			return errorf(ErrMalformed, a.Type, "remaining length is not 2")
		}
		return nil
	}
	// MQTT 5: the reason code and properties may be omitted
	// (sections 3.4.2.1, 3.5.2.1, 3.6.2.1, 3.7.2.1).
	if err := decodeReasonProps(&d, &a.Reason, &a.Props, ackReasons(a.Type), allowAck); err != nil {
		return err
	}
	return nil
}

func ackReasons(t Type) *codeSet {
	if t == TypePuback || t == TypePubrec {
		return &pubackReasons
	}
	return &pubrelReasons
}

// decodeReasonProps reads an optional reason code and optional properties,
// the tail shared by MQTT 5 acks, DISCONNECT and AUTH.
func decodeReasonProps(d *decoder, reason *ReasonCode, props *Properties, valid *codeSet, allowed PropMask) error {
	props.Reset()
	*reason = CodeSuccess
	if d.left() == 0 {
		return nil
	}
	*reason = ReasonCode(d.b[d.off])
	d.off++
	if !valid.has(*reason) {
		return errorf(ErrProtocol, d.t, "reason code "+(*reason).Error()[len("packet: "):]+" not valid in this packet")
	}
	if d.left() == 0 {
		return nil
	}
	if err := props.decode(d, allowed); err != nil {
		return err
	}
	if d.left() != 0 {
		return errorf(ErrMalformed, d.t, "bytes after the properties")
	}
	return nil
}

// Append encodes the acknowledgement, in MQTT 5 in its shortest form: the
// reason code is omitted when it is 0 and there are no properties.
func (a *Ack) Append(dst []byte, version byte) ([]byte, error) {
	if a.Type < TypePuback || a.Type > TypePubcomp {
		return dst, errorf(ErrProtocol, a.Type, "not an acknowledgement")
	}
	if err := checkVersion(version, a.Type); err != nil {
		return dst, err
	}
	if a.PacketID == 0 {
		return dst, errorf(ErrProtocol, a.Type, "packet identifier 0")
	}
	if version < Version5 {
		dst = appendFixedHeader(dst, a.Type, fixedFlags[a.Type], 2)
		return appendUint16(dst, a.PacketID), nil
	}
	if !ackReasons(a.Type).has(a.Reason) {
		return dst, errorf(ErrProtocol, a.Type, "reason code not valid in this packet")
	}
	pm, pn, err := a.Props.encodedLen(a.Type, allowAck)
	if err != nil {
		return dst, err
	}
	n := 2 + reasonPropsLen(a.Reason, pm, pn)
	dst = appendFixedHeader(dst, a.Type, fixedFlags[a.Type], n)
	dst = appendUint16(dst, a.PacketID)
	return appendReasonProps(dst, a.Reason, &a.Props, pm, pn), nil
}

// reasonPropsLen is the size of an optional reason code and properties.
func reasonPropsLen(r ReasonCode, pm PropMask, pn int) int {
	switch {
	case pm != 0:
		return 1 + varintLen(pn) + pn
	case r != CodeSuccess:
		return 1
	}
	return 0
}

func appendReasonProps(dst []byte, r ReasonCode, p *Properties, pm PropMask, pn int) []byte {
	switch {
	case pm != 0:
		return p.appendProps(append(dst, byte(r)), pm, pn)
	case r != CodeSuccess:
		return append(dst, byte(r))
	}
	return dst
}

// Decode parses a CONNACK body. In 3.1.1 the return code is mapped onto
// Reason with ReasonFromConnackV3.
func (c *Connack) Decode(version byte, fh FixedHeader, body []byte) error {
	if err := checkFixed(version, fh, TypeConnack, body); err != nil {
		return err
	}
	d := decoder{b: body, t: TypeConnack}
	flags, err := d.u8("acknowledge flags")
	if err != nil {
		return err
	}
	if flags&^1 != 0 {
		return errorf(ErrMalformed, TypeConnack, "reserved acknowledge flags set") // [MQTT-3.2.2-1]
	}
	c.SessionPresent = flags == 1
	rc, err := d.u8("reason code")
	if err != nil {
		return err
	}
	if version < Version5 {
		c.Props.Reset()
		var ok bool
		if c.Reason, ok = ReasonFromConnackV3(rc); !ok {
			return errorf(ErrProtocol, TypeConnack, "reserved return code")
		}
		if d.left() != 0 {
			return errorf(ErrMalformed, TypeConnack, "remaining length is not 2")
		}
	} else {
		c.Reason = ReasonCode(rc)
		if !connackReasons.has(c.Reason) {
			return errorf(ErrProtocol, TypeConnack, "reason code not valid in CONNACK")
		}
		if err := c.Props.decode(&d, allowConnack); err != nil {
			return err
		}
		if d.left() != 0 {
			return errorf(ErrMalformed, TypeConnack, "bytes after the properties")
		}
	}
	if c.SessionPresent && c.Reason != CodeSuccess {
		return errorf(ErrProtocol, TypeConnack, "session present on a refusal") // [MQTT-3.2.2-4] (3.1.1) [MQTT-3.2.2-6]
	}
	return nil
}

// Append encodes the CONNACK. For 3.1.1 and 3.1 Reason is sent as
// Reason.ConnackV3() and properties are dropped.
func (c *Connack) Append(dst []byte, version byte) ([]byte, error) {
	if err := checkVersion(version, TypeConnack); err != nil {
		return dst, err
	}
	if c.SessionPresent && c.Reason != CodeSuccess {
		return dst, errorf(ErrProtocol, TypeConnack, "session present on a refusal")
	}
	var flags byte
	if c.SessionPresent {
		flags = 1
	}
	if version < Version5 {
		dst = appendFixedHeader(dst, TypeConnack, 0, 2)
		return append(dst, flags, c.Reason.ConnackV3()), nil
	}
	if !connackReasons.has(c.Reason) {
		return dst, errorf(ErrProtocol, TypeConnack, "reason code not valid in CONNACK")
	}
	pm, pn, err := c.Props.encodedLen(TypeConnack, allowConnack)
	if err != nil {
		return dst, err
	}
	dst = appendFixedHeader(dst, TypeConnack, 0, 2+varintLen(pn)+pn)
	dst = append(dst, flags, byte(c.Reason))
	return c.Props.appendProps(dst, pm, pn), nil
}

// Decode parses a DISCONNECT body. Before MQTT 5 the body must be empty.
func (p *Disconnect) Decode(version byte, fh FixedHeader, body []byte) error {
	if err := checkFixed(version, fh, TypeDisconnect, body); err != nil {
		return err
	}
	d := decoder{b: body, t: TypeDisconnect}
	if version < Version5 {
		p.Reason = CodeSuccess
		p.Props.Reset()
		if len(body) != 0 {
			return errorf(ErrMalformed, TypeDisconnect, "remaining length is not 0")
		}
		return nil
	}
	return decodeReasonProps(&d, &p.Reason, &p.Props, &disconnectReasons, allowDisconnect) // section 3.14.2.1
}

// Append encodes the DISCONNECT. In MQTT 5 the reason code is always
// written, even 0x00: the spec allows omitting it (section 3.14.2.1) but
// paho.golang v0.23 fails to parse a DISCONNECT with remaining length 0.
// Properties are omitted when there are none.
func (p *Disconnect) Append(dst []byte, version byte) ([]byte, error) {
	if err := checkVersion(version, TypeDisconnect); err != nil {
		return dst, err
	}
	if version < Version5 {
		return append(dst, byte(TypeDisconnect)<<4, 0), nil
	}
	if !disconnectReasons.has(p.Reason) {
		return dst, errorf(ErrProtocol, TypeDisconnect, "reason code not valid in DISCONNECT")
	}
	pm, pn, err := p.Props.encodedLen(TypeDisconnect, allowDisconnect)
	if err != nil {
		return dst, err
	}
	n := 1
	if pm != 0 {
		n += varintLen(pn) + pn
	}
	dst = appendFixedHeader(dst, TypeDisconnect, 0, n)
	dst = append(dst, byte(p.Reason))
	if pm != 0 {
		dst = p.Props.appendProps(dst, pm, pn)
	}
	return dst, nil
}

// Decode parses an AUTH body (MQTT 5 only). An empty body means Success
// (section 3.15.2.1); any other code must be an authenticate reason code
// [MQTT-3.15.2-1].
func (p *Auth) Decode(version byte, fh FixedHeader, body []byte) error {
	if err := checkFixed(version, fh, TypeAuth, body); err != nil {
		return err
	}
	d := decoder{b: body, t: TypeAuth}
	if err := decodeReasonProps(&d, &p.Reason, &p.Props, &authReasons, allowAuth); err != nil {
		return err
	}
	if p.Props.Has.Has(PropAuthData) && !p.Props.Has.Has(PropAuthMethod) {
		return errorf(ErrProtocol, TypeAuth, "authentication data without method")
	}
	return nil
}

// Append encodes the AUTH packet, in its shortest form.
func (p *Auth) Append(dst []byte, version byte) ([]byte, error) {
	if err := checkVersion(version, TypeAuth); err != nil {
		return dst, err
	}
	if !authReasons.has(p.Reason) {
		return dst, errorf(ErrProtocol, TypeAuth, "reason code not valid in AUTH")
	}
	pm, pn, err := p.Props.encodedLen(TypeAuth, allowAuth)
	if err != nil {
		return dst, err
	}
	dst = appendFixedHeader(dst, TypeAuth, 0, reasonPropsLen(p.Reason, pm, pn))
	return appendReasonProps(dst, p.Reason, &p.Props, pm, pn), nil
}

// Decode checks a PINGREQ or PINGRESP: no flags, no body.
func (p *Ping) Decode(version byte, fh FixedHeader, body []byte) error {
	if fh.Type != TypePingreq && fh.Type != TypePingresp {
		return errorf(ErrProtocol, fh.Type, "not a ping")
	}
	if err := checkFixed(version, fh, fh.Type, body); err != nil {
		return err
	}
	p.Type = fh.Type
	if len(body) != 0 {
		return errorf(ErrMalformed, fh.Type, "remaining length is not 0")
	}
	return nil
}

// Append encodes the 2-byte PINGREQ or PINGRESP.
func (p *Ping) Append(dst []byte, version byte) ([]byte, error) {
	if p.Type != TypePingreq && p.Type != TypePingresp {
		return dst, errorf(ErrProtocol, p.Type, "not a ping")
	}
	if err := checkVersion(version, p.Type); err != nil {
		return dst, err
	}
	return append(dst, byte(p.Type)<<4, 0), nil
}
