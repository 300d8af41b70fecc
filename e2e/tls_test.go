package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"berth.dev/e2e/internal/stack"
)

// writeCert makes a self-signed certificate for *.mqtt.localhost.
func writeCert(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "*.mqtt.localhost"},
		DNSNames: []string{"*.mqtt.localhost"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// Over TLS the endpoint the device dials (SNI <slug>.mqtt.localhost) must be
// its own tenant's.
func TestTLSEndpointMustMatchTheTokensTenant(t *testing.T) {
	t.Parallel()
	cert, key := writeCert(t)
	s := stack.New(t, bins, stack.Options{TLSCert: cert, TLSKey: key, TenantDomain: "mqtt.localhost"})
	a, b := s.Signup(t), s.Signup(t)
	c := s.CreateCredential(t, a, []string{"#"}, []string{"#"}, nil)
	tlsAddr := s.Gateways[0].TLS
	if _, rc := connectV5(t, tlsAddr, a.Tenant.Slug+".mqtt.localhost", c, "own-endpoint"); rc != 0 {
		t.Fatalf("own endpoint over TLS: CONNACK %#x", rc)
	}
	if _, rc := connectV5(t, tlsAddr, b.Tenant.Slug+".mqtt.localhost", c, "other-endpoint"); rc != 0x87 {
		t.Fatalf("another tenant's endpoint: CONNACK %#x, want 0x87", rc)
	}
}
