package account

import (
	"strings"
	"testing"
)

var cheap = Params{MemoryKiB: 1024, Passes: 1, Lanes: 1}

func TestPasswordRoundTrip(t *testing.T) {
	h := HashPassword("correct horse battery", cheap)
	if !strings.HasPrefix(h, "$argon2id$v=19$m=1024,t=1,p=1$") {
		t.Fatalf("hash %q", h)
	}
	if h == HashPassword("correct horse battery", cheap) {
		t.Fatal("two hashes of one password are equal: no salt")
	}
	for _, c := range []struct {
		pw   string
		want bool
	}{
		{"correct horse battery", true},
		{"correct horse batterY", false},
		{"", false},
	} {
		ok, err := VerifyPassword(h, c.pw)
		if err != nil || ok != c.want {
			t.Fatalf("verify %q: %v %v, want %v", c.pw, ok, err, c.want)
		}
	}
}

func TestVerifyMalformedHash(t *testing.T) {
	for _, h := range []string{
		"", "plain", "$2a$10$bcrypt", "$argon2i$v=19$m=1,t=1,p=1$c2FsdA$aGFzaA",
		"$argon2id$v=18$m=1024,t=1,p=1$c2FsdA$aGFzaA", "$argon2id$v=19$m=x$c2FsdA$aGFzaA",
		"$argon2id$v=19$m=1024,t=1,p=1$!!$aGFzaA", "$argon2id$v=19$m=1024,t=1,p=1$c2FsdA$",
	} {
		if _, err := VerifyPassword(h, "pw"); err != ErrMalformedHash {
			t.Fatalf("%q: %v, want ErrMalformedHash", h, err)
		}
	}
}

func TestSecrets(t *testing.T) {
	a, ha := NewSecret(PrefixAPIKey)
	b, hb := NewSecret(PrefixAPIKey)
	if a == b || string(ha) == string(hb) || !strings.HasPrefix(a, PrefixAPIKey) || len(a) != len(PrefixAPIKey)+52 {
		t.Fatalf("secrets %q %q", a, b)
	}
	if string(HashSecret(a)) != string(ha) || len(ha) != 32 {
		t.Fatal("hash is not SHA-256 of the secret")
	}
}

func BenchmarkHashSecret(b *testing.B) {
	s, _ := NewSecret(PrefixSession)
	b.ReportAllocs()
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		HashSecret(s)
	}
}
