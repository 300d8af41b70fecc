package jwtauth

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// Token errors. All but ErrKeysUnavailable mean "bad user name or
// password" to the client.
var (
	ErrMalformed     = errors.New("jwtauth: malformed token")
	ErrAlgorithm     = errors.New("jwtauth: algorithm not allowed (only EdDSA)")
	ErrSignature     = errors.New("jwtauth: signature invalid")
	ErrExpired       = errors.New("jwtauth: token expired")
	ErrNotYetValid   = errors.New("jwtauth: token not valid yet")
	ErrIssuedFuture  = errors.New("jwtauth: token issued in the future")
	ErrIssuer        = errors.New("jwtauth: wrong issuer")
	ErrSubject       = errors.New("jwtauth: user name does not match the token subject")
	ErrMissingClaims = errors.New("jwtauth: required claim missing (sub, tid, acl)")
)

// maxTokenBytes bounds what is base64-decoded and parsed.
const maxTokenBytes = 16 << 10

// Claims are the verified claims of a device credential token.
type Claims struct {
	Issuer    string
	Subject   string // credential id, the MQTT user name
	TenantID  string
	ID        string // jti
	IssuedAt  time.Time
	Expiry    time.Time // zero when the token does not expire
	NotBefore time.Time // zero when absent
	ACL       json.RawMessage
}

// VerifierOptions configures a Verifier.
type VerifierOptions struct {
	Issuer string           // required iss; "berth" when empty
	Leeway time.Duration    // clock skew allowed on nbf and iat (not exp); 10 s when 0
	Now    func() time.Time // time.Now when nil
}

// Verifier checks tokens against a KeySet. It is safe for concurrent use.
type Verifier struct {
	keys   *KeySet
	issuer string
	leeway time.Duration
	now    func() time.Time
}

// NewVerifier returns a Verifier using keys.
func NewVerifier(keys *KeySet, opt VerifierOptions) *Verifier {
	if opt.Issuer == "" {
		opt.Issuer = "berth"
	}
	if opt.Leeway == 0 {
		opt.Leeway = 10 * time.Second
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	return &Verifier{keys: keys, issuer: opt.Issuer, leeway: opt.Leeway, now: opt.Now}
}

type jwtHeader struct {
	Alg  string          `json:"alg"`
	Typ  string          `json:"typ"`
	Kid  string          `json:"kid"`
	Crit json.RawMessage `json:"crit"`
}

type jwtClaims struct {
	Iss string          `json:"iss"`
	Sub string          `json:"sub"`
	Tid string          `json:"tid"`
	Jti string          `json:"jti"`
	Iat *json.Number    `json:"iat"`
	Exp *json.Number    `json:"exp"`
	Nbf *json.Number    `json:"nbf"`
	ACL json.RawMessage `json:"acl"`
}

// Verify checks token (the CONNECT password) for the MQTT user name
// username and returns its claims. The checks run in this order: shape,
// alg (before any key lookup), kid, signature, claims.
func (v *Verifier) Verify(ctx context.Context, username string, token []byte) (*Claims, error) {
	if len(token) > maxTokenBytes {
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrMalformed, maxTokenBytes)
	}
	d1 := bytes.IndexByte(token, '.')
	if d1 < 0 {
		return nil, fmt.Errorf("%w: not three parts", ErrMalformed)
	}
	d2 := bytes.IndexByte(token[d1+1:], '.')
	if d2 < 0 {
		return nil, fmt.Errorf("%w: not three parts", ErrMalformed)
	}
	d2 += d1 + 1
	if bytes.IndexByte(token[d2+1:], '.') >= 0 {
		return nil, fmt.Errorf("%w: more than three parts (JWE?)", ErrMalformed)
	}
	var hdr jwtHeader
	if err := decodeJSONPart(token[:d1], &hdr); err != nil {
		return nil, fmt.Errorf("%w: header: %w", ErrMalformed, err)
	}
	if hdr.Alg != "EdDSA" { // RFC 8725 section 3.1: pin the algorithm
		return nil, fmt.Errorf("%w: %q", ErrAlgorithm, hdr.Alg)
	}
	if hdr.Typ != "" && hdr.Typ != "JWT" {
		return nil, fmt.Errorf("%w: typ %q", ErrMalformed, hdr.Typ)
	}
	if len(hdr.Crit) > 0 { // RFC 7515 section 4.1.11: we understand no extensions
		return nil, fmt.Errorf("%w: crit header present", ErrMalformed)
	}
	if hdr.Kid == "" {
		return nil, fmt.Errorf("%w: no kid", ErrMalformed)
	}
	sig := make([]byte, base64.RawURLEncoding.DecodedLen(len(token)-d2-1))
	n, err := base64.RawURLEncoding.Decode(sig, token[d2+1:])
	if err != nil || n != ed25519.SignatureSize {
		return nil, fmt.Errorf("%w: signature encoding", ErrMalformed)
	}
	key, err := v.keys.Key(ctx, hdr.Kid)
	if err != nil {
		return nil, err
	}
	if !ed25519.Verify(key, token[:d2], sig[:n]) {
		return nil, ErrSignature
	}
	var raw jwtClaims
	if err := decodeJSONPart(token[d1+1:d2], &raw); err != nil {
		return nil, fmt.Errorf("%w: claims: %w", ErrMalformed, err)
	}
	c := &Claims{Issuer: raw.Iss, Subject: raw.Sub, TenantID: raw.Tid, ID: raw.Jti, ACL: raw.ACL}
	for _, f := range []struct {
		n *json.Number
		t *time.Time
	}{{raw.Iat, &c.IssuedAt}, {raw.Exp, &c.Expiry}, {raw.Nbf, &c.NotBefore}} {
		if f.n == nil {
			continue
		}
		x, err := f.n.Float64()
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) || x < 0 || x > 1e11 {
			return nil, fmt.Errorf("%w: bad NumericDate %q", ErrMalformed, f.n.String())
		}
		sec, frac := math.Modf(x)
		*f.t = time.Unix(int64(sec), int64(frac*1e9))
	}
	now := v.now()
	switch {
	// No leeway on exp: the node ends the connection at exactly this
	// instant (0xA0), so a token the gateway admitted late would only be
	// cut at once. Leeway covers clock skew on nbf and iat.
	case !c.Expiry.IsZero() && !now.Before(c.Expiry): // RFC 7519 section 4.1.4
		return nil, ErrExpired
	case !c.NotBefore.IsZero() && now.Add(v.leeway).Before(c.NotBefore): // section 4.1.5
		return nil, ErrNotYetValid
	case !c.IssuedAt.IsZero() && now.Add(v.leeway).Before(c.IssuedAt):
		return nil, ErrIssuedFuture
	case c.Issuer != v.issuer:
		return nil, fmt.Errorf("%w: %q", ErrIssuer, c.Issuer)
	case c.Subject == "" || c.TenantID == "" || len(c.ACL) == 0 || c.ACL[0] != '{':
		return nil, ErrMissingClaims
	case c.Subject != username:
		return nil, ErrSubject
	}
	return c, nil
}

func decodeJSONPart(part []byte, v any) error {
	b := make([]byte, base64.RawURLEncoding.DecodedLen(len(part)))
	n, err := base64.RawURLEncoding.Decode(b, part)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b[:n]))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}
