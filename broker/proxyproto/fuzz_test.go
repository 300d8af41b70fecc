package proxyproto

import (
	"bytes"
	"net/netip"
	"testing"
	"time"
)

// FuzzParse checks that Parse never panics, that whatever it accepts
// encodes back to a header that parses to the same thing, and that random
// bytes never verify.
func FuzzParse(f *testing.F) {
	for _, tc := range headerCases {
		f.Add(hexBytes(f, tc.bytes))
	}
	s, _ := NewSigner(secret, nil)
	raw, _ := s.Append(nil, src, dstAddr, &info)
	f.Add(raw)
	v, _ := NewVerifier(secret, VerifierOptions{Now: func() time.Time { return time.Unix(0, 0) }})
	f.Fuzz(func(t *testing.T, b []byte) {
		var h Header
		if err := h.Parse(b); err != nil {
			return
		}
		enc, err := h.Append(nil)
		if err != nil {
			if h.Command == CommandProxy {
				t.Fatalf("parsed header does not encode: %v (%+v)", err, h)
			}
			return
		}
		var h2 Header
		if err := h2.Parse(enc); err != nil {
			t.Fatalf("re-encoded header does not parse: %v", err)
		}
		if h.Command == CommandProxy && (unmap(h.Source) != unmap(h2.Source) || unmap(h.Dest) != unmap(h2.Dest)) {
			t.Fatalf("addresses changed: %v->%v became %v->%v", h.Source, h.Dest, h2.Source, h2.Dest)
		}
		if len(h.TLVs) != len(h2.TLVs) {
			t.Fatalf("TLV count %d became %d", len(h.TLVs), len(h2.TLVs))
		}
		for i := range h.TLVs {
			if h.TLVs[i].Type != h2.TLVs[i].Type || !bytes.Equal(h.TLVs[i].Value, h2.TLVs[i].Value) {
				t.Fatalf("TLV %d changed", i)
			}
		}
		var in Info
		if bytes.Equal(b, raw) {
			return // the one seed that is genuinely signed
		}
		if err := v.Verify(b, &h, &in); err == nil {
			t.Fatalf("random header verified: % X", b)
		}
	})
}

func unmap(a netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}
