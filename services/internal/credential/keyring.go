package credential

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"berth.dev/services/internal/store"
)

// Claims are a credential token's claims (docs/contracts.md).
type Claims struct {
	Issuer   string    `json:"iss"`
	Subject  string    `json:"sub"`
	TenantID string    `json:"tid"`
	IssuedAt int64     `json:"iat"`
	Expires  int64     `json:"exp,omitempty"`
	JTI      string    `json:"jti"`
	ACL      store.ACL `json:"acl"`
}

// JWK is one public key of a JWKS.
type JWK struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
}

// JWKS is the published key set.
type JWKS struct {
	Keys []JWK `json:"keys"`
}

// Keyring signs tokens with the active key in Postgres.
type Keyring struct {
	store  *store.Store
	sealer sealer
	log    *slog.Logger

	mu    sync.Mutex
	seeds map[string]ed25519.PrivateKey // kid → opened key
}

// NewKeyring returns a Keyring; kek (32 bytes, or nil for none) seals
// private keys at rest.
func NewKeyring(st *store.Store, kek []byte, log *slog.Logger) (*Keyring, error) {
	s, err := newSealer(kek)
	if err != nil {
		return nil, err
	}
	return &Keyring{store: st, sealer: s, log: log, seeds: map[string]ed25519.PrivateKey{}}, nil
}

// Rotate makes a new key the signer unless the active key is younger than
// minAge (0: rotate now). It reports whether it rotated and the active kid.
func (k *Keyring) Rotate(ctx context.Context, minAge time.Duration) (string, bool, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", false, fmt.Errorf("credential: generate key: %w", err)
	}
	kid := newKID()
	sealed, enc := k.sealer.seal(kid, priv.Seed())
	active, rotated, err := k.store.RotateSigningKey(ctx, store.SigningKey{
		KID: kid, Public: pub, Private: sealed, Encryption: enc,
	}, minAge)
	if err != nil {
		return "", false, err
	}
	if rotated {
		k.log.LogAttrs(ctx, slog.LevelInfo, "signing key rotated", slog.String("kid", active.KID), slog.String("encryption", enc))
	}
	return active.KID, rotated, nil
}

// Run rotates the signing key whenever it is older than maxAge, checking
// every interval, until ctx ends. It rotates (or creates the first key) at
// once if due.
func (k *Keyring) Run(ctx context.Context, interval, maxAge time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, _, err := k.Rotate(ctx, maxAge); err != nil && ctx.Err() == nil {
			k.log.LogAttrs(ctx, slog.LevelError, "signing key rotation", slog.Any("err", err))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sign returns the token for claims, signed with the active key (created
// if there is none), and the kid that signed it.
func (k *Keyring) Sign(ctx context.Context, c Claims) (token, kid string, err error) {
	sk, err := k.store.ActiveSigningKey(ctx)
	if errors.Is(err, store.ErrNotFound) {
		if _, _, err = k.Rotate(ctx, 1<<62); err != nil {
			return "", "", err
		}
		sk, err = k.store.ActiveSigningKey(ctx)
	}
	if err != nil {
		return "", "", err
	}
	priv, err := k.privateKey(sk)
	if err != nil {
		return "", "", err
	}
	header, _ := json.Marshal(struct {
		Alg string `json:"alg"`
		Typ string `json:"typ"`
		Kid string `json:"kid"`
	}{"EdDSA", "JWT", sk.KID})
	payload, err := json.Marshal(c)
	if err != nil {
		return "", "", fmt.Errorf("credential: claims: %w", err)
	}
	b64 := base64.RawURLEncoding
	signing := b64.EncodeToString(header) + "." + b64.EncodeToString(payload)
	sig := ed25519.Sign(priv, []byte(signing))
	return signing + "." + b64.EncodeToString(sig), sk.KID, nil
}

func (k *Keyring) privateKey(sk store.SigningKey) (ed25519.PrivateKey, error) {
	k.mu.Lock()
	priv, ok := k.seeds[sk.KID]
	k.mu.Unlock()
	if ok {
		return priv, nil
	}
	seed, err := k.sealer.open(sk.KID, sk.Private, sk.Encryption)
	if err != nil {
		return nil, err
	}
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("%w %s: seed is %d bytes", ErrKeyEncryption, sk.KID, len(seed))
	}
	priv = ed25519.NewKeyFromSeed(seed)
	k.mu.Lock()
	k.seeds[sk.KID] = priv
	k.mu.Unlock()
	return priv, nil
}

// JWKS returns the published keys.
func (k *Keyring) JWKS(ctx context.Context) (JWKS, error) {
	keys, err := k.store.PublishedSigningKeys(ctx)
	if err != nil {
		return JWKS{}, err
	}
	set := JWKS{Keys: make([]JWK, 0, len(keys))}
	for _, sk := range keys {
		set.Keys = append(set.Keys, JWK{
			Kty: "OKP", Crv: "Ed25519", X: base64.RawURLEncoding.EncodeToString(sk.Public),
			Kid: sk.KID, Alg: "EdDSA", Use: "sig",
		})
	}
	return set, nil
}

// NewJTI returns a random token id.
func NewJTI() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func newKID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102") + "-" + strings.ToLower(fmt.Sprintf("%x", b))
}
