package credential

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Encryption names as stored in signing_keys.encryption.
const (
	EncryptionNone   = "none"
	EncryptionAESGCM = "aes-256-gcm"
)

// ErrKeyEncryption is returned when a sealed key cannot be opened (wrong or
// missing key-encryption key, or a damaged row).
var ErrKeyEncryption = errors.New("credential: cannot open signing key")

// ParseKEK decodes a 32-byte key-encryption key given as 64 hex characters
// or as standard or URL-safe base64. An empty string means none.
func ParseKEK(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	if b, err := hex.DecodeString(s); err == nil && len(b) == 32 {
		return b, nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == 32 {
			return b, nil
		}
	}
	return nil, fmt.Errorf("credential: key-encryption key must be 32 bytes as hex or base64")
}

// sealer seals and opens private keys; a nil aead stores them in the clear.
type sealer struct {
	aead cipher.AEAD
}

func newSealer(kek []byte) (sealer, error) {
	if kek == nil {
		return sealer{}, nil
	}
	block, err := aes.NewCipher(kek)
	if err != nil {
		return sealer{}, fmt.Errorf("credential: key-encryption key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return sealer{}, fmt.Errorf("credential: key-encryption key: %w", err)
	}
	return sealer{aead: aead}, nil
}

func (s sealer) seal(kid string, seed []byte) (stored []byte, encryption string) {
	if s.aead == nil {
		return append([]byte(nil), seed...), EncryptionNone
	}
	nonce := make([]byte, s.aead.NonceSize())
	_, _ = rand.Read(nonce)
	return s.aead.Seal(nonce, nonce, seed, []byte(kid)), EncryptionAESGCM
}

func (s sealer) open(kid string, stored []byte, encryption string) ([]byte, error) {
	switch encryption {
	case EncryptionNone:
		return stored, nil
	case EncryptionAESGCM:
		if s.aead == nil {
			return nil, fmt.Errorf("%w %s: sealed, but no key-encryption key is configured", ErrKeyEncryption, kid)
		}
		n := s.aead.NonceSize()
		if len(stored) < n {
			return nil, fmt.Errorf("%w %s: too short", ErrKeyEncryption, kid)
		}
		seed, err := s.aead.Open(nil, stored[:n], stored[n:], []byte(kid))
		if err != nil {
			return nil, fmt.Errorf("%w %s: %v", ErrKeyEncryption, kid, err)
		}
		return seed, nil
	}
	return nil, fmt.Errorf("%w %s: unknown encryption %q", ErrKeyEncryption, kid, encryption)
}
