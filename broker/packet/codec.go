package packet

import (
	"bytes"
	"encoding/binary"
	"unicode/utf8"
)

// decoder walks a packet body. Every read checks bounds; running past the
// end is a malformed packet.
type decoder struct {
	b   []byte
	off int
	t   Type // for error detail
}

func (d *decoder) malformed(detail string) error { return errorf(ErrMalformed, d.t, detail) }

func (d *decoder) left() int { return len(d.b) - d.off }

func (d *decoder) u8(field string) (byte, error) {
	if d.off >= len(d.b) {
		return 0, d.malformed(field + " missing")
	}
	v := d.b[d.off]
	d.off++
	return v, nil
}

func (d *decoder) u16(field string) (uint16, error) {
	if d.left() < 2 {
		return 0, d.malformed(field + " truncated")
	}
	v := binary.BigEndian.Uint16(d.b[d.off:])
	d.off += 2
	return v, nil
}

func (d *decoder) u32(field string) (uint32, error) {
	if d.left() < 4 {
		return 0, d.malformed(field + " truncated")
	}
	v := binary.BigEndian.Uint32(d.b[d.off:])
	d.off += 4
	return v, nil
}

// varint reads a variable byte integer of at most 4 bytes [MQTT-1.5.5-1].
func (d *decoder) varint(field string) (int, error) {
	v, n := parseVarint(d.b[d.off:])
	switch {
	case n == 0:
		return 0, d.malformed(field + " truncated")
	case n < 0:
		return 0, d.malformed(field + " is not a valid variable byte integer")
	}
	d.off += n
	return v, nil
}

// binary reads Binary Data: a 2-byte length and that many bytes. The result
// aliases the body.
func (d *decoder) binary(field string) ([]byte, error) {
	if d.left() < 2 {
		return nil, d.malformed(field + " length truncated")
	}
	n := binary.BigEndian.Uint16(d.b[d.off:])
	d.off += 2
	if d.left() < int(n) {
		return nil, d.malformed(field + " runs past the end of the packet")
	}
	v := d.b[d.off : d.off+int(n) : d.off+int(n)]
	d.off += int(n)
	return v, nil
}

// str reads a UTF-8 Encoded String [MQTT-1.5.4-1] [MQTT-1.5.4-2].
func (d *decoder) str(field string) ([]byte, error) {
	v, err := d.binary(field)
	if err != nil {
		return nil, err
	}
	if !ValidUTF8(v) {
		return nil, d.malformed(field + " is not valid MQTT UTF-8")
	}
	return v, nil
}

// rest returns everything not yet read.
func (d *decoder) rest() []byte {
	v := d.b[d.off:len(d.b):len(d.b)]
	d.off = len(d.b)
	return v
}

// parseVarint decodes a variable byte integer from b. n is the number of
// bytes used, 0 if b ends first, -1 if the encoding is malformed: a fourth
// byte still has the continuation bit set (section 1.5.5: at most 4 bytes),
// or the value is not in its shortest form, which [MQTT-1.5.5-1] requires of
// every sender.
func parseVarint(b []byte) (v, n int) {
	shift := 0
	for i := 0; i < 4; i++ {
		if i >= len(b) {
			return 0, 0
		}
		c := b[i]
		v |= int(c&0x7F) << shift
		if c&0x80 == 0 {
			if c == 0 && i > 0 {
				return 0, -1 // e.g. 0x80 0x00 for 0
			}
			return v, i + 1
		}
		shift += 7
	}
	return 0, -1
}

// varintLen is the encoded size of v (0 <= v <= MaxRemaining).
func varintLen(v int) int {
	switch {
	case v < 128:
		return 1
	case v < 16384:
		return 2
	case v < 2097152:
		return 3
	default:
		return 4
	}
}

func appendVarint(dst []byte, v int) []byte {
	for {
		c := byte(v & 0x7F)
		v >>= 7
		if v == 0 {
			return append(dst, c)
		}
		dst = append(dst, c|0x80)
	}
}

func appendUint16(dst []byte, v uint16) []byte { return append(dst, byte(v>>8), byte(v)) }

func appendUint32(dst []byte, v uint32) []byte {
	return append(dst, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

// appendBinary appends a 2-byte length and b. The caller checks len(b) <= 65535.
func appendBinary(dst, b []byte) []byte {
	dst = appendUint16(dst, uint16(len(b)))
	return append(dst, b...)
}

// appendFixedHeader appends the type/flags byte and the remaining length.
func appendFixedHeader(dst []byte, t Type, flags byte, remaining int) []byte {
	dst = append(dst, byte(t)<<4|flags)
	return appendVarint(dst, remaining)
}

// finish checks the encoded size and appends the fixed header and body size
// bookkeeping shared by every Append method.
func checkRemaining(t Type, remaining int) error {
	if remaining > MaxRemaining {
		return errorf(ErrPacketTooLarge, t, "remaining length exceeds 268,435,455")
	}
	return nil
}

// ValidUTF8 reports whether b is an MQTT UTF-8 Encoded String body: well
// formed UTF-8 without surrogates [MQTT-1.5.4-1] and without U+0000
// [MQTT-1.5.4-2]. A byte order mark is kept as is [MQTT-1.5.4-3].
func ValidUTF8(b []byte) bool {
	for i, c := range b {
		if c == 0 {
			return false
		}
		if c >= utf8.RuneSelf {
			// utf8.Valid rejects surrogates and overlong forms.
			return bytes.IndexByte(b[i:], 0) < 0 && utf8.Valid(b[i:])
		}
	}
	return true
}

// ValidTopicName reports whether b can be a PUBLISH topic name: non-empty
// [MQTT-4.7.3-1], MQTT UTF-8, and free of '+' and '#' [MQTT-3.3.2-2].
func ValidTopicName(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c == '+' || c == '#' {
			return false
		}
	}
	return ValidUTF8(b)
}

// ValidTopicFilter reports whether b is a well-formed topic filter:
// non-empty [MQTT-4.7.3-1], MQTT UTF-8, '#' only as the whole last level
// [MQTT-4.7.1-1] and '+' only as a whole level [MQTT-4.7.1-2]. Decode does
// not apply the wildcard rules, because an MQTT 5 server refuses a bad
// filter in its SUBACK (0x8F) instead of dropping the connection.
func ValidTopicFilter(b []byte) bool {
	if len(b) == 0 || !ValidUTF8(b) {
		return false
	}
	for i, c := range b {
		switch c {
		case '#':
			if i != len(b)-1 || (i > 0 && b[i-1] != '/') {
				return false
			}
		case '+':
			if (i > 0 && b[i-1] != '/') || (i < len(b)-1 && b[i+1] != '/') {
				return false
			}
		}
	}
	return true
}
