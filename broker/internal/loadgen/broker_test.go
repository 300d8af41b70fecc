package loadgen

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/testenv"
	"github.com/coder/websocket"
)

// mosquittoPath is the Debian package's broker binary; make bench and
// these tests use it as the reference peer.
const mosquittoPath = "/usr/sbin/mosquitto"

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startMosquitto runs a private mosquitto on a free loopback port that
// admits anyone, with extra config lines appended, and stops it (by PID) at
// cleanup. It returns host:port.
func startMosquitto(t *testing.T, extra ...string) string {
	t.Helper()
	port := freePort(t)
	conf := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\nmax_connections -1\n", port) +
		strings.Join(extra, "\n") + "\n"
	return startMosquittoConf(t, port, conf)
}

// startMosquittoConf runs mosquitto with conf, whose first listener is on
// port, and waits until it listens.
func startMosquittoConf(t *testing.T, port int, conf string) string {
	t.Helper()
	if _, err := os.Stat(mosquittoPath); err != nil {
		t.Fatalf("mosquitto is needed for these tests (apt-get install mosquitto): %v", err)
	}
	if os.Geteuid() == 0 {
		// Keep root's identity so mosquitto can read files in t.TempDir.
		conf = "user root\n" + conf
	}
	path := filepath.Join(t.TempDir(), "mosquitto.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(mosquittoPath, "-c", path)
	log := &testenv.LogBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	waitListening(t, addr, exited, log)
	return addr
}

// waitListening polls addr until it accepts, the process exits, or 10 s pass.
func waitListening(t *testing.T, addr string, exited <-chan struct{}, log fmt.Stringer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			t.Fatalf("broker exited before listening on %s:\n%s", addr, log)
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return
		}
		time.Sleep(10 * time.Millisecond) // polling for the port, with a deadline
	}
	t.Fatalf("broker not listening on %s after 10s:\n%s", addr, log)
}

// wsBridge serves MQTT over WebSocket on /mqtt (subprotocol mqtt) and
// forwards each session to the broker at tcpAddr, as the gateway's
// WebSocket listener will. It returns host:port.
func wsBridge(t *testing.T, tcpAddr string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/mqtt" {
			http.NotFound(w, r)
			return
		}
		ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"mqtt"}})
		if err != nil {
			return
		}
		ws.SetReadLimit(1 << 28)
		up, err := net.Dial("tcp", tcpAddr)
		if err != nil {
			ws.Close(websocket.StatusInternalError, "broker unreachable")
			return
		}
		nc := websocket.NetConn(r.Context(), ws, websocket.MessageBinary)
		done := make(chan struct{}, 2)
		go func() { io.Copy(up, nc); up.Close(); done <- struct{}{} }()
		go func() { io.Copy(nc, up); nc.Close(); done <- struct{}{} }()
		<-done
		<-done
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// selfSigned writes a certificate for 127.0.0.1 and its key into dir and
// returns their paths.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// testConfig is a short bounded run against addr.
func testConfig(addr string, mode Mode) Config {
	cfg := Defaults()
	cfg.Addr = addr
	cfg.Mode = mode
	cfg.Duration = 10 * time.Second // an upper bound; tests use Count
	cfg.Drain = 5 * time.Second
	cfg.ConnectTimeout = 5 * time.Second
	return cfg
}

func runOK(t *testing.T, cfg Config) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := Run(ctx, cfg, nil)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !r.OK() {
		t.Fatalf("run failed: %v", r.Failures)
	}
	return r
}
