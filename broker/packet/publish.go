package packet

import (
	"encoding/binary"
	"unicode/utf8"
)

// PUBLISH fixed header flags (MQTT 5.0 section 3.3.1).
const (
	publishRetain = 0x01
	publishQoS    = 0x06
	publishDup    = 0x08
)

// Decode parses a PUBLISH body. Topic, Payload and property byte slices
// alias body. Rules that depend on direction or session state are the
// caller's: a client must not send a subscription identifier
// [MQTT-3.3.4-6], a topic alias must not exceed the negotiated maximum, and
// an empty topic needs a known alias.
func (p *Publish) Decode(version byte, fh FixedHeader, body []byte) error {
	if err := checkFixed(version, fh, TypePublish, body); err != nil {
		return err
	}
	p.Dup = fh.Flags&publishDup != 0
	p.QoS = fh.Flags & publishQoS >> 1
	p.Retain = fh.Flags&publishRetain != 0
	if p.QoS == 0 && p.Dup {
		return errorf(ErrMalformed, TypePublish, "DUP set on a QoS 0 message") // [MQTT-3.3.1-2]
	}
	d := decoder{b: body, t: TypePublish}
	var err error
	if p.Topic, err = d.binary("topic name"); err != nil {
		return err
	}
	if err := checkTopicName(p.Topic); err != nil {
		return err
	}
	p.PacketID = 0
	if p.QoS > 0 {
		if p.PacketID, err = d.u16("packet identifier"); err != nil {
			return err
		}
		if p.PacketID == 0 {
			return errorf(ErrProtocol, TypePublish, "packet identifier 0") // [MQTT-2.2.1-3]
		}
	}
	if version == Version5 {
		if err := p.Props.decode(&d, allowPublish); err != nil {
			return err
		}
	} else {
		p.Props.Reset()
	}
	if len(p.Topic) == 0 && !p.Props.Has.Has(PropTopicAlias) {
		return errorf(ErrProtocol, TypePublish, "empty topic name without topic alias") // [MQTT-4.7.3-1] [MQTT-3.3.2-1]
	}
	p.Payload = d.rest()
	return nil
}

// checkTopicName checks a PUBLISH topic name in one pass: no U+0000, valid
// UTF-8 [MQTT-1.5.4-1] [MQTT-1.5.4-2] and no wildcards [MQTT-3.3.2-2].
func checkTopicName(b []byte) error {
	ascii := true
	for _, c := range b {
		switch {
		case c == '+' || c == '#':
			return errorf(ErrTopicNameInvalid, TypePublish, "wildcard in topic name")
		case c == 0:
			return errorf(ErrMalformed, TypePublish, "U+0000 in topic name")
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	if !ascii && !utf8.Valid(b) {
		return errorf(ErrMalformed, TypePublish, "topic name is not valid UTF-8")
	}
	return nil
}

// Append encodes the whole PUBLISH. A QoS 1 or 2 message needs a non-zero
// PacketID. The topic is not re-validated; it is the caller's (usually a
// decoded one).
func (p *Publish) Append(dst []byte, version byte) ([]byte, error) {
	if p.QoS > 0 && p.PacketID == 0 {
		return dst, errorf(ErrProtocol, TypePublish, "packet identifier 0") // [MQTT-2.2.1-3]
	}
	dst, err := p.AppendHeader(dst, version)
	if err != nil {
		return dst, err
	}
	return append(dst, p.Payload...), nil
}

// AppendHeader encodes everything of the PUBLISH except the payload: the
// fixed header (whose remaining length counts the payload), topic, packet
// identifier and properties. The packet on the wire is the header followed
// by p.Payload, so fan-out can write net.Buffers{header, payload} and share
// one payload among all subscribers. A zero PacketID is allowed here so a
// header can be built once and stamped per subscriber with SetPacketID.
func (p *Publish) AppendHeader(dst []byte, version byte) ([]byte, error) {
	if err := checkVersion(version, TypePublish); err != nil {
		return dst, err
	}
	if p.QoS > 2 {
		return dst, errorf(ErrMalformed, TypePublish, "QoS above 2")
	}
	if p.Dup && p.QoS == 0 {
		return dst, errorf(ErrMalformed, TypePublish, "DUP set on a QoS 0 message")
	}
	if len(p.Topic) > 65535 {
		return dst, errorf(ErrMalformed, TypePublish, "topic longer than 65,535 bytes")
	}
	n := 2 + len(p.Topic) + len(p.Payload)
	if p.QoS > 0 {
		n += 2
	}
	var pm PropMask
	var pn int
	if version == Version5 {
		var err error
		if pm, pn, err = p.Props.encodedLen(TypePublish, allowPublish); err != nil {
			return dst, err
		}
		n += varintLen(pn) + pn
	}
	if len(p.Topic) == 0 && !pm.Has(PropTopicAlias) {
		return dst, errorf(ErrProtocol, TypePublish, "empty topic name without topic alias")
	}
	if err := checkRemaining(TypePublish, n); err != nil {
		return dst, err
	}
	flags := p.QoS << 1
	if p.Dup {
		flags |= publishDup
	}
	if p.Retain {
		flags |= publishRetain
	}
	dst = appendFixedHeader(dst, TypePublish, flags, n)
	dst = appendBinary(dst, p.Topic)
	if p.QoS > 0 {
		dst = appendUint16(dst, p.PacketID)
	}
	if version == Version5 {
		dst = p.Props.appendProps(dst, pm, pn)
	}
	return dst, nil
}

// PacketIDOffset returns the offset of the 2-byte packet identifier in an
// encoded PUBLISH (or a header from AppendHeader). ok is false when b is
// not a PUBLISH with QoS 1 or 2 or is too short.
func PacketIDOffset(b []byte) (off int, ok bool) {
	fh, n, err := ParseFixedHeader(b)
	if err != nil || n == 0 || fh.Type != TypePublish || fh.Flags&publishQoS == 0 || len(b) < n+2 {
		return 0, false
	}
	off = n + 2 + int(binary.BigEndian.Uint16(b[n:]))
	if len(b) < off+2 {
		return 0, false
	}
	return off, true
}

// SetPacketID overwrites the packet identifier of an encoded QoS 1 or 2
// PUBLISH in place. It reports false when b has no packet identifier.
func SetPacketID(b []byte, id uint16) bool {
	off, ok := PacketIDOffset(b)
	if ok {
		binary.BigEndian.PutUint16(b[off:], id)
	}
	return ok
}

// SetPublishFlags overwrites the DUP and RETAIN bits of an encoded PUBLISH
// in place (QoS cannot change: it changes the packet length). It reports
// false when b is not a PUBLISH or dup is set on QoS 0.
func SetPublishFlags(b []byte, dup, retain bool) bool {
	if len(b) == 0 || Type(b[0]>>4) != TypePublish || (dup && b[0]&publishQoS == 0) {
		return false
	}
	b[0] &^= publishDup | publishRetain
	if dup {
		b[0] |= publishDup
	}
	if retain {
		b[0] |= publishRetain
	}
	return true
}
