package jwtauth

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// jwksServer is a stand-in for the API's JWKS endpoint (the API is another
// team's): a real HTTP server on 127.0.0.1:0 serving the keys a test sets.
type jwksServer struct {
	*httptest.Server
	mu      sync.Mutex
	keys    map[string]ed25519.PublicKey
	fetches atomic.Int32
	down    atomic.Bool
}

func newJWKSServer(t testing.TB) *jwksServer {
	t.Helper()
	s := &jwksServer{keys: map[string]ed25519.PublicKey{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		if r.URL.Path != "/v1/.well-known/jwks.json" || s.down.Load() {
			http.Error(w, `{"error":"unavailable"}`, http.StatusServiceUnavailable)
			return
		}
		type jwk struct {
			Kty string `json:"kty"`
			Crv string `json:"crv"`
			X   string `json:"x"`
			Kid string `json:"kid"`
			Alg string `json:"alg"`
			Use string `json:"use"`
		}
		var doc struct {
			Keys []jwk `json:"keys"`
		}
		s.mu.Lock()
		for kid, k := range s.keys {
			doc.Keys = append(doc.Keys, jwk{"OKP", "Ed25519", base64.RawURLEncoding.EncodeToString(k), kid, "EdDSA", "sig"})
		}
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(doc)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) url() string { return s.URL + "/v1/.well-known/jwks.json" }

func (s *jwksServer) set(kid string, pub ed25519.PublicKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pub == nil {
		delete(s.keys, kid)
		return
	}
	s.keys[kid] = pub
}

func newKey(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func b64json(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// sign builds a compact JWS by hand, as the API does.
func sign(t *testing.T, hdr, claims map[string]any, priv ed25519.PrivateKey) string {
	t.Helper()
	in := b64json(t, hdr) + "." + b64json(t, claims)
	return in + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, []byte(in)))
}

var now = time.Unix(1_800_000_000, 0)

func claims(mod func(map[string]any)) map[string]any {
	c := map[string]any{
		"iss": "berth", "sub": "crd_abc", "tid": "ten_xyz", "jti": "j1",
		"iat": now.Add(-time.Hour).Unix(), "exp": now.Add(time.Hour).Unix(),
		"acl": map[string]any{"pub": []string{"devices/+/up"}, "sub": []string{"devices/+/down"}},
	}
	if mod != nil {
		mod(c)
	}
	return c
}

// testMinRefresh spaces unknown-kid fetches in tests.
const testMinRefresh = 100 * time.Millisecond

func hdr(kid string) map[string]any { return map[string]any{"alg": "EdDSA", "typ": "JWT", "kid": kid} }

func newVerifier(t *testing.T, s *jwksServer, minRefresh time.Duration) (*Verifier, *KeySet) {
	t.Helper()
	ks := NewKeySet(KeySetOptions{URL: s.url(), MinRefresh: minRefresh})
	return NewVerifier(ks, VerifierOptions{Now: func() time.Time { return now }}), ks
}

func TestVerify(t *testing.T) {
	srv := newJWKSServer(t)
	pub, priv := newKey(t)
	_, otherPriv := newKey(t)
	srv.set("k1", pub)
	v, _ := newVerifier(t, srv, time.Hour)

	hs256 := func(t *testing.T) string {
		// The classic confusion attack: HMAC keyed with the public key.
		in := b64json(t, map[string]any{"alg": "HS256", "typ": "JWT", "kid": "k1"}) + "." + b64json(t, claims(nil))
		m := hmac.New(sha256.New, pub)
		m.Write([]byte(in))
		return in + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	}
	tests := []struct {
		name     string
		username string
		token    func(t *testing.T) string
		wantErr  error
	}{
		{"valid", "crd_abc", func(t *testing.T) string { return sign(t, hdr("k1"), claims(nil), priv) }, nil},
		{"valid without exp", "crd_abc", func(t *testing.T) string {
			return sign(t, hdr("k1"), claims(func(c map[string]any) { delete(c, "exp") }), priv)
		}, nil},
		{"expired", "crd_abc", func(t *testing.T) string {
			return sign(t, hdr("k1"), claims(func(c map[string]any) { c["exp"] = now.Add(-time.Minute).Unix() }), priv)
		}, ErrExpired},
		{"expired 5 s ago: exp has no leeway (the node cuts at exp)", "crd_abc", func(t *testing.T) string {
			return sign(t, hdr("k1"), claims(func(c map[string]any) { c["exp"] = now.Add(-5 * time.Second).Unix() }), priv)
		}, ErrExpired},
		{"not valid before 5 s from now is within the leeway", "crd_abc", func(t *testing.T) string {
			return sign(t, hdr("k1"), claims(func(c map[string]any) { c["nbf"] = now.Add(5 * time.Second).Unix() }), priv)
		}, nil},
		{"not valid before an hour from now", "crd_abc", func(t *testing.T) string {
			return sign(t, hdr("k1"), claims(func(c map[string]any) { c["nbf"] = now.Add(time.Hour).Unix() }), priv)
		}, ErrNotYetValid},
		{"issued in the future", "crd_abc", func(t *testing.T) string {
			return sign(t, hdr("k1"), claims(func(c map[string]any) { c["iat"] = now.Add(time.Hour).Unix() }), priv)
		}, ErrIssuedFuture},
		{"alg none, no signature", "crd_abc", func(t *testing.T) string {
			return b64json(t, map[string]any{"alg": "none", "typ": "JWT", "kid": "k1"}) + "." + b64json(t, claims(nil)) + "."
		}, ErrAlgorithm},
		{"alg none with a valid EdDSA signature", "crd_abc", func(t *testing.T) string {
			return sign(t, map[string]any{"alg": "none", "kid": "k1"}, claims(nil), priv)
		}, ErrAlgorithm},
		{"alg HS256 keyed with the public key", "crd_abc", hs256, ErrAlgorithm},
		{"wrong key, right kid", "crd_abc", func(t *testing.T) string { return sign(t, hdr("k1"), claims(nil), otherPriv) }, ErrSignature},
		{"claims tampered after signing", "crd_abc", func(t *testing.T) string {
			tok := sign(t, hdr("k1"), claims(nil), priv)
			parts := strings.Split(tok, ".")
			parts[1] = b64json(t, claims(func(c map[string]any) { c["tid"] = "ten_other" }))
			return strings.Join(parts, ".")
		}, ErrSignature},
		{"wrong issuer", "crd_abc", func(t *testing.T) string {
			return sign(t, hdr("k1"), claims(func(c map[string]any) { c["iss"] = "evil" }), priv)
		}, ErrIssuer},
		{"user name is not sub", "crd_other", func(t *testing.T) string { return sign(t, hdr("k1"), claims(nil), priv) }, ErrSubject},
		{"no tid", "crd_abc", func(t *testing.T) string {
			return sign(t, hdr("k1"), claims(func(c map[string]any) { delete(c, "tid") }), priv)
		}, ErrMissingClaims},
		{"no kid", "crd_abc", func(t *testing.T) string {
			return sign(t, map[string]any{"alg": "EdDSA"}, claims(nil), priv)
		}, ErrMalformed},
		{"crit header", "crd_abc", func(t *testing.T) string {
			return sign(t, map[string]any{"alg": "EdDSA", "kid": "k1", "crit": []string{"x"}}, claims(nil), priv)
		}, ErrMalformed},
		{"two parts", "crd_abc", func(t *testing.T) string { return "abc.def" }, ErrMalformed},
		{"not base64", "crd_abc", func(t *testing.T) string { return "!!!.???.***" }, ErrMalformed},
		{"exp is a string", "crd_abc", func(t *testing.T) string {
			return sign(t, hdr("k1"), claims(func(c map[string]any) { c["exp"] = "tomorrow" }), priv)
		}, ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := v.Verify(context.Background(), tc.username, []byte(tc.token(t)))
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("Verify error = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if c.Subject != "crd_abc" || c.TenantID != "ten_xyz" || c.ID != "j1" || c.Issuer != "berth" {
				t.Fatalf("claims = %+v", c)
			}
			var acl struct{ Pub, Sub []string }
			if err := json.Unmarshal(c.ACL, &acl); err != nil || acl.Pub[0] != "devices/+/up" || acl.Sub[0] != "devices/+/down" {
				t.Fatalf("acl = %s (%v)", c.ACL, err)
			}
		})
	}
}

func TestKeyRotation(t *testing.T) {
	srv := newJWKSServer(t)
	pub1, priv1 := newKey(t)
	pub2, priv2 := newKey(t)
	srv.set("k1", pub1)
	v, _ := newVerifier(t, srv, testMinRefresh)
	ctx := context.Background()

	if _, err := v.Verify(ctx, "crd_abc", []byte(sign(t, hdr("k1"), claims(nil), priv1))); err != nil {
		t.Fatalf("k1: %v", err)
	}
	if n := srv.fetches.Load(); n != 1 {
		t.Fatalf("fetches after first token = %d, want 1", n)
	}
	// k2 is unknown at first: the API has not published it yet. The miss
	// fetches once (no sooner than MinRefresh after the last fetch) and is
	// refused; once published, the next miss fetches again and succeeds.
	start := time.Now()
	if _, err := v.Verify(ctx, "crd_abc", []byte(sign(t, hdr("k2"), claims(nil), priv2))); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("unknown k2: %v, want ErrUnknownKey", err)
	}
	srv.set("k2", pub2)
	if _, err := v.Verify(ctx, "crd_abc", []byte(sign(t, hdr("k2"), claims(nil), priv2))); err != nil {
		t.Fatalf("k2 published just after a fetch: %v, want it accepted after the refresh window", err)
	}
	if n := srv.fetches.Load(); n != 3 {
		t.Fatalf("fetches = %d, want 3", n)
	}
	// The third fetch waited a whole window after the second, which came
	// after start.
	if took := time.Since(start); took < testMinRefresh {
		t.Fatalf("two refetches took %v: not spaced by MinRefresh (%v)", took, testMinRefresh)
	}

	// With a MinRefresh that has passed, the rotated-in key is fetched.
	v2, _ := newVerifier(t, srv, time.Nanosecond)
	srv.set("k2", nil)
	if _, err := v2.Verify(ctx, "crd_abc", []byte(sign(t, hdr("k1"), claims(nil), priv1))); err != nil {
		t.Fatal(err)
	}
	srv.set("k2", pub2)
	before := srv.fetches.Load()
	if _, err := v2.Verify(ctx, "crd_abc", []byte(sign(t, hdr("k2"), claims(nil), priv2))); err != nil {
		t.Fatalf("rotated-in k2: %v", err)
	}
	if n := srv.fetches.Load() - before; n != 1 {
		t.Fatalf("rotation fetched %d times, want 1", n)
	}
}

func TestConcurrentUnknownKidFetchesOnce(t *testing.T) {
	srv := newJWKSServer(t)
	pub, _ := newKey(t)
	srv.set("k1", pub)
	v, ks := newVerifier(t, srv, testMinRefresh)
	if err := ks.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, stranger := newKey(t)
	tok := []byte(sign(t, hdr("nope"), claims(nil), stranger))
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if _, err := v.Verify(context.Background(), "crd_abc", tok); !errors.Is(err, ErrUnknownKey) {
				t.Errorf("Verify: %v, want ErrUnknownKey", err)
			}
		})
	}
	wg.Wait()
	if n := srv.fetches.Load(); n != 2 {
		t.Fatalf("fetches = %d, want 2 (the initial refresh, then one fetch shared by all 50 misses)", n)
	}
}

func TestPeriodicRefreshDropsRemovedKey(t *testing.T) {
	srv := newJWKSServer(t)
	pub, priv := newKey(t)
	srv.set("k1", pub)
	ks := NewKeySet(KeySetOptions{URL: srv.url(), MinRefresh: testMinRefresh, RefreshEvery: 20 * time.Millisecond})
	v := NewVerifier(ks, VerifierOptions{Now: func() time.Time { return now }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ks.Start(ctx)
	t.Cleanup(func() {
		if err := ks.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	tok := []byte(sign(t, hdr("k1"), claims(nil), priv))
	if _, err := v.Verify(ctx, "crd_abc", tok); err != nil {
		t.Fatal(err)
	}
	srv.set("k1", nil) // the API retires k1
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := v.Verify(ctx, "crd_abc", tok)
		if errors.Is(err, ErrUnknownKey) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("retired key still verifies after 5 s of 20 ms refreshes (err=%v)", err)
		}
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
}

func TestJWKSUnavailable(t *testing.T) {
	srv := newJWKSServer(t)
	srv.down.Store(true)
	_, priv := newKey(t)
	v, _ := newVerifier(t, srv, time.Nanosecond)
	_, err := v.Verify(context.Background(), "crd_abc", []byte(sign(t, hdr("k1"), claims(nil), priv)))
	if !errors.Is(err, ErrKeysUnavailable) {
		t.Fatalf("Verify with the JWKS down: %v, want ErrKeysUnavailable", err)
	}
	// Refused before any key lookup: alg none never reaches the server.
	before := srv.fetches.Load()
	_, err = v.Verify(context.Background(), "crd_abc", []byte(b64json(t, map[string]any{"alg": "none", "kid": "k1"})+"."+b64json(t, claims(nil))+"."))
	if !errors.Is(err, ErrAlgorithm) || srv.fetches.Load() != before {
		t.Fatalf("alg none: err=%v, fetches %d -> %d", err, before, srv.fetches.Load())
	}
}

func BenchmarkVerify(b *testing.B) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	srv := newJWKSServer(b)
	srv.set("k1", pub)
	ks := NewKeySet(KeySetOptions{URL: srv.url()})
	v := NewVerifier(ks, VerifierOptions{Now: func() time.Time { return now }})
	in := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"EdDSA","typ":"JWT","kid":"k1"}`)) + "." +
		base64.RawURLEncoding.EncodeToString([]byte(`{"iss":"berth","sub":"crd_abc","tid":"ten_xyz","iat":1799990000,"jti":"j","acl":{"pub":["a/#"],"sub":["b/#"]}}`))
	tok := []byte(in + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, []byte(in))))
	b.SetBytes(int64(len(tok)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(context.Background(), "crd_abc", tok); err != nil {
			b.Fatal(err)
		}
	}
}
