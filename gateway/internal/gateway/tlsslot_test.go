package gateway

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// tlsSlotEnv is handshakeEnv (one handshake slot) serving TLS and WSS.
func tlsSlotEnv(t *testing.T, cert testCert, wait time.Duration) *testEnv {
	t.Helper()
	return newEnv(t, envOptions{config: func(c *Config) {
		cert.config(c)
		c.MaxHandshakes, c.HandshakeWait = 1, wait
		c.PerIPRate, c.PerIPBurst, c.MaxPendingPerIP = 10_000, 10_000, 10_000
		c.AcceptRate, c.AcceptBurst = 10_000, 10_000
	}})
}

// dialWSSErr is dialWSS that returns the dial's error instead of failing.
func dialWSSErr(e *testEnv, conf *tls.Config) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: conf}}
	c, _, err := websocket.Dial(ctx, "wss://"+e.addr(KindWSS)+"/mqtt", &websocket.DialOptions{
		HTTPClient: hc, Subprotocols: []string{"mqtt"},
	})
	if err != nil {
		return nil, err
	}
	return websocket.NetConn(context.Background(), c, websocket.MessageBinary), nil
}

// The server's part of a TLS handshake (TLS listener, and WSS through
// its TLS layer) takes a handshake slot: with the only one held, a TLS
// client is closed after -handshake-wait without a session, counted as
// tls_busy (not tls_handshake); a TLS client relayed before keeps
// flowing; once the slot frees, TLS and WSS clients get in.
func TestTLSHandshakeSlot(t *testing.T) {
	cert := newTestCert(t)
	e := tlsSlotEnv(t, cert, 300*time.Millisecond)
	id, tok := e.credential(t, tenantAcme, nil)
	conf := &tls.Config{ServerName: "acme.mqtt.test", RootCAs: cert.roots}

	est, rc, err := connect311(t, "ssl://"+e.addr(KindTLS), id, tok, conf)
	if err != nil || rc != 0 {
		t.Fatalf("established TLS client: rc=%d %v", rc, err)
	}
	got := make(chan string, 16)
	if tk := est.Subscribe("devices/1/down", 1, func(_ mqtt.Client, m mqtt.Message) { got <- string(m.Payload()) }); !tk.WaitTimeout(5*time.Second) || tk.Error() != nil {
		t.Fatalf("subscribe: %v", tk.Error())
	}
	waitUntil(t, func() bool { return len(e.gw.hs.slots) == 0 })
	waits0 := testutil.ToFloat64(e.gw.hs.waits)

	e.gw.hs.slots <- struct{}{} // a handshake in progress
	held := true
	defer func() {
		if held {
			<-e.gw.hs.slots
		}
	}()

	busy := func() float64 { return testutil.ToFloat64(e.gw.m.refusals.WithLabelValues("", "tls_busy")) }
	began := time.Now()
	d := net.Dialer{Timeout: 10 * time.Second}
	if c, err := tls.DialWithDialer(&d, "tcp", e.addr(KindTLS), conf); err == nil {
		c.Close()
		t.Fatal("TLS handshake completed with every handshake slot taken")
	} else {
		t.Logf("TLS dial with the slot taken failed after %v: %v", time.Since(began), err)
	}
	waitUntil(t, func() bool { return busy() == 1 })

	began = time.Now()
	if nc, err := dialWSSErr(e, conf); err == nil {
		nc.Close()
		t.Fatal("WSS handshake completed with every handshake slot taken")
	} else {
		t.Logf("WSS dial with the slot taken failed after %v: %v", time.Since(began), err)
	}
	waitUntil(t, func() bool { return busy() == 2 })
	if n := testutil.ToFloat64(e.gw.hs.waits) - waits0; n != 2 {
		t.Fatalf("handshake_waits_total grew by %v, want 2", n)
	}
	if n := testutil.ToFloat64(e.gw.m.refusals.WithLabelValues("", "tls_handshake")); n != 0 {
		t.Fatalf("refusals_total{reason=tls_handshake} = %v: a busy refusal is not the client's failed handshake", n)
	}

	// The established TLS client is not a handshake: it keeps flowing.
	for i := range 3 {
		msg := fmt.Sprintf("while busy %d", i)
		if tk := est.Publish("devices/1/down", 1, false, msg); !tk.WaitTimeout(5*time.Second) || tk.Error() != nil {
			t.Fatalf("publish with the slot taken: %v", tk.Error())
		}
		select {
		case m := <-got:
			if m != msg {
				t.Fatalf("echo %q, want %q", m, msg)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the established TLS client's message did not come back while the slot was taken")
		}
	}

	<-e.gw.hs.slots
	held = false
	if _, rc, err := connect311(t, "ssl://"+e.addr(KindTLS), id, tok, conf); err != nil || rc != 0 {
		t.Fatalf("TLS client once the slot freed: rc=%d %v", rc, err)
	}
	nc, err := dialWSSErr(e, conf)
	if err != nil {
		t.Fatalf("WSS dial once the slot freed: %v", err)
	}
	defer nc.Close()
	if _, rc, err := connect5Conn(t, nc, id, tok, nil); err != nil || rc != 0 {
		t.Fatalf("WSS client once the slot freed: rc=%#x %v", byte(rc), err)
	}
	waitUntil(t, func() bool { return len(e.gw.hs.slots) == 0 })
	if n := busy(); n != 2 {
		t.Fatalf("tls_busy = %v after the slot freed, want still 2", n)
	}
}

// stallConn lets its first write (the ClientHello) through and blocks
// every later one until it is closed: a client that never answers the
// server's flight.
type stallConn struct {
	net.Conn
	mu     sync.Mutex
	writes int
	closed chan struct{}
	once   sync.Once
}

func (c *stallConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.writes++
	n := c.writes
	c.mu.Unlock()
	if n > 1 {
		<-c.closed
		return 0, net.ErrClosed
	}
	return c.Conn.Write(b)
}

func (c *stallConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// A slot is never held while the server waits on the client's bytes:
// neither before its ClientHello nor while it (never) answers the
// server's flight. With the only slot and such clients in their
// handshakes, another TLS client still gets in.
func TestTLSHandshakeSlotNotHeldWaiting(t *testing.T) {
	cert := newTestCert(t)
	e := tlsSlotEnv(t, cert, 300*time.Millisecond)
	id, tok := e.credential(t, tenantAcme, nil)
	conf := &tls.Config{ServerName: "acme.mqtt.test", RootCAs: cert.roots}

	silent, err := net.Dial("tcp", e.addr(KindTLS)) // no ClientHello
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	raw, err := net.Dial("tcp", e.addr(KindTLS))
	if err != nil {
		t.Fatal(err)
	}
	sc := &stallConn{Conn: raw, closed: make(chan struct{})}
	defer sc.Close()
	stalled := make(chan error, 1)
	go func() {
		tc := tls.Client(sc, conf)
		stalled <- tc.Handshake()
	}()
	// The server has sent its flight once the client's second write (its
	// Finished) is under way: from then on the server waits on it.
	waitUntil(t, func() bool {
		sc.mu.Lock()
		defer sc.mu.Unlock()
		return sc.writes > 1
	})

	if _, rc, err := connect311(t, "ssl://"+e.addr(KindTLS), id, tok, conf); err != nil || rc != 0 {
		t.Fatalf("TLS client beside a silent and a stalled handshake: rc=%d %v", rc, err)
	}
	if n := testutil.ToFloat64(e.gw.m.refusals.WithLabelValues("", "tls_busy")); n != 0 {
		t.Fatalf("tls_busy = %v with the only slot free but for waiting handshakes", n)
	}
	sc.Close()
	<-stalled
}
