package proxyheader

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"

	"berth.dev/broker/proxyproto"
)

// Limits on a header's size. MaxV1Len is the specification's; MaxLen bounds
// a version 2 header (signature, addresses and TLVs), far above what
// balancers send (AWS NLB: the addresses and a VPC endpoint id).
const (
	MaxV1Len = 107
	MaxLen   = 4096
)

// minLen is the length of the shortest header of either version: Read
// reads this much before it knows which one it has.
const minLen = len("PROXY UNKNOWN\r\n")

var (
	// ErrNoHeader: the connection did not start with a PROXY signature of
	// either version.
	ErrNoHeader = errors.New("proxyheader: no PROXY protocol header")
	// ErrMalformed: a header started but is not well formed.
	ErrMalformed = errors.New("proxyheader: malformed header")
	// ErrTooLarge: a version 2 header announces more than MaxLen bytes.
	ErrTooLarge = errors.New("proxyheader: header too large")
)

// Header is what a header says.
type Header struct {
	Version int // 1 or 2
	// Local: the header names no device (version 1 UNKNOWN, version 2
	// LOCAL or family UNSPEC): the connection is the balancer's own, and
	// its own addresses are the ones to use.
	Local bool
	// Source is the device's address and Dest the address it connected
	// to (the balancer's), when not Local.
	Source, Dest netip.AddrPort
}

// Read reads exactly one PROXY header, version 1 or 2, from r. It reads
// no byte after it (see the package comment), so r can be handed on. It
// returns ErrNoHeader, ErrMalformed or ErrTooLarge (wrapped) for bad
// input, or r's error.
func Read(r io.Reader) (Header, error) {
	var b [MaxV1Len]byte
	if _, err := io.ReadFull(r, b[:minLen]); err != nil {
		return Header{}, fmt.Errorf("proxyheader: read: %w", err)
	}
	switch {
	case bytes.HasPrefix(b[:minLen], []byte(proxyproto.Signature)):
		return readV2(r, b[:minLen])
	case bytes.HasPrefix(b[:minLen], []byte("PROXY ")):
		return readV1(r, &b)
	}
	return Header{}, ErrNoHeader
}

// readV2 reads the rest of a version 2 header whose first minLen bytes
// are start.
func readV2(r io.Reader, start []byte) (Header, error) {
	fixed := make([]byte, proxyproto.FixedLen, 64)
	copy(fixed, start)
	if _, err := io.ReadFull(r, fixed[minLen:]); err != nil {
		return Header{}, fmt.Errorf("proxyheader: read: %w", err)
	}
	n, err := proxyproto.HeaderLen(fixed)
	if err != nil {
		return Header{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if n > MaxLen {
		return Header{}, fmt.Errorf("%w: %d bytes", ErrTooLarge, n)
	}
	raw := append(fixed, make([]byte, n-len(fixed))...)
	if _, err := io.ReadFull(r, raw[proxyproto.FixedLen:]); err != nil {
		return Header{}, fmt.Errorf("proxyheader: read: %w", err)
	}
	var h proxyproto.Header
	if err := h.Parse(raw); err != nil {
		return Header{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if h.Command == proxyproto.CommandLocal || !h.Source.IsValid() {
		return Header{Version: 2, Local: true}, nil
	}
	return Header{Version: 2, Source: h.Source, Dest: h.Dest}, nil
}

// readV1 reads the rest of a version 1 line whose first minLen bytes are
// in b.
func readV1(r io.Reader, b *[MaxV1Len]byte) (Header, error) {
	n := minLen
	proto := b[len("PROXY "):n]
	var fields bool // TCP4 or TCP6: four fields follow; UNKNOWN: anything
	switch {
	case bytes.HasPrefix(proto, []byte("TCP4 ")), bytes.HasPrefix(proto, []byte("TCP6 ")):
		fields = true
	case bytes.HasPrefix(proto, []byte("UNKNOWN")):
		if c := b[len("PROXY UNKNOWN")]; c != ' ' && c != '\r' {
			return Header{}, ErrMalformed
		}
	default:
		return Header{}, ErrMalformed
	}
	for !bytes.HasSuffix(b[:n], []byte("\r\n")) {
		need := 1 // after a CR only its LF; an UNKNOWN line byte by byte
		if fields {
			need = minRest(b[len("PROXY TCP4 "):n])
		}
		if need < 0 || n+need > MaxV1Len {
			return Header{}, ErrMalformed
		}
		if _, err := io.ReadFull(r, b[n:n+need]); err != nil {
			return Header{}, fmt.Errorf("proxyheader: read: %w", err)
		}
		n += need
	}
	line := b[:n-2]
	if i := bytes.IndexAny(line, "\r\n"); i >= 0 {
		return Header{}, ErrMalformed
	}
	if !fields {
		return Header{Version: 1, Local: true}, nil
	}
	return parseV1(line)
}

// minRest is the fewest bytes that can follow text (what has arrived
// after "PROXY TCPx ") in a well-formed line: the missing fields, a space
// and at least one character each, one more character if the current
// field is still empty, and the CRLF. -1 when text cannot start a
// well-formed line.
func minRest(text []byte) int {
	spaces := bytes.Count(text, []byte(" "))
	if spaces > 3 || bytes.IndexByte(text, '\n') >= 0 {
		return -1
	}
	if i := bytes.IndexByte(text, '\r'); i >= 0 {
		if i != len(text)-1 || spaces != 3 {
			return -1
		}
		return 1
	}
	n := (3-spaces)*2 + 2
	if len(text) == 0 || text[len(text)-1] == ' ' {
		n++
	}
	return n
}

// parseV1 parses a TCP4 or TCP6 line without its CRLF.
func parseV1(line []byte) (Header, error) {
	f := bytes.Split(line, []byte(" "))
	if len(f) != 6 {
		return Header{}, ErrMalformed
	}
	v4 := string(f[1]) == "TCP4"
	src, err1 := parseAddr(f[2], v4)
	dst, err2 := parseAddr(f[3], v4)
	sp, err3 := parsePort(f[4])
	dp, err4 := parsePort(f[5])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return Header{}, err
	}
	return Header{Version: 1, Source: netip.AddrPortFrom(src, sp), Dest: netip.AddrPortFrom(dst, dp)}, nil
}

func parseAddr(b []byte, v4 bool) (netip.Addr, error) {
	a, err := netip.ParseAddr(string(b))
	if err != nil || a.Zone() != "" || a.Is4() != v4 {
		return netip.Addr{}, ErrMalformed
	}
	return a, nil
}

// parsePort takes 1 to 5 decimal digits, 0 to 65535.
func parsePort(b []byte) (uint16, error) {
	if len(b) == 0 || len(b) > 5 || b[0] < '0' || b[0] > '9' {
		return 0, ErrMalformed
	}
	p, err := strconv.ParseUint(string(b), 10, 16)
	if err != nil {
		return 0, ErrMalformed
	}
	return uint16(p), nil
}
