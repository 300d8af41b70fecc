package proxyproto

import (
	"errors"
	"testing"
	"time"
)

// TestRotation: a Verifier with a current and a previous secret accepts
// headers signed with either (the overlap of a rotation); one with only the
// new secret refuses the old; a third secret is refused by both; a short
// previous secret is a configuration error.
func TestRotation(t *testing.T) {
	oldKey := []byte("old-secret-0123456789abcdef")
	newKey := []byte("new-secret-0123456789abcdef")
	other := []byte("other-secret-0123456789abcd")
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	signer := func(key []byte) *Signer {
		s, err := NewSigner(key, clk.now)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	both, err := NewVerifier(newKey, VerifierOptions{Previous: oldKey, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	onlyNew, err := NewVerifier(newKey, VerifierOptions{Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		key  []byte
		v    *Verifier
		want error
	}{
		{"new secret, both", newKey, both, nil},
		{"old secret, both", oldKey, both, nil},
		{"other secret, both", other, both, ErrBadSignature},
		{"new secret, only new", newKey, onlyNew, nil},
		{"old secret, only new", oldKey, onlyNew, ErrBadSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := signer(tc.key).Append(nil, src, dstAddr, &info)
			if err != nil {
				t.Fatal(err)
			}
			var h Header
			var got Info
			if err := tc.v.Verify(raw, &h, &got); !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
			if tc.want == nil && got.TenantID != info.TenantID {
				t.Fatalf("tenant %q, want %q", got.TenantID, info.TenantID)
			}
		})
	}
	if _, err := NewVerifier(newKey, VerifierOptions{Previous: []byte("short")}); !errors.Is(err, ErrSecret) {
		t.Fatalf("short previous secret: %v", err)
	}
}

// TestRotationAllocs: checking the previous secret allocates nothing more
// than checking the current one.
func TestRotationAllocs(t *testing.T) {
	oldKey := []byte("old-secret-0123456789abcdef")
	s, err := NewSigner(oldKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewVerifier(secret, VerifierOptions{Previous: oldKey, NonceCapacity: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 512)
	var h Header
	h.TLVs = make([]TLV, 0, 8)
	var got Info
	got.ACL = make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() {
		buf, _ = s.Append(buf[:0], src, dstAddr, &info)
		if err := v.Verify(buf, &h, &got); err != nil {
			t.Fatal(err)
		}
	}); n > 3 {
		t.Fatalf("Sign+Verify with the previous secret allocates %v times, want <= 3", n)
	}
}
