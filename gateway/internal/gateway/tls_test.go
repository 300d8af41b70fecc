package gateway

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writeCert writes a self-signed certificate for *.mqtt.test with the
// given serial to certFile/keyFile and returns a pool trusting it.
func writeCert(t *testing.T, certFile, keyFile string, serial int64) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "*.mqtt.test"},
		DNSNames:     []string{"*.mqtt.test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	// Write to temporary names and rename, as a certificate manager would,
	// so the gateway never sees half a file.
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{{keyFile, "EC PRIVATE KEY", kder}, {certFile, "CERTIFICATE", der}} {
		tmp := f.path + ".tmp"
		if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, f.path); err != nil {
			t.Fatal(err)
		}
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	roots := writeCert(t, certFile, keyFile, 1)
	e := newEnv(t, envOptions{config: func(c *Config) {
		c.TLSCert, c.TLSKey, c.TenantDomain, c.TLSReloadCheck = certFile, keyFile, "mqtt.test", 0
	}})
	id, tok := e.credential(t, tenantAcme, nil)
	url := "ssl://" + e.addr(KindTLS)

	tests := []struct {
		name       string
		serverName string
		want       byte
	}{
		{"SNI names the token's tenant", "acme.mqtt.test", 0x00},
		{"SNI names the tenant, upper case", "ACME.mqtt.test", 0x00},
		{"SNI names another tenant", "dead.mqtt.test", 0x05},
		{"SNI of another tenant that does not exist", "nobody.mqtt.test", 0x05},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, rc, _ := connect311(t, url, id, tok, &tls.Config{ServerName: tc.serverName, RootCAs: roots})
			if rc != tc.want {
				t.Fatalf("CONNACK return code %#x, want %#x", rc, tc.want)
			}
		})
	}
	t.Run("no SNI is not checked", func(t *testing.T) {
		_, rc, err := connect311(t, url, id, tok, &tls.Config{InsecureSkipVerify: true})
		if err != nil || rc != 0 {
			t.Fatalf("rc %#x, %v", rc, err)
		}
	})

	t.Run("certificate reloaded without a restart", func(t *testing.T) {
		serial := func() int64 {
			t.Helper()
			c, err := tls.Dial("tcp", e.addr(KindTLS), &tls.Config{InsecureSkipVerify: true, ServerName: "acme.mqtt.test"})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
		}
		if s := serial(); s != 1 {
			t.Fatalf("serial %d before the reload, want 1", s)
		}
		newRoots := writeCert(t, certFile, keyFile, 2)
		waitUntil(t, func() bool { return serial() == 2 })
		_, rc, err := connect311(t, url, id, tok, &tls.Config{ServerName: "acme.mqtt.test", RootCAs: newRoots})
		if err != nil || rc != 0 {
			t.Fatalf("connect with the new certificate: rc %#x, %v", rc, err)
		}
	})
}
