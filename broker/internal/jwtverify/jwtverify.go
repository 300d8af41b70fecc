// Package jwtverify checks Berth device credential tokens on a broker node,
// for MQTT 5 re-authentication (AUTH, method "berth-jwt"). The gateway
// checks the token of a CONNECT; the node only sees later ones.
//
// A token is a compact JWS (docs/contracts.md), signed with Ed25519:
//
//	base64url(header) "." base64url(claims) "." base64url(signature, 64 bytes)
//	header: {"alg":"EdDSA","typ":"JWT","kid":"<kid>"}      alg pinned to EdDSA
//	claims: {"iss","sub","tid","iat","exp"?,"nbf"?,"jti","acl"}
//
// Public keys come from the API's JWKS
// ({"keys":[{"kty":"OKP","crv":"Ed25519","x":"<b64url>","kid","alg":"EdDSA","use":"sig"}]}),
// fetched on first use, cached by kid, fetched again when older than
// MaxAge, and on an unknown kid at most once per MinRefresh.
package jwtverify

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sync"
	"time"
)

// Verification errors; every one means "not authorized" to the client.
var (
	ErrMalformed       = errors.New("jwtverify: malformed token")
	ErrAlgorithm       = errors.New("jwtverify: algorithm not allowed (only EdDSA)")
	ErrUnknownKey      = errors.New("jwtverify: unknown key id")
	ErrKeysUnavailable = errors.New("jwtverify: key set unavailable")
	ErrSignature       = errors.New("jwtverify: signature invalid")
	ErrExpired         = errors.New("jwtverify: token expired")
	ErrNotYetValid     = errors.New("jwtverify: token not valid yet")
	ErrIssuer          = errors.New("jwtverify: wrong issuer")
	ErrClaims          = errors.New("jwtverify: required claim missing (sub, tid)")
)

const (
	maxTokenBytes = 16 << 10
	maxJWKSBytes  = 1 << 20
)

// Options configure a Verifier; zero values take the defaults noted.
type Options struct {
	JWKSURL    string        // required
	Issuer     string        // required iss; "berth"
	Client     *http.Client  // a client with a 5 s timeout
	MaxAge     time.Duration // keys are fetched again after this; 5 min
	MinRefresh time.Duration // least time between fetches for unknown kids; 1 s
	Leeway     time.Duration // clock skew allowed on nbf (not exp); 10 s
}

// Claims are the verified claims a node uses.
type Claims struct {
	Subject  string    // credential id
	TenantID string    // tid
	Expiry   time.Time // zero when the token does not expire
}

// Verifier checks tokens. It is safe for concurrent use.
type Verifier struct {
	opt Options

	fetchMu sync.Mutex // one fetch at a time
	mu      sync.RWMutex
	keys    map[string]ed25519.PublicKey
	fetched time.Time // last successful fetch
	tried   time.Time // last fetch attempt
}

// New returns a Verifier for opt.
func New(opt Options) *Verifier {
	if opt.Issuer == "" {
		opt.Issuer = "berth"
	}
	if opt.Client == nil {
		opt.Client = &http.Client{Timeout: 5 * time.Second}
	}
	if opt.MaxAge <= 0 {
		opt.MaxAge = 5 * time.Minute
	}
	if opt.MinRefresh <= 0 {
		opt.MinRefresh = time.Second
	}
	if opt.Leeway <= 0 {
		opt.Leeway = 10 * time.Second
	}
	return &Verifier{opt: opt}
}

// Verify checks token and returns its claims. The order is: shape, alg
// (before any key lookup, RFC 8725 section 3.1), kid, signature, claims.
func (v *Verifier) Verify(ctx context.Context, token []byte) (Claims, error) {
	if len(token) > maxTokenBytes {
		return Claims{}, fmt.Errorf("%w: longer than %d bytes", ErrMalformed, maxTokenBytes)
	}
	parts := bytes.Split(token, []byte("."))
	if len(parts) != 3 {
		return Claims{}, fmt.Errorf("%w: not three parts", ErrMalformed)
	}
	var hdr struct {
		Alg  string          `json:"alg"`
		Typ  string          `json:"typ"`
		Kid  string          `json:"kid"`
		Crit json.RawMessage `json:"crit"`
	}
	if err := decodePart(parts[0], &hdr); err != nil {
		return Claims{}, fmt.Errorf("%w: header: %w", ErrMalformed, err)
	}
	switch {
	case hdr.Alg != "EdDSA":
		return Claims{}, fmt.Errorf("%w: %q", ErrAlgorithm, hdr.Alg)
	case hdr.Typ != "" && hdr.Typ != "JWT", len(hdr.Crit) > 0, hdr.Kid == "":
		return Claims{}, fmt.Errorf("%w: header fields", ErrMalformed)
	}
	sig, err := base64.RawURLEncoding.DecodeString(string(parts[2]))
	if err != nil || len(sig) != ed25519.SignatureSize {
		return Claims{}, fmt.Errorf("%w: signature encoding", ErrMalformed)
	}
	key, err := v.key(ctx, hdr.Kid)
	if err != nil {
		return Claims{}, err
	}
	if !ed25519.Verify(key, token[:len(parts[0])+1+len(parts[1])], sig) {
		return Claims{}, ErrSignature
	}
	var raw struct {
		Iss string       `json:"iss"`
		Sub string       `json:"sub"`
		Tid string       `json:"tid"`
		Exp *json.Number `json:"exp"`
		Nbf *json.Number `json:"nbf"`
	}
	if err := decodePart(parts[1], &raw); err != nil {
		return Claims{}, fmt.Errorf("%w: claims: %w", ErrMalformed, err)
	}
	exp, err := numericDate(raw.Exp)
	if err != nil {
		return Claims{}, err
	}
	nbf, err := numericDate(raw.Nbf)
	if err != nil {
		return Claims{}, err
	}
	now := time.Now()
	switch {
	case !exp.IsZero() && !now.Before(exp): // RFC 7519 section 4.1.4, no leeway
		return Claims{}, ErrExpired
	case !nbf.IsZero() && now.Add(v.opt.Leeway).Before(nbf): // section 4.1.5
		return Claims{}, ErrNotYetValid
	case raw.Iss != v.opt.Issuer:
		return Claims{}, fmt.Errorf("%w: %q", ErrIssuer, raw.Iss)
	case raw.Sub == "" || raw.Tid == "":
		return Claims{}, ErrClaims
	}
	return Claims{Subject: raw.Sub, TenantID: raw.Tid, Expiry: exp}, nil
}

// numericDate parses an optional NumericDate (RFC 7519 section 2).
func numericDate(n *json.Number) (time.Time, error) {
	if n == nil {
		return time.Time{}, nil
	}
	x, err := n.Float64()
	if err != nil || math.IsNaN(x) || math.IsInf(x, 0) || x < 0 || x > 1e11 {
		return time.Time{}, fmt.Errorf("%w: bad NumericDate %q", ErrMalformed, n.String())
	}
	sec, frac := math.Modf(x)
	return time.Unix(int64(sec), int64(frac*1e9)), nil
}

func decodePart(part []byte, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(string(part))
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

// key returns the public key for kid, fetching the JWKS when the cache is
// stale or kid unknown, and no fetch was tried within MinRefresh.
func (v *Verifier) key(ctx context.Context, kid string) (ed25519.PublicKey, error) {
	now := time.Now()
	v.mu.RLock()
	k, ok := v.keys[kid]
	fresh := now.Sub(v.fetched) < v.opt.MaxAge
	v.mu.RUnlock()
	if ok && fresh {
		return k, nil
	}
	v.fetchMu.Lock()
	defer v.fetchMu.Unlock()
	v.mu.RLock()
	k, ok = v.keys[kid]
	fresh = now.Sub(v.fetched) < v.opt.MaxAge
	tried := v.tried
	v.mu.RUnlock()
	if ok && fresh {
		return k, nil // fetched while this call waited
	}
	var ferr error
	if time.Since(tried) >= v.opt.MinRefresh { // at most one fetch per MinRefresh, API up or down
		ferr = v.fetch(ctx)
		v.mu.RLock()
		k, ok = v.keys[kid]
		v.mu.RUnlock()
	}
	switch {
	case ok:
		return k, nil // a stale key still verifies while the API is unreachable
	case ferr != nil:
		return nil, ferr
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownKey, kid)
}

// fetch replaces the cached keys with the JWKS. fetchMu is held.
func (v *Verifier) fetch(ctx context.Context) error {
	v.mu.Lock()
	v.tried = time.Now()
	v.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.opt.JWKSURL, nil)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrKeysUnavailable, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := v.opt.Client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrKeysUnavailable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: GET %s: status %d", ErrKeysUnavailable, v.opt.JWKSURL, resp.StatusCode)
	}
	var doc struct {
		Keys []struct {
			Kty, Crv, X, Kid, Alg, Use string
		} `json:"keys"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxJWKSBytes)).Decode(&doc); err != nil {
		return fmt.Errorf("%w: decoding: %w", ErrKeysUnavailable, err)
	}
	keys := make(map[string]ed25519.PublicKey, len(doc.Keys))
	for _, jk := range doc.Keys {
		if jk.Kty != "OKP" || jk.Crv != "Ed25519" || jk.Kid == "" ||
			(jk.Alg != "" && jk.Alg != "EdDSA") || (jk.Use != "" && jk.Use != "sig") {
			continue // not a key for EdDSA signatures
		}
		x, err := base64.RawURLEncoding.DecodeString(jk.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			continue
		}
		keys[jk.Kid] = ed25519.PublicKey(x)
	}
	v.mu.Lock()
	v.keys, v.fetched = keys, time.Now()
	v.mu.Unlock()
	return nil
}
