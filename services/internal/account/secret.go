package account

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"strings"
)

// Secret prefixes.
const (
	PrefixAPIKey  = "berth_key_"
	PrefixSession = "berth_ses_"
	PrefixRefresh = "berth_ref_"
)

var secretEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// NewSecret returns prefix followed by 256 random bits, and its hash.
func NewSecret(prefix string) (secret string, hash []byte) {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	secret = prefix + strings.ToLower(secretEncoding.EncodeToString(b[:]))
	return secret, HashSecret(secret)
}

// HashSecret is the stored form of a secret: its SHA-256. The secrets are
// 256 random bits, so a fast hash is enough (no dictionary to attack).
func HashSecret(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}
