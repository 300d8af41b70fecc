package credential_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"berth.dev/services/internal/credential"
	"berth.dev/services/internal/store"
	"berth.dev/testenv"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestParseKEK(t *testing.T) {
	raw := bytes.Repeat([]byte{7}, 32)
	for _, s := range []string{
		strings.Repeat("07", 32),
		base64.StdEncoding.EncodeToString(raw),
		base64.RawURLEncoding.EncodeToString(raw),
	} {
		k, err := credential.ParseKEK(s)
		if err != nil || !bytes.Equal(k, raw) {
			t.Fatalf("%q: %x %v", s, k, err)
		}
	}
	if k, err := credential.ParseKEK(""); k != nil || err != nil {
		t.Fatalf("empty: %x %v", k, err)
	}
	for _, s := range []string{"short", strings.Repeat("07", 31), base64.StdEncoding.EncodeToString(raw[:16])} {
		if _, err := credential.ParseKEK(s); err == nil {
			t.Fatalf("%q accepted", s)
		}
	}
}

// TestSealedAtRest: with a key-encryption key the stored private key is
// AES-GCM ciphertext, tokens verify with the published key, and a keyring
// with another (or no) KEK cannot sign with it.
func TestSealedAtRest(t *testing.T) {
	pool := testenv.Postgres(t)
	st := store.New(pool)
	ctx := context.Background()
	kek := bytes.Repeat([]byte{1}, 32)
	kr, err := credential.NewKeyring(st, kek, quiet)
	if err != nil {
		t.Fatal(err)
	}
	token, kid, err := kr.Sign(ctx, credential.Claims{Issuer: "berth", Subject: "crd_x", TenantID: "ten_x", IssuedAt: 1, JTI: "j"})
	if err != nil {
		t.Fatal(err)
	}
	var enc string
	var priv, pub []byte
	if err := pool.QueryRow(ctx, `SELECT encryption, private_key, public_key FROM signing_keys WHERE kid = $1`, kid).Scan(&enc, &priv, &pub); err != nil {
		t.Fatal(err)
	}
	if enc != credential.EncryptionAESGCM || len(priv) != 12+32+16 {
		t.Fatalf("stored %s, %d bytes", enc, len(priv))
	}
	parts := strings.Split(token, ".")
	sig, _ := base64.RawURLEncoding.DecodeString(parts[2])
	if !ed25519.Verify(pub, []byte(parts[0]+"."+parts[1]), sig) {
		t.Fatal("token does not verify with the stored public key")
	}
	set, err := kr.JWKS(ctx)
	if err != nil || len(set.Keys) != 1 || set.Keys[0].X != base64.RawURLEncoding.EncodeToString(pub) {
		t.Fatalf("JWKS %+v %v", set, err)
	}
	for name, other := range map[string][]byte{"wrong kek": bytes.Repeat([]byte{2}, 32), "no kek": nil} {
		kr2, err := credential.NewKeyring(st, other, quiet)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := kr2.Sign(ctx, credential.Claims{}); !errors.Is(err, credential.ErrKeyEncryption) {
			t.Fatalf("%s: %v, want ErrKeyEncryption", name, err)
		}
	}
}

func TestRotateIsSerialized(t *testing.T) {
	pool := testenv.Postgres(t)
	st := store.New(pool)
	ctx := context.Background()
	kr, err := credential.NewKeyring(st, nil, quiet)
	if err != nil {
		t.Fatal(err)
	}
	// Several instances starting at once with the same interval create one key.
	errs := make(chan error, 4)
	for range 4 {
		go func() { _, _, err := kr.Rotate(ctx, 1<<40); errs <- err }()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM signing_keys`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d keys (%v), want 1", n, err)
	}
	var stored []byte
	if err := pool.QueryRow(ctx, `SELECT private_key FROM signing_keys`).Scan(&stored); err != nil || len(stored) != ed25519.SeedSize {
		t.Fatalf("unsealed key stored as %d bytes: %v", len(stored), err)
	}
}

func BenchmarkSign(b *testing.B) {
	pool := testenv.Postgres(b)
	st := store.New(pool)
	kr, err := credential.NewKeyring(st, nil, quiet)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	c := credential.Claims{Issuer: "berth", Subject: "crd_x", TenantID: "ten_x", IssuedAt: 1, JTI: "j",
		ACL: store.ACL{Pub: []string{"a/#"}, Sub: []string{"b/+"}}}
	if _, _, err := kr.Sign(ctx, c); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := kr.Sign(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
}
