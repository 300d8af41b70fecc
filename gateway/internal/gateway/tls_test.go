package gateway

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/eclipse/paho.golang/paho"

	"berth.dev/broker/packet"
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

// testCert is a certificate on disk the gateway serves.
type testCert struct {
	certFile, keyFile string
	roots             *x509.CertPool // trusts the certificate
}

// newTestCert writes a certificate with serial 1 into a temporary folder.
func newTestCert(t *testing.T) testCert {
	t.Helper()
	dir := t.TempDir()
	c := testCert{certFile: filepath.Join(dir, "tls.crt"), keyFile: filepath.Join(dir, "tls.key")}
	c.roots = writeCert(t, c.certFile, c.keyFile, 1)
	return c
}

// config serves c on the TLS and WSS listeners, SNI checked against
// <slug>.mqtt.test, looking for a new certificate at every handshake.
func (c testCert) config(cfg *Config) {
	cfg.TLSCert, cfg.TLSKey, cfg.TenantDomain, cfg.TLSReloadCheck = c.certFile, c.keyFile, "mqtt.test", 0
}

// dialWSS opens a WebSocket over TLS to the gateway's /mqtt with
// subprotocol mqtt, the SNI and roots of conf, and returns it as a stream
// and the certificate the handshake was served.
func dialWSS(t *testing.T, e *testEnv, conf *tls.Config) (net.Conn, *x509.Certificate) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: conf}}
	c, resp, err := websocket.Dial(ctx, "wss://"+e.addr(KindWSS)+"/mqtt", &websocket.DialOptions{
		HTTPClient: hc, Subprotocols: []string{"mqtt"},
	})
	if err != nil {
		t.Fatalf("wss dial: %v", err)
	}
	if c.Subprotocol() != "mqtt" || resp.TLS == nil {
		t.Fatalf("wss: subprotocol %q, TLS state %v", c.Subprotocol(), resp.TLS)
	}
	nc := websocket.NetConn(context.Background(), c, websocket.MessageBinary)
	t.Cleanup(func() { nc.Close() })
	return nc, resp.TLS.PeerCertificates[0]
}

// tlsTransport is a listener that speaks TLS, with how a real client
// connects over it and which certificate a fresh handshake is served.
type tlsTransport struct {
	kind    string
	refused byte // CONNACK code when the SNI names another tenant
	connect func(t *testing.T, e *testEnv, id, tok string, conf *tls.Config) (byte, error)
	serial  func(t *testing.T, e *testEnv) int64 // served certificate, unverified
}

var tlsTransports = []tlsTransport{
	{
		kind: KindTLS, refused: 0x05, // Paho 3.1.1
		connect: func(t *testing.T, e *testEnv, id, tok string, conf *tls.Config) (byte, error) {
			_, rc, err := connect311(t, "ssl://"+e.addr(KindTLS), id, tok, conf)
			return rc, err
		},
		serial: func(t *testing.T, e *testEnv) int64 {
			t.Helper()
			c, err := tls.Dial("tcp", e.addr(KindTLS), &tls.Config{InsecureSkipVerify: true, ServerName: "acme.mqtt.test"})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
		},
	},
	{
		kind: KindWSS, refused: byte(packet.ErrNotAuthorized), // Paho MQTT 5
		connect: func(t *testing.T, e *testEnv, id, tok string, conf *tls.Config) (byte, error) {
			nc, _ := dialWSS(t, e, conf)
			_, rc, err := connect5Conn(t, nc, id, tok, nil)
			return byte(rc), err
		},
		serial: func(t *testing.T, e *testEnv) int64 {
			t.Helper()
			nc, cert := dialWSS(t, e, &tls.Config{InsecureSkipVerify: true, ServerName: "acme.mqtt.test"})
			nc.Close()
			return cert.SerialNumber.Int64()
		},
	},
}

func TestTLS(t *testing.T) {
	for _, tr := range tlsTransports {
		t.Run(tr.kind, func(t *testing.T) {
			cert := newTestCert(t)
			e := newEnv(t, envOptions{config: cert.config})
			id, tok := e.credential(t, tenantAcme, nil)

			tests := []struct {
				name       string
				serverName string
				refused    bool
			}{
				{"SNI names the token's tenant", "acme.mqtt.test", false},
				{"SNI names the tenant, upper case", "ACME.mqtt.test", false},
				{"SNI names another tenant", "dead.mqtt.test", true},
				{"SNI of another tenant that does not exist", "nobody.mqtt.test", true},
			}
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					var want byte
					if tc.refused {
						want = tr.refused
					}
					rc, err := tr.connect(t, e, id, tok, &tls.Config{ServerName: tc.serverName, RootCAs: cert.roots})
					if rc != want || (want == 0 && err != nil) {
						t.Fatalf("CONNACK code %#x (%v), want %#x", rc, err, want)
					}
				})
			}
			t.Run("no SNI is not checked", func(t *testing.T) {
				rc, err := tr.connect(t, e, id, tok, &tls.Config{InsecureSkipVerify: true})
				if err != nil || rc != 0 {
					t.Fatalf("rc %#x, %v", rc, err)
				}
			})

			t.Run("certificate reloaded without a restart", func(t *testing.T) {
				if s := tr.serial(t, e); s != 1 {
					t.Fatalf("serial %d before the reload, want 1", s)
				}
				newRoots := writeCert(t, cert.certFile, cert.keyFile, 2)
				waitUntil(t, func() bool { return tr.serial(t, e) == 2 })
				rc, err := tr.connect(t, e, id, tok, &tls.Config{ServerName: "acme.mqtt.test", RootCAs: newRoots})
				if err != nil || rc != 0 {
					t.Fatalf("connect with the new certificate: rc %#x, %v", rc, err)
				}
			})
		})
	}
}

func TestRelayWSS(t *testing.T) {
	cert := newTestCert(t)
	e := newEnv(t, envOptions{config: cert.config})
	id, tok := e.credential(t, tenantAcme, nil)
	nc, _ := dialWSS(t, e, &tls.Config{ServerName: "acme.mqtt.test", RootCAs: cert.roots})
	c, rc, err := connect5Conn(t, nc, id, tok, nil)
	if err != nil || rc != 0 {
		t.Fatalf("connect over wss: rc=%#x err=%v", byte(rc), err)
	}
	relayed(t, e, id, packet.Version5, "dev-5")

	// A message through the gateway and back (the node echoes it), large
	// enough to span many WebSocket frames, TLS records and relay buffers.
	got := make(chan []byte, 1)
	c.AddOnPublishReceived(func(p paho.PublishReceived) (bool, error) {
		select {
		case got <- p.Packet.Payload:
		default:
		}
		return true, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "devices/wss", QoS: 1}}}); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	big := strings.Repeat("x", 100_000)
	if _, err := c.Publish(ctx, &paho.Publish{Topic: "devices/wss", QoS: 1, Payload: []byte(big)}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	select {
	case m := <-got:
		if string(m) != big {
			t.Fatalf("echo of %d bytes came back as %d bytes", len(big), len(m))
		}
	case <-ctx.Done():
		t.Fatal("no echo over wss")
	}
	want := fmt.Sprintf(`berth_gateway_connects_total{tenant_id=%q,transport="wss"} 1`, tenantAcme)
	if m := scrape(t, e); !strings.Contains(m, want) {
		t.Errorf("metrics lack %s", want)
	}
}

func TestWSSHandshake(t *testing.T) {
	cert := newTestCert(t)
	e := newEnv(t, envOptions{config: cert.config})
	t.Run("a browser's ALPN offer gets HTTP/1.1", func(t *testing.T) {
		c, err := tls.Dial("tcp", e.addr(KindWSS), &tls.Config{
			ServerName: "acme.mqtt.test", RootCAs: cert.roots, NextProtos: []string{"h2", "http/1.1"},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if p := c.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
			t.Fatalf("ALPN %q, want http/1.1 (a WebSocket upgrade is an HTTP/1.1 request)", p)
		}
	})
	t.Run("plain HTTP is a failed handshake, counted", func(t *testing.T) {
		c, err := net.Dial("tcp", e.addr(KindWSS))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("GET /mqtt HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, func() bool {
			return strings.Contains(scrape(t, e), `berth_gateway_refusals_total{reason="tls_handshake",tenant_id=""} 1`)
		})
	})
	if len(e.node.conns) != 0 {
		t.Fatal("a connection that never sent a CONNECT reached the node")
	}
}
