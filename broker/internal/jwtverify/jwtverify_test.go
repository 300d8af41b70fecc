package jwtverify

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

type api struct {
	priv    ed25519.PrivateKey
	kid     atomic.Pointer[string] // the kid published; the test rotates it
	fetches atomic.Int64
	url     string
}

// serveJWKS publishes one fresh Ed25519 key as the API does, on 127.0.0.1.
func serveJWKS(t *testing.T) *api {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	a := &api{priv: priv}
	k1 := "k1"
	a.kid.Store(&k1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		a.fetches.Add(1)
		json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{
			{"kty": "OKP", "crv": "Ed25519", "x": base64.RawURLEncoding.EncodeToString(pub), "kid": *a.kid.Load(), "alg": "EdDSA", "use": "sig"},
			{"kty": "RSA", "kid": "rsa", "n": "AQAB"}, // not ours to use
		}})
	}))
	t.Cleanup(srv.Close)
	a.url = srv.URL
	return a
}

func b64(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func token(t *testing.T, priv ed25519.PrivateKey, hdr, claims map[string]any) []byte {
	t.Helper()
	s := b64(t, hdr) + "." + b64(t, claims)
	return []byte(s + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, []byte(s))))
}

func TestVerify(t *testing.T) {
	a := serveJWKS(t)
	v := New(Options{JWKSURL: a.url, MinRefresh: time.Hour})
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	hdr := map[string]any{"alg": "EdDSA", "typ": "JWT", "kid": "k1"}
	exp := time.Now().Add(time.Hour).Unix()
	good := map[string]any{"iss": "berth", "sub": "crd_1", "tid": "ten_1", "exp": exp, "iat": time.Now().Unix(), "acl": map[string]any{}}
	with := func(k string, val any) map[string]any {
		c := map[string]any{}
		for kk, vv := range good {
			c[kk] = vv
		}
		if val == nil {
			delete(c, k)
		} else {
			c[k] = val
		}
		return c
	}
	for _, tc := range []struct {
		name string
		tok  []byte
		want error
	}{
		{"good", token(t, a.priv, hdr, good), nil},
		{"no exp", token(t, a.priv, hdr, with("exp", nil)), nil},
		{"forged", token(t, other, hdr, good), ErrSignature},
		{"alg none", token(t, a.priv, map[string]any{"alg": "none", "kid": "k1"}, good), ErrAlgorithm},
		{"alg HS256", token(t, a.priv, map[string]any{"alg": "HS256", "kid": "k1"}, good), ErrAlgorithm},
		{"unknown kid", token(t, a.priv, map[string]any{"alg": "EdDSA", "kid": "k9"}, good), ErrUnknownKey},
		{"rsa kid", token(t, a.priv, map[string]any{"alg": "EdDSA", "kid": "rsa"}, good), ErrUnknownKey},
		{"expired", token(t, a.priv, hdr, with("exp", time.Now().Add(-time.Second).Unix())), ErrExpired},
		{"not yet valid", token(t, a.priv, hdr, with("nbf", time.Now().Add(time.Hour).Unix())), ErrNotYetValid},
		{"wrong issuer", token(t, a.priv, hdr, with("iss", "someone")), ErrIssuer},
		{"no sub", token(t, a.priv, hdr, with("sub", nil)), ErrClaims},
		{"no tid", token(t, a.priv, hdr, with("tid", nil)), ErrClaims},
		{"two parts", []byte("a.b"), ErrMalformed},
		{"bad base64", []byte("!!.!!.!!"), ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := v.Verify(context.Background(), tc.tok)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Verify: %v, want %v", err, tc.want)
			}
			if tc.want == nil && (c.Subject != "crd_1" || c.TenantID != "ten_1") {
				t.Fatalf("claims %+v", c)
			}
		})
	}
	c, err := v.Verify(context.Background(), token(t, a.priv, hdr, good))
	if err != nil || c.Expiry.Unix() != exp {
		t.Fatalf("expiry %v (%v), want %d", c.Expiry, err, exp)
	}
	// Unknown kids do not turn into a fetch each: one within MinRefresh.
	if n := a.fetches.Load(); n != 1 {
		t.Fatalf("%d JWKS fetches, want 1 (cached by kid, unknown kids rate-limited)", n)
	}
}

func TestUnreachableJWKS(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close() // nothing listens there any more
	v := New(Options{JWKSURL: srv.URL})
	a := serveJWKS(t)
	tok := token(t, a.priv, map[string]any{"alg": "EdDSA", "kid": "k1"}, map[string]any{"iss": "berth", "sub": "s", "tid": "t"})
	if _, err := v.Verify(context.Background(), tok); !errors.Is(err, ErrKeysUnavailable) {
		t.Fatalf("Verify with no JWKS: %v, want ErrKeysUnavailable", err)
	}
}

// A key the API starts publishing (rotation) is picked up on its first
// use: the unknown kid triggers a fetch.
func TestRotatedKeyIsFetched(t *testing.T) {
	a := serveJWKS(t)
	v := New(Options{JWKSURL: a.url, MinRefresh: time.Millisecond})
	claims := map[string]any{"iss": "berth", "sub": "s", "tid": "t"}
	if _, err := v.Verify(context.Background(), token(t, a.priv, map[string]any{"alg": "EdDSA", "kid": "k1"}, claims)); err != nil {
		t.Fatal(err)
	}
	k2 := "k2"
	a.kid.Store(&k2) // the API rotates: same key material, new kid, k1 withdrawn
	time.Sleep(2 * time.Millisecond)
	if _, err := v.Verify(context.Background(), token(t, a.priv, map[string]any{"alg": "EdDSA", "kid": "k2"}, claims)); err != nil {
		t.Fatalf("token under the rotated kid: %v", err)
	}
	if n := a.fetches.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2", n)
	}
}
