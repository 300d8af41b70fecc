package proxyheader

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"berth.dev/broker/proxyproto"
)

// FuzzRead: on any input Read neither panics nor reads past what it
// accepts, reads the same whether the bytes come one at a time or all at
// once, and what it accepts it accepts from its own bytes alone (nothing
// after the header decided it).
func FuzzRead(f *testing.F) {
	for _, s := range []string{
		"PROXY TCP4 203.0.113.7 10.0.0.5 51234 1883\r\n\x10\x0d",
		"PROXY TCP6 2001:db8::7 2001:db8::5 51234 1883\r\n",
		"PROXY UNKNOWN\r\n",
		"PROXY UNKNOWN x y\r\n",
		"PROXY TCP4 1.1.1.1  2.2.2.2 1 2\r\n",
		"\x10\x0d\x00\x04MQTT\x04\x02\x00\x3c\x00\x01a",
	} {
		f.Add([]byte(s))
	}
	f.Add(v2(1, 0x11, []byte{203, 0, 113, 7, 10, 0, 0, 5, 0xC8, 0x22, 0x07, 0x5B}, []byte{0xEA, 0, 1, 1}))
	f.Add(v2(0, 0x00))
	f.Fuzz(func(t *testing.T, in []byte) {
		one := &countingReader{b: in, chunk: 1}
		h1, err1 := Read(one)
		all := &countingReader{b: in, chunk: len(in) + 1}
		h2, err2 := Read(all)
		if (err1 == nil) != (err2 == nil) || h1 != h2 {
			t.Fatalf("byte by byte: %+v %v; at once: %+v %v", h1, err1, h2, err2)
		}
		if err1 != nil {
			for _, e := range []error{ErrNoHeader, ErrMalformed, ErrTooLarge} {
				if errors.Is(err1, e) {
					return
				}
			}
			if one.read != len(in) { // not a class of bad input: it must be the end of the bytes
				t.Fatalf("error %v after %d of %d bytes", err1, one.read, len(in))
			}
			return
		}
		if one.read != all.read {
			t.Fatalf("byte by byte read %d bytes, at once %d", one.read, all.read)
		}
		if one.read > MaxLen || (h1.Version == 1 && (one.read > MaxV1Len || !bytes.HasSuffix(in[:one.read], []byte("\r\n")))) {
			t.Fatalf("accepted a %d-byte version %d header", one.read, h1.Version)
		}
		if !h1.Local && (!h1.Source.IsValid() || !h1.Dest.IsValid()) {
			t.Fatalf("a PROXY header without addresses: %+v", h1)
		}
		again, err := Read(&countingReader{b: in[:one.read], chunk: 1})
		if err != nil || again != h1 {
			t.Fatalf("its own %d bytes read as %+v %v, want %+v", one.read, again, err, h1)
		}
	})
}

// FuzzReadWellFormed: every well-formed header of either version, with
// any bytes after it, is read exactly, one byte at a time, and gives back
// its addresses.
func FuzzReadWellFormed(f *testing.F) {
	f.Add([]byte{203, 0, 113, 7}, []byte{10, 0, 0, 5}, uint16(51234), uint16(1883), false, []byte("\x10\x0d"))
	f.Add(netip.MustParseAddr("2001:db8::7").AsSlice(), netip.MustParseAddr("::ffff:10.0.0.5").AsSlice(), uint16(0), uint16(65535), true, []byte("\r\n"))
	f.Fuzz(func(t *testing.T, src, dst []byte, sport, dport uint16, version2 bool, after []byte) {
		s, ok1 := netip.AddrFromSlice(src)
		d, ok2 := netip.AddrFromSlice(dst)
		if !ok1 || !ok2 || s.Is4() != d.Is4() {
			return
		}
		want := Header{Source: netip.AddrPortFrom(s, sport), Dest: netip.AddrPortFrom(d, dport)}
		var hdr []byte
		if version2 {
			want.Version = 2
			ph := proxyproto.Header{Command: proxyproto.CommandProxy, Source: want.Source, Dest: want.Dest}
			var err error
			if hdr, err = ph.Append(nil); err != nil {
				t.Fatal(err)
			}
			if s.Is4In6() && d.Is4In6() { // written as INET; one mapped beside IPv6 stays mapped (INET6)
				want.Source = netip.AddrPortFrom(s.Unmap(), sport)
				want.Dest = netip.AddrPortFrom(d.Unmap(), dport)
			}
		} else {
			want.Version = 1
			fam := "TCP6"
			if s.Is4() {
				fam = "TCP4"
			}
			hdr = fmt.Appendf(nil, "PROXY %s %s %s %d %d\r\n", fam, s, d, sport, dport)
		}
		r := &countingReader{b: append(bytes.Clone(hdr), after...), chunk: 1}
		got, err := Read(r)
		if err != nil {
			t.Fatalf("%q: %v", hdr, err)
		}
		if got != want || r.read != len(hdr) {
			t.Fatalf("%q: read %d bytes as %+v, want %d bytes as %+v", hdr, r.read, got, len(hdr), want)
		}
	})
}
