package proxyproto

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var (
	secret  = []byte("0123456789abcdef0123456789abcdef")
	src     = netip.MustParseAddrPort("203.0.113.7:50123")
	dstAddr = netip.MustParseAddrPort("10.0.0.2:7883")
	info    = Info{TenantID: "ten_abc", CredentialID: "crd_xyz", ACL: []byte(`{"pub":["a/#"],"sub":["b/+"]}`), TokenExpiry: 1_900_000_000}
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newPair(t *testing.T, opt VerifierOptions) (*Signer, *Verifier, *clock) {
	t.Helper()
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	s, err := NewSigner(secret, c.now)
	if err != nil {
		t.Fatal(err)
	}
	opt.Now = c.now
	v, err := NewVerifier(secret, opt)
	if err != nil {
		t.Fatal(err)
	}
	return s, v, c
}

// resign recomputes the 0xEF value of raw (which must end with it) with an
// independent HMAC computation, so tests can build headers the Signer never
// would (missing TLVs, extra ones) that still carry a valid signature.
func resign(raw, key []byte) []byte {
	off := len(raw) - SignatureLen
	clear(raw[off:])
	m := hmac.New(sha256.New, key)
	m.Write(raw)
	copy(raw[off:], m.Sum(nil))
	return raw
}

// build encodes a header with the given TLVs and a signature TLV after them.
func build(t *testing.T, tlvs []TLV, key []byte) []byte {
	t.Helper()
	h := Header{Command: CommandProxy, Source: src, Dest: dstAddr, TLVs: append(tlvs, TLV{TLVSignature, make([]byte, SignatureLen)})}
	raw, err := h.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return resign(raw, key)
}

func u64(n int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(n)) }

func TestSignVerify(t *testing.T) {
	s, v, c := newPair(t, VerifierOptions{})
	raw, err := s.Append(nil, src, dstAddr, &info)
	if err != nil {
		t.Fatal(err)
	}
	var h Header
	var got Info
	if err := v.Verify(raw, &h, &got); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	want := info
	want.IssuedAt = c.now()
	want.Nonce = got.Nonce
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Info (-want +got):\n%s", diff)
	}
	if h.Source != src || h.Dest != dstAddr {
		t.Fatalf("addresses %v -> %v, want %v -> %v", h.Source, h.Dest, src, dstAddr)
	}
	if got.Nonce == ([NonceLen]byte{}) {
		t.Fatal("nonce is all zero")
	}
	// The signature is the last TLV, 32 bytes, and the header is exactly
	// what the length field says.
	if raw[len(raw)-35] != TLVSignature || binary.BigEndian.Uint16(raw[len(raw)-34:]) != SignatureLen {
		t.Fatalf("signature TLV is not last: % X", raw[len(raw)-35:])
	}
	if n, _ := HeaderLen(raw); n != len(raw) {
		t.Fatalf("HeaderLen = %d, len = %d", n, len(raw))
	}
}

func TestVerifyRefusals(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	good := func() []TLV {
		return []TLV{
			{TLVTenantID, []byte("ten_a")}, {TLVCredentialID, []byte("crd_a")}, {TLVACL, []byte(`{}`)},
			{TLVTokenExpiry, u64(0)}, {TLVIssuedAt, u64(now.UnixNano())}, {TLVNonce, make([]byte, NonceLen)},
		}
	}
	without := func(typ byte) []TLV {
		var out []TLV
		for _, x := range good() {
			if x.Type != typ {
				out = append(out, x)
			}
		}
		return out
	}
	tests := []struct {
		name    string
		raw     func(t *testing.T) []byte
		wantErr error
	}{
		{"valid hand-built header", func(t *testing.T) []byte { return build(t, good(), secret) }, nil},
		{"unknown TLVs are ignored", func(t *testing.T) []byte {
			return build(t, append(good(), TLV{0x01, []byte("mqtt")}), secret)
		}, nil},
		{"forged: tenant changed after signing", func(t *testing.T) []byte {
			raw := build(t, good(), secret)
			raw[FixedLen+12+3+4] ^= 1 // last byte of "ten_a"
			return raw
		}, ErrBadSignature},
		{"forged: signed with another key", func(t *testing.T) []byte {
			return build(t, good(), []byte("another-secret-of-32-bytes......"))
		}, ErrBadSignature},
		{"unsigned: no TLVs", func(t *testing.T) []byte {
			h := Header{Command: CommandProxy, Source: src, Dest: dstAddr}
			raw, _ := h.Append(nil)
			return raw
		}, ErrUnsigned},
		{"unsigned: signature not last", func(t *testing.T) []byte {
			raw := build(t, good(), secret)
			return append(raw[:len(raw):len(raw)], 0x01, 0x00, 0x00) // an empty TLV after it
		}, ErrMalformed},
		{"unsigned: signature too short", func(t *testing.T) []byte {
			h := Header{Command: CommandProxy, Source: src, Dest: dstAddr, TLVs: append(good(), TLV{TLVSignature, make([]byte, 16)})}
			raw, _ := h.Append(nil)
			return raw
		}, ErrUnsigned},
		{"missing nonce", func(t *testing.T) []byte { return build(t, without(TLVNonce), secret) }, ErrMissingTLV},
		{"missing issued-at", func(t *testing.T) []byte { return build(t, without(TLVIssuedAt), secret) }, ErrMissingTLV},
		{"missing tenant", func(t *testing.T) []byte { return build(t, without(TLVTenantID), secret) }, ErrMissingTLV},
		{"duplicate tenant", func(t *testing.T) []byte {
			return build(t, append(good(), TLV{TLVTenantID, []byte("ten_b")}), secret)
		}, ErrMissingTLV},
		{"issued-at not 8 bytes", func(t *testing.T) []byte {
			tl := good()
			tl[4].Value = []byte{1, 2, 3}
			return build(t, tl, secret)
		}, ErrMalformed},
		{"expired: 31 s old", func(t *testing.T) []byte {
			tl := good()
			tl[4].Value = u64(now.Add(-31 * time.Second).UnixNano())
			return build(t, tl, secret)
		}, ErrExpired},
		{"30 s old is still fine", func(t *testing.T) []byte {
			tl := good()
			tl[4].Value = u64(now.Add(-30 * time.Second).UnixNano())
			return build(t, tl, secret)
		}, nil},
		{"from the future", func(t *testing.T) []byte {
			tl := good()
			tl[4].Value = u64(now.Add(3 * time.Second).UnixNano())
			return build(t, tl, secret)
		}, ErrFuture},
		{"LOCAL command", func(t *testing.T) []byte {
			h := Header{Command: CommandLocal}
			raw, _ := h.Append(nil)
			return raw
		}, ErrLocal},
		{"not a PROXY header at all", func(t *testing.T) []byte {
			return []byte("\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00")
		}, ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewVerifier(secret, VerifierOptions{Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			var h Header
			var got Info
			err = v.Verify(tc.raw(t), &h, &got)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("Verify error = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestReplay(t *testing.T) {
	s, v, c := newPair(t, VerifierOptions{})
	raw, err := s.Append(nil, src, dstAddr, &info)
	if err != nil {
		t.Fatal(err)
	}
	var h Header
	var got Info
	if err := v.Verify(raw, &h, &got); err != nil {
		t.Fatalf("first Verify: %v", err)
	}
	c.add(10 * time.Second)
	if err := v.Verify(raw, &h, &got); !errors.Is(err, ErrReplay) {
		t.Fatalf("replay after 10 s: %v, want ErrReplay", err)
	}
	c.add(21 * time.Second)
	if err := v.Verify(raw, &h, &got); !errors.Is(err, ErrExpired) {
		t.Fatalf("replay after 31 s: %v, want ErrExpired", err)
	}
	// A fresh header from the same signer is fine, and the expired nonce
	// has been dropped from the cache.
	raw2, _ := s.Append(nil, src, dstAddr, &info)
	if err := v.Verify(raw2, &h, &got); err != nil {
		t.Fatalf("fresh header: %v", err)
	}
	if n := v.nonces.len(); n != 1 {
		t.Fatalf("cache holds %d nonces, want 1", n)
	}
}

func TestNonceCacheBounded(t *testing.T) {
	s, v, c := newPair(t, VerifierOptions{NonceCapacity: 4})
	var h Header
	var got Info
	for i := range 4 {
		raw, _ := s.Append(nil, src, dstAddr, &info)
		if err := v.Verify(raw, &h, &got); err != nil {
			t.Fatalf("header %d: %v", i, err)
		}
	}
	raw, _ := s.Append(nil, src, dstAddr, &info)
	if err := v.Verify(raw, &h, &got); !errors.Is(err, ErrCacheFull) {
		t.Fatalf("fifth header within the window: %v, want ErrCacheFull", err)
	}
	c.add(31 * time.Second)
	raw, _ = s.Append(nil, src, dstAddr, &info)
	if err := v.Verify(raw, &h, &got); err != nil {
		t.Fatalf("after the window: %v", err)
	}
	if n := v.nonces.len(); n != 1 {
		t.Fatalf("cache holds %d nonces, want 1", n)
	}
}

func TestShortSecret(t *testing.T) {
	if _, err := NewSigner([]byte("short"), nil); !errors.Is(err, ErrSecret) {
		t.Fatalf("NewSigner: %v", err)
	}
	if _, err := NewVerifier([]byte("short"), VerifierOptions{}); !errors.Is(err, ErrSecret) {
		t.Fatalf("NewVerifier: %v", err)
	}
}

func TestSignerAllocs(t *testing.T) {
	s, v, _ := newPair(t, VerifierOptions{NonceCapacity: 1 << 16})
	buf := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(100, func() {
		buf, _ = s.Append(buf[:0], src, dstAddr, &info)
	}); n != 0 {
		t.Fatalf("Signer.Append allocates %v times, want 0", n)
	}
	var h Header
	h.TLVs = make([]TLV, 0, 8)
	var got Info
	got.ACL = make([]byte, 0, 64)
	// Verify allocates only the two id strings (and amortized map growth).
	if n := testing.AllocsPerRun(100, func() {
		buf, _ = s.Append(buf[:0], src, dstAddr, &info)
		if err := v.Verify(buf, &h, &got); err != nil {
			t.Fatal(err)
		}
	}); n > 3 {
		t.Fatalf("Sign+Verify allocates %v times, want <= 3", n)
	}
}

func BenchmarkSign(b *testing.B) {
	s, _ := NewSigner(secret, nil)
	buf := make([]byte, 0, 512)
	buf, _ = s.Append(buf, src, dstAddr, &info)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = s.Append(buf[:0], src, dstAddr, &info)
	}
}

func BenchmarkVerify(b *testing.B) {
	s, _ := NewSigner(secret, nil)
	v, _ := NewVerifier(secret, VerifierOptions{})
	raws := make([][]byte, 4096)
	for i := range raws {
		raws[i], _ = s.Append(nil, src, dstAddr, &info)
	}
	b.SetBytes(int64(len(raws[0])))
	b.ReportAllocs()
	var h Header
	var got Info
	i := 0
	for b.Loop() {
		// Parse+HMAC+TLVs; the nonce check refuses the repeats, which is
		// still the whole cost of a verification.
		_ = v.Verify(raws[i%len(raws)], &h, &got)
		i++
	}
}
