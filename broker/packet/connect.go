package packet

import "bytes"

var (
	nameMQTT   = []byte("MQTT")
	nameMQIsdp = []byte("MQIsdp")
)

// CONNECT flag bits (MQTT 5.0 section 3.1.2.3).
const (
	connectReserved   = 0x01
	connectCleanStart = 0x02
	connectWill       = 0x04
	connectWillQoS    = 0x18
	connectWillRetain = 0x20
	connectPassword   = 0x40
	connectUsername   = 0x80
)

// Decode parses a CONNECT body. The version argument is ignored: the
// protocol level in the packet decides. On ErrUnsupportedProtocolVersion,
// Version and ProtocolName are set so the server can pick the CONNACK
// format. On ErrClientIDNotValid every field is decoded.
func (c *Connect) Decode(_ byte, fh FixedHeader, body []byte) error {
	if err := checkFixed(Version311, fh, TypeConnect, body); err != nil {
		return err
	}
	*c = Connect{Props: c.Props, WillProps: c.WillProps}
	c.Props.Reset()
	c.WillProps.Reset()
	d := decoder{b: body, t: TypeConnect}
	var err error
	if c.ProtocolName, err = d.str("protocol name"); err != nil {
		return err
	}
	if c.Version, err = d.u8("protocol level"); err != nil {
		return err
	}
	switch c.Version {
	case Version311, Version5:
		if !bytes.Equal(c.ProtocolName, nameMQTT) {
			return errorf(ErrUnsupportedProtocolVersion, TypeConnect, "protocol name is not MQTT") // [MQTT-3.1.2-1]
		}
	case Version31:
		if !bytes.Equal(c.ProtocolName, nameMQIsdp) {
			return errorf(ErrUnsupportedProtocolVersion, TypeConnect, "protocol name is not MQIsdp")
		}
	default:
		return errorf(ErrUnsupportedProtocolVersion, TypeConnect, "unsupported protocol level") // [MQTT-3.1.2-2]
	}
	flags, err := d.u8("connect flags")
	if err != nil {
		return err
	}
	if flags&connectReserved != 0 {
		return errorf(ErrMalformed, TypeConnect, "reserved connect flag set") // [MQTT-3.1.2-3]
	}
	c.CleanStart = flags&connectCleanStart != 0
	c.WillFlag = flags&connectWill != 0
	c.WillQoS = flags & connectWillQoS >> 3
	c.WillRetain = flags&connectWillRetain != 0
	c.PasswordFlag = flags&connectPassword != 0
	c.UsernameFlag = flags&connectUsername != 0
	if c.WillQoS == 3 {
		return errorf(ErrMalformed, TypeConnect, "will QoS 3") // [MQTT-3.1.2-12]
	}
	if !c.WillFlag && (c.WillQoS != 0 || c.WillRetain) {
		return errorf(ErrMalformed, TypeConnect, "will QoS or retain without will flag") // [MQTT-3.1.2-11] [MQTT-3.1.2-13]
	}
	if c.Version < Version5 && c.PasswordFlag && !c.UsernameFlag {
		return errorf(ErrMalformed, TypeConnect, "password flag without user name flag") // [MQTT-3.1.2-22] (3.1.1)
	}
	if c.KeepAlive, err = d.u16("keep alive"); err != nil {
		return err
	}
	if c.Version == Version5 {
		if err := c.Props.decode(&d, allowConnect); err != nil {
			return err
		}
		if c.Props.Has.Has(PropAuthData) && !c.Props.Has.Has(PropAuthMethod) {
			return errorf(ErrProtocol, TypeConnect, "authentication data without method") // section 3.1.2.11.10
		}
	}
	if c.ClientID, err = d.str("client identifier"); err != nil { // [MQTT-3.1.3-4]
		return err
	}
	if c.WillFlag {
		if c.Version == Version5 {
			if err := c.WillProps.decode(&d, allowWill); err != nil {
				return err
			}
		}
		if c.WillTopic, err = d.str("will topic"); err != nil {
			return err
		}
		if !ValidTopicName(c.WillTopic) {
			return errorf(ErrTopicNameInvalid, TypeConnect, "will topic is not a valid topic name")
		}
		if c.WillPayload, err = d.binary("will payload"); err != nil {
			return err
		}
	}
	if c.UsernameFlag {
		if c.Username, err = d.str("user name"); err != nil { // [MQTT-3.1.3-11]
			return err
		}
	}
	if c.PasswordFlag {
		if c.Password, err = d.binary("password"); err != nil {
			return err
		}
	}
	if d.left() != 0 {
		return errorf(ErrMalformed, TypeConnect, "bytes after the payload")
	}
	if len(c.ClientID) == 0 && c.Version < Version5 && (!c.CleanStart || c.Version == Version31) {
		// [MQTT-3.1.3-8] (3.1.1): an empty client identifier needs a clean
		// session; 3.1 requires 1 to 23 characters.
		return errorf(ErrClientIDNotValid, TypeConnect, "empty client identifier")
	}
	return nil
}

// Append encodes c for the given version; Version and ProtocolName are
// ignored in favour of the argument. Username and Password are written when
// their flag is set or the slice is non-nil.
func (c *Connect) Append(dst []byte, version byte) ([]byte, error) {
	if err := checkVersion(version, TypeConnect); err != nil {
		return dst, err
	}
	name := nameMQTT
	if version == Version31 {
		name = nameMQIsdp
	}
	var flags byte
	if c.CleanStart {
		flags |= connectCleanStart
	}
	if c.WillQoS > 2 {
		return dst, errorf(ErrMalformed, TypeConnect, "will QoS above 2")
	}
	if c.WillFlag {
		flags |= connectWill | c.WillQoS<<3
		if c.WillRetain {
			flags |= connectWillRetain
		}
	} else if c.WillQoS != 0 || c.WillRetain {
		return dst, errorf(ErrMalformed, TypeConnect, "will QoS or retain without will flag")
	}
	hasUser := c.UsernameFlag || c.Username != nil
	hasPass := c.PasswordFlag || c.Password != nil
	if hasUser {
		flags |= connectUsername
	}
	if hasPass {
		if version < Version5 && !hasUser {
			return dst, errorf(ErrMalformed, TypeConnect, "password without user name")
		}
		flags |= connectPassword
	}
	for _, b := range [...][]byte{c.ClientID, c.WillTopic, c.WillPayload, c.Username, c.Password} {
		if len(b) > 65535 {
			return dst, errorf(ErrMalformed, TypeConnect, "field longer than 65,535 bytes")
		}
	}
	n := 2 + len(name) + 1 + 1 + 2 + 2 + len(c.ClientID)
	var pm, wm PropMask
	var pn, wn int
	if version == Version5 {
		var err error
		if pm, pn, err = c.Props.encodedLen(TypeConnect, allowConnect); err != nil {
			return dst, err
		}
		n += varintLen(pn) + pn
		if c.WillFlag {
			if wm, wn, err = c.WillProps.encodedLen(TypeConnect, allowWill); err != nil {
				return dst, err
			}
			n += varintLen(wn) + wn
		}
	}
	if c.WillFlag {
		n += 2 + len(c.WillTopic) + 2 + len(c.WillPayload)
	}
	if hasUser {
		n += 2 + len(c.Username)
	}
	if hasPass {
		n += 2 + len(c.Password)
	}
	if err := checkRemaining(TypeConnect, n); err != nil {
		return dst, err
	}
	dst = appendFixedHeader(dst, TypeConnect, 0, n)
	dst = appendBinary(dst, name)
	dst = append(dst, version, flags)
	dst = appendUint16(dst, c.KeepAlive)
	if version == Version5 {
		dst = c.Props.appendProps(dst, pm, pn)
	}
	dst = appendBinary(dst, c.ClientID)
	if c.WillFlag {
		if version == Version5 {
			dst = c.WillProps.appendProps(dst, wm, wn)
		}
		dst = appendBinary(dst, c.WillTopic)
		dst = appendBinary(dst, c.WillPayload)
	}
	if hasUser {
		dst = appendBinary(dst, c.Username)
	}
	if hasPass {
		dst = appendBinary(dst, c.Password)
	}
	return dst, nil
}
