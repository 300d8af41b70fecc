package packet

// fixedFlags holds the required low nibble of the first byte for every
// packet type but PUBLISH [MQTT-2.1.3-1].
var fixedFlags = [16]byte{TypePubrel: 2, TypeSubscribe: 2, TypeUnsubscribe: 2}

// Check validates the fixed header on its own: the type must not be 0, the
// reserved flag bits must hold their fixed values [MQTT-2.1.3-1], a PUBLISH
// must not have QoS 3 [MQTT-3.3.1-4] and the remaining length must fit in
// four bytes. Failures are ErrMalformed.
func (fh FixedHeader) Check() error {
	switch {
	case fh.Type == TypeReserved || fh.Type > TypeAuth:
		return errorf(ErrMalformed, fh.Type, "reserved packet type")
	case fh.Remaining < 0 || fh.Remaining > MaxRemaining:
		return errorf(ErrMalformed, fh.Type, "remaining length out of range")
	case fh.Type == TypePublish:
		if fh.Flags&0x06 == 0x06 {
			return errorf(ErrMalformed, fh.Type, "QoS 3") // [MQTT-3.3.1-4]
		}
	case fh.Flags != fixedFlags[fh.Type]:
		return errorf(ErrMalformed, fh.Type, "reserved fixed header flags") // [MQTT-2.1.3-1]
	}
	return nil
}

// ParseFixedHeader parses the fixed header at the start of b and returns it
// with its size in bytes. n is 0 (and err nil) when b ends before the header
// does. A remaining length longer than four bytes or not in its shortest
// form is ErrMalformed [MQTT-1.5.5-1]; the header is also validated with
// Check.
func ParseFixedHeader(b []byte) (fh FixedHeader, n int, err error) {
	if len(b) < 2 {
		return FixedHeader{}, 0, nil
	}
	fh.Type = Type(b[0] >> 4)
	fh.Flags = b[0] & 0x0F
	rem, vn := parseVarint(b[1:])
	if vn == 0 {
		return FixedHeader{}, 0, nil
	}
	if vn < 0 {
		return fh, 0, errorf(ErrMalformed, fh.Type, "malformed remaining length")
	}
	fh.Remaining = rem
	if err := fh.Check(); err != nil {
		return fh, 0, err
	}
	return fh, 1 + vn, nil
}

// checkFixed is the common prologue of every Decode: the header must be the
// expected type with valid flags, and body must be exactly the remaining
// length.
func checkFixed(version byte, fh FixedHeader, want Type, body []byte) error {
	if fh.Type != want {
		return errorf(ErrProtocol, want, "header is "+fh.Type.String())
	}
	if err := checkVersion(version, want); err != nil {
		return err
	}
	if err := fh.Check(); err != nil {
		return err
	}
	if len(body) != fh.Remaining {
		return errorf(ErrMalformed, want, "body length differs from remaining length")
	}
	return nil
}

func checkVersion(version byte, t Type) error {
	if version < Version31 || version > Version5 {
		return errorf(ErrUnsupportedProtocolVersion, t, "unknown protocol version")
	}
	if t == TypeAuth && version < Version5 {
		return errorf(ErrProtocol, t, "AUTH before MQTT 5")
	}
	return nil
}

// Size returns the size of the whole packet: fixed header plus body. This
// is what an MQTT 5 Maximum Packet Size limits.
func (fh FixedHeader) Size() int { return headerLen(fh.Remaining) + fh.Remaining }

// headerLen is the size of a fixed header for the given remaining length.
func headerLen(remaining int) int { return 1 + varintLen(remaining) }
