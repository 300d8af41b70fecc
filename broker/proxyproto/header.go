package proxyproto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// Signature is the 12 bytes every PROXY v2 header starts with.
const Signature = "\r\n\r\n\x00\r\nQUIT\n"

// Protocol constants; they never change.
const (
	// FixedLen is the size of the part before the addresses: signature,
	// version/command, family/transport and length.
	FixedLen = 16
	// MaxLen is the largest header the 16-bit length allows.
	MaxLen = FixedLen + 0xFFFF

	version2 = 0x20

	famUnspec = 0x00
	famInet   = 0x10
	famInet6  = 0x20
	famUnix   = 0x30

	transUnspec = 0x00
	transStream = 0x01

	addrLenInet  = 12
	addrLenInet6 = 36
	addrLenUnix  = 216
)

// Command is the low nibble of byte 12.
type Command byte

// Commands.
const (
	CommandLocal Command = 0x0 // health checks from the proxy itself; addresses are ignored
	CommandProxy Command = 0x1 // a relayed connection
)

// Errors returned by Parse and ReadHeader. All are malformed-header errors:
// errors.Is(err, ErrMalformed) holds for each of them.
var (
	ErrMalformed    = errors.New("proxyproto: malformed header")
	ErrNoSignature  = fmt.Errorf("%w: no PROXY v2 signature", ErrMalformed)
	ErrVersion      = fmt.Errorf("%w: version is not 2", ErrMalformed)
	ErrCommand      = fmt.Errorf("%w: unknown command", ErrMalformed)
	ErrFamily       = fmt.Errorf("%w: unsupported address family or transport", ErrMalformed)
	ErrShort        = fmt.Errorf("%w: length too short for the addresses", ErrMalformed)
	ErrTLV          = fmt.Errorf("%w: TLV runs past the header", ErrMalformed)
	ErrTooLarge     = fmt.Errorf("%w: header larger than the allowed size", ErrMalformed)
	ErrAddrMismatch = errors.New("proxyproto: only one of source and destination is set")
)

// TLV is one type-length-value entry. Value aliases the parsed buffer.
type TLV struct {
	Type  byte
	Value []byte
}

// Header is a PROXY v2 header over TCP. Source and Dest are both IPv4 or
// both IPv6; when both are invalid (zero) the family is UNSPEC.
type Header struct {
	Command Command
	Source  netip.AddrPort
	Dest    netip.AddrPort
	TLVs    []TLV
}

// Len returns the encoded size of h.
func (h *Header) Len() int {
	n := FixedLen + h.addrLen()
	for _, t := range h.TLVs {
		n += 3 + len(t.Value)
	}
	return n
}

func (h *Header) addrLen() int {
	s, d := h.Source.Addr().Unmap(), h.Dest.Addr().Unmap()
	switch {
	case !s.IsValid() && !d.IsValid():
		return 0
	case s.Is4() && d.Is4():
		return addrLenInet
	default:
		return addrLenInet6
	}
}

// Append encodes h onto dst. Two IPv4 (or IPv4-mapped) addresses are written
// as INET, anything else as INET6. It allocates nothing when dst has room.
func (h *Header) Append(dst []byte) ([]byte, error) {
	if h.Command != CommandLocal && h.Command != CommandProxy {
		return dst, ErrCommand
	}
	n := h.Len()
	if n > MaxLen {
		return dst, ErrTooLarge
	}
	for _, t := range h.TLVs {
		if len(t.Value) > 0xFFFF {
			return dst, ErrTooLarge
		}
	}
	src, dstA := h.Source.Addr().Unmap(), h.Dest.Addr().Unmap()
	var fam byte
	switch h.addrLen() {
	case 0:
		fam = famUnspec | transUnspec
	case addrLenInet:
		fam = famInet | transStream
	default:
		if !src.IsValid() || !dstA.IsValid() {
			return dst, ErrAddrMismatch
		}
		fam = famInet6 | transStream // an IPv4 side is written IPv4-mapped
	}
	dst = append(dst, Signature...)
	dst = append(dst, version2|byte(h.Command), fam)
	dst = binary.BigEndian.AppendUint16(dst, uint16(n-FixedLen))
	switch fam & 0xF0 {
	case famInet:
		a, b := src.As4(), dstA.As4()
		dst = append(dst, a[:]...)
		dst = append(dst, b[:]...)
		dst = binary.BigEndian.AppendUint16(dst, h.Source.Port())
		dst = binary.BigEndian.AppendUint16(dst, h.Dest.Port())
	case famInet6:
		a, b := h.Source.Addr().As16(), h.Dest.Addr().As16()
		dst = append(dst, a[:]...)
		dst = append(dst, b[:]...)
		dst = binary.BigEndian.AppendUint16(dst, h.Source.Port())
		dst = binary.BigEndian.AppendUint16(dst, h.Dest.Port())
	}
	for _, t := range h.TLVs {
		dst = append(dst, t.Type)
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(t.Value)))
		dst = append(dst, t.Value...)
	}
	return dst, nil
}

// HeaderLen returns the total header size announced by the first 16 bytes
// of b, after checking the signature and version.
func HeaderLen(b []byte) (int, error) {
	if len(b) < FixedLen {
		return 0, ErrShort
	}
	if string(b[:12]) != Signature {
		return 0, ErrNoSignature
	}
	if b[12]&0xF0 != version2 {
		return 0, ErrVersion
	}
	return FixedLen + int(binary.BigEndian.Uint16(b[14:16])), nil
}

// Parse decodes the header that is exactly b (as ReadHeader returns it) into
// h, reusing h.TLVs. TLV values alias b. For CommandLocal the addresses are
// skipped, as the specification says a receiver must.
func (h *Header) Parse(b []byte) error {
	n, err := HeaderLen(b)
	if err != nil {
		return err
	}
	if n != len(b) {
		return fmt.Errorf("%w: length field says %d bytes, have %d", ErrMalformed, n, len(b))
	}
	h.Command = Command(b[12] & 0x0F)
	if h.Command != CommandLocal && h.Command != CommandProxy {
		return ErrCommand
	}
	h.Source, h.Dest = netip.AddrPort{}, netip.AddrPort{}
	h.TLVs = h.TLVs[:0]
	rest := b[FixedLen:]
	var al int
	switch b[13] {
	case famUnspec | transUnspec:
	case famInet | transStream:
		al = addrLenInet
	case famInet6 | transStream:
		al = addrLenInet6
	case famUnix | transStream:
		al = addrLenUnix
	default:
		return ErrFamily
	}
	if len(rest) < al {
		return ErrShort
	}
	if h.Command == CommandProxy {
		switch al {
		case addrLenInet:
			h.Source = netip.AddrPortFrom(netip.AddrFrom4([4]byte(rest[0:4])), binary.BigEndian.Uint16(rest[8:10]))
			h.Dest = netip.AddrPortFrom(netip.AddrFrom4([4]byte(rest[4:8])), binary.BigEndian.Uint16(rest[10:12]))
		case addrLenInet6:
			h.Source = netip.AddrPortFrom(netip.AddrFrom16([16]byte(rest[0:16])), binary.BigEndian.Uint16(rest[32:34]))
			h.Dest = netip.AddrPortFrom(netip.AddrFrom16([16]byte(rest[16:32])), binary.BigEndian.Uint16(rest[34:36]))
		case addrLenUnix:
			return ErrFamily // Berth speaks TCP only
		}
	}
	rest = rest[al:]
	for len(rest) > 0 {
		if len(rest) < 3 {
			return ErrTLV
		}
		vl := int(binary.BigEndian.Uint16(rest[1:3]))
		if len(rest) < 3+vl {
			return ErrTLV
		}
		h.TLVs = append(h.TLVs, TLV{Type: rest[0], Value: rest[3 : 3+vl : 3+vl]})
		rest = rest[3+vl:]
	}
	return nil
}

// TLV returns the value of the first TLV of type t.
func (h *Header) TLV(t byte) ([]byte, bool) {
	for _, x := range h.TLVs {
		if x.Type == t {
			return x.Value, true
		}
	}
	return nil, false
}
