package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"berth.dev/broker/packet"
	"berth.dev/broker/tracing"
)

// connect311 connects with the Eclipse Paho MQTT 3.1.1 client and returns
// the client and the CONNACK return code.
func connect311(t *testing.T, broker, user, pass string, tlsConf *tls.Config) (mqtt.Client, byte, error) {
	t.Helper()
	opts := mqtt.NewClientOptions().AddBroker(broker).SetClientID("dev-311").
		SetUsername(user).SetPassword(pass).SetProtocolVersion(4).
		SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(5 * time.Second)
	if tlsConf != nil {
		opts.SetTLSConfig(tlsConf)
	}
	c := mqtt.NewClient(opts)
	tok := c.Connect()
	if !tok.WaitTimeout(10 * time.Second) {
		t.Fatal("paho 3.1.1: connect timed out")
	}
	t.Cleanup(func() { c.Disconnect(0) })
	return c, tok.(*mqtt.ConnectToken).ReturnCode(), tok.Error()
}

// connect5 connects with the Eclipse Paho MQTT 5 client over TCP and
// returns the CONNACK reason code.
func connect5(t *testing.T, addr, user, pass string) (*paho.Client, packet.ReasonCode, error) {
	t.Helper()
	return connect5Props(t, addr, user, pass, nil)
}

// connect5Props is connect5 with user properties on the CONNECT.
func connect5Props(t *testing.T, addr, user, pass string, props paho.UserProperties) (*paho.Client, packet.ReasonCode, error) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return connect5Conn(t, conn, user, pass, props)
}

// connect5Conn connects the Eclipse Paho MQTT 5 client over conn, a
// stream of any transport.
func connect5Conn(t *testing.T, conn net.Conn, user, pass string, props paho.UserProperties) (*paho.Client, packet.ReasonCode, error) {
	t.Helper()
	c := paho.NewClient(paho.ClientConfig{Conn: conn})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, &paho.Connect{
		ClientID: "dev-5", KeepAlive: pahoKeepAlive(conn), CleanStart: true,
		Username: user, UsernameFlag: true, Password: []byte(pass), PasswordFlag: true,
		Properties: &paho.ConnectProperties{User: props},
	})
	t.Cleanup(func() { c.Disconnect(&paho.Disconnect{}); conn.Close() })
	if ca == nil {
		return c, 0, err
	}
	return c, packet.ReasonCode(ca.ReasonCode), err
}

// pahoKeepAlive is the keep-alive to ask for over conn. Paho MQTT 5
// (v0.23.0) writes a packet as net.Buffers, which is one writev on a TCP
// socket but one Write per buffer on anything else (TLS, WebSocket), and its
// pinger writes its first PINGREQ at once, from its own goroutine: over TLS
// or WebSocket that PINGREQ can land inside the SUBSCRIBE the test is
// writing, and the node rightly drops the malformed stream. These tests are
// not about keep-alive, so they ask for none there.
func pahoKeepAlive(conn net.Conn) uint16 {
	if _, ok := conn.(*net.TCPConn); ok {
		return 30
	}
	return 0
}

func TestRelayMQTT311(t *testing.T) {
	e := newEnv(t, envOptions{})
	id, tok := e.credential(t, tenantAcme, nil)
	c, rc, err := connect311(t, "tcp://"+e.addr(KindTCP), id, tok, nil)
	if err != nil || rc != 0 {
		t.Fatalf("connect: rc=%d err=%v", rc, err)
	}
	relayed(t, e, id, packet.Version311, "dev-311")

	// A message through the gateway and back (the node echoes it).
	got := make(chan string, 1)
	if tk := c.Subscribe("devices/1/down", 1, func(_ mqtt.Client, m mqtt.Message) { got <- string(m.Payload()) }); !tk.WaitTimeout(5*time.Second) || tk.Error() != nil {
		t.Fatalf("subscribe: %v", tk.Error())
	}
	if tk := c.Publish("devices/1/down", 1, false, "hello"); !tk.WaitTimeout(5*time.Second) || tk.Error() != nil {
		t.Fatalf("publish: %v", tk.Error())
	}
	select {
	case m := <-got:
		if m != "hello" {
			t.Fatalf("echo %q", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no echo through the gateway")
	}
}

// relayed returns what the node saw of the next relayed connection,
// asserting its PROXY header and the CONNECT's version and client id.
func relayed(t *testing.T, e *testEnv, credID string, version byte, clientID string) nodeConn {
	t.Helper()
	nc := e.node.next(t)
	if nc.err != nil {
		t.Fatalf("node refused the header: %v", nc.err)
	}
	checkHeader(t, nc, e, credID)
	if nc.version != version || nc.clientID != clientID {
		t.Fatalf("node got client %q version %d, want %q version %d", nc.clientID, nc.version, clientID, version)
	}
	return nc
}

// checkHeader asserts what the node learned from the PROXY header.
func checkHeader(t *testing.T, nc nodeConn, e *testEnv, credID string) {
	t.Helper()
	if nc.info.TenantID != tenantAcme || nc.info.CredentialID != credID {
		t.Fatalf("header: tenant %q credential %q", nc.info.TenantID, nc.info.CredentialID)
	}
	if string(nc.info.ACL) != `{"pub":["devices/#"],"sub":["devices/#"]}` {
		t.Fatalf("header ACL %s", nc.info.ACL)
	}
	if !nc.header.Source.Addr().IsLoopback() || nc.header.Source.Port() == 0 {
		t.Fatalf("header source %v, want the client's loopback address", nc.header.Source)
	}
	for _, kind := range []string{KindTCP, KindTLS, KindWS, KindWSS} {
		if a := e.gw.Addr(kind); a != nil && a.String() == nc.header.Dest.String() {
			return
		}
	}
	t.Fatalf("header destination %v, want a gateway listener", nc.header.Dest)
}

func TestRelayMQTT5(t *testing.T) {
	e := newEnv(t, envOptions{})
	id, tok := e.credential(t, tenantAcme, func(c map[string]any) { c["exp"] = time.Now().Add(time.Hour).Unix() })
	_, rc, err := connect5(t, e.addr(KindTCP), id, tok)
	if err != nil || rc != 0 {
		t.Fatalf("connect: rc=%#x err=%v", byte(rc), err)
	}
	nc := relayed(t, e, id, packet.Version5, "dev-5")
	if nc.info.TokenExpiry < time.Now().Unix() {
		t.Fatalf("token expiry TLV %d", nc.info.TokenExpiry)
	}
}

func TestRelayWebSocket(t *testing.T) {
	e := newEnv(t, envOptions{})
	id, tok := e.credential(t, tenantAcme, nil)
	c, rc, err := connect311(t, "ws://"+e.addr(KindWS)+"/mqtt", id, tok, nil)
	if err != nil || rc != 0 {
		t.Fatalf("connect over WebSocket: rc=%d err=%v", rc, err)
	}
	relayed(t, e, id, packet.Version311, "dev-311")
	got := make(chan string, 1)
	c.Subscribe("devices/ws", 0, func(_ mqtt.Client, m mqtt.Message) { got <- string(m.Payload()) }).WaitTimeout(5 * time.Second)
	big := strings.Repeat("x", 100_000) // spans many WebSocket frames and relay buffers
	c.Publish("devices/ws", 0, false, big).WaitTimeout(5 * time.Second)
	select {
	case m := <-got:
		if m != big {
			t.Fatalf("echo of %d bytes came back as %d bytes", len(big), len(m))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no echo over WebSocket")
	}
}

func TestWebSocketNeedsSubprotocol(t *testing.T) {
	e := newEnv(t, envOptions{})
	req, _ := http.NewRequest(http.MethodGet, "http://"+e.addr(KindWS)+"/mqtt", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Upgraded without the mqtt subprotocol: closed straight away with a
	// policy-violation close frame, and nothing reaches a node.
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Protocol") != "" {
		t.Fatalf("status %d protocol %q", resp.StatusCode, resp.Header.Get("Sec-WebSocket-Protocol"))
	}
	frame := make([]byte, 4)
	rw, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		t.Fatalf("upgrade body is %T", resp.Body)
	}
	if _, err := io.ReadFull(rw, frame); err != nil {
		t.Fatal(err)
	}
	if frame[0] != 0x88 || int(frame[2])<<8|int(frame[3]) != 1008 {
		t.Fatalf("first frame % X, want a close frame with status 1008", frame)
	}
}

// refusalCase is one way to be refused and the codes both protocols must see.
type refusalCase struct {
	name   string
	setup  func(t *testing.T, e *testEnv) (user, pass string)
	v5, v3 byte
}

func refusalCases() []refusalCase {
	return []refusalCase{
		{"garbage token", func(t *testing.T, e *testEnv) (string, string) { return "crd_x", "not-a-jwt" }, 0x86, 0x04},
		{"expired token", func(t *testing.T, e *testEnv) (string, string) {
			return e.credential(t, tenantAcme, func(c map[string]any) { c["exp"] = time.Now().Add(-time.Hour).Unix() })
		}, 0x86, 0x04},
		{"user name is not sub", func(t *testing.T, e *testEnv) (string, string) {
			_, tok := e.credential(t, tenantAcme, nil)
			return "crd_someone_else", tok
		}, 0x86, 0x04},
		{"token signed by another key", func(t *testing.T, e *testEnv) (string, string) {
			id, tok := e.credential(t, tenantAcme, nil)
			parts := strings.Split(tok, ".")
			return id, parts[0] + "." + parts[1] + "." + strings.Repeat("A", len(parts[2]))
		}, 0x86, 0x04},
		{"revoked credential", func(t *testing.T, e *testEnv) (string, string) {
			id, tok := e.credential(t, tenantAcme, nil)
			e.revoke(t, id)
			waitUntil(t, func() bool { return e.gw.d.Revoked.Revoked(id) })
			return id, tok
		}, 0x87, 0x05},
		{"unknown tenant", func(t *testing.T, e *testEnv) (string, string) {
			return e.credential(t, "ten_nobody", nil)
		}, 0x87, 0x05},
		{"over the connection limit", func(t *testing.T, e *testEnv) (string, string) {
			// The previous subtest's connections release their leases as
			// their relays end, a moment after the client goes.
			waitUntil(t, func() bool { return e.gw.d.Limits.Held(tenantAcme) == 0 })
			id, tok := e.credential(t, tenantAcme, nil)
			if _, rc, err := connect311(t, "tcp://"+e.addr(KindTCP), id, tok, nil); err != nil || rc != 0 {
				t.Fatalf("first connection (the one allowed): rc=%d %v", rc, err)
			}
			return id, tok
		}, 0x97, 0x03},
		{"node unreachable", func(t *testing.T, e *testEnv) (string, string) {
			return e.credential(t, tenantDead, nil)
		}, 0x88, 0x03},
		{"tenant has no node", func(t *testing.T, e *testEnv) (string, string) {
			return e.credential(t, tenantUnplaced, nil)
		}, 0x88, 0x03},
	}
}

func TestRefusals(t *testing.T) {
	for _, tc := range refusalCases() {
		t.Run(tc.name, func(t *testing.T) {
			// A fresh gateway per case: quotas of 1 for the limit case, and
			// no rate-limit interplay between cases.
			e := newEnv(t, envOptions{maxConns: 1})
			t.Run("MQTT 5", func(t *testing.T) {
				user, pass := tc.setup(t, e)
				_, rc, err := connect5(t, e.addr(KindTCP), user, pass)
				if err == nil || byte(rc) != tc.v5 {
					t.Fatalf("CONNACK reason %#x (err %v), want %#x", byte(rc), err, tc.v5)
				}
			})
			t.Run("MQTT 3.1.1", func(t *testing.T) {
				user, pass := tc.setup(t, e)
				_, rc, err := connect311(t, "tcp://"+e.addr(KindTCP), user, pass, nil)
				if err == nil || rc != tc.v3 {
					t.Fatalf("CONNACK return code %#x (err %v), want %#x", rc, err, tc.v3)
				}
			})
		})
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5 s")
		}
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
}

// rawConnect writes b and returns everything the gateway answers until it
// closes the connection.
func rawConnect(t *testing.T, addr string, b []byte) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("gateway did not close the connection: %v", err)
	}
	return out
}

func TestMalformedConnects(t *testing.T) {
	e := newEnv(t, envOptions{config: func(c *Config) { c.MaxConnectSize = 256; c.ConnectTimeout = 300 * time.Millisecond }})
	tests := []struct {
		name string
		in   []byte
		want []byte
	}{
		{"protocol level 6: 3.1.1-style refusal 0x01 [MQTT-3.1.2-2]",
			[]byte{0x10, 0x0C, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x06, 0x02, 0x00, 0x3C, 0x00, 0x00},
			[]byte{0x20, 0x02, 0x00, 0x01}},
		{"MQTT 5 with a reserved flag: 0x81 then close",
			[]byte{0x10, 0x0D, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x05, 0x03, 0x00, 0x3C, 0x00, 0x00, 0x00},
			[]byte{0x20, 0x03, 0x00, 0x81, 0x00}},
		{"3.1.1 with a reserved flag: closed without CONNACK [MQTT-3.1.4-1]",
			[]byte{0x10, 0x0C, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x04, 0x03, 0x00, 0x3C, 0x00, 0x00},
			[]byte{}},
		{"first packet is PINGREQ [MQTT-3.1.0-1]", []byte{0xC0, 0x00}, []byte{}},
		{"CONNECT larger than the cap, refused unread", []byte{0x10, 0xFF, 0x7F}, []byte{}},
		{"3.1.1 without credentials: 0x04",
			[]byte{0x10, 0x0C, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x04, 0x02, 0x00, 0x3C, 0x00, 0x00},
			[]byte{0x20, 0x02, 0x00, 0x04}},
		{"silent client: closed at the CONNECT deadline", nil, []byte{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := rawConnect(t, e.addr(KindTCP), tc.in)
			if string(got) != string(tc.want) {
				t.Fatalf("answer % X, want % X", got, tc.want)
			}
		})
	}
	select {
	case nc := <-e.node.conns:
		t.Fatalf("a refused connection reached the node: %+v", nc)
	default:
	}
}

func TestRevocationClosesLiveConnection(t *testing.T) {
	e := newEnv(t, envOptions{})
	id, tok := e.credential(t, tenantAcme, nil)
	lost := make(chan error, 1)
	opts := mqtt.NewClientOptions().AddBroker("tcp://" + e.addr(KindTCP)).SetClientID("victim").
		SetUsername(id).SetPassword(tok).SetAutoReconnect(false).
		SetConnectionLostHandler(func(_ mqtt.Client, err error) { lost <- err })
	c := mqtt.NewClient(opts)
	if tk := c.Connect(); !tk.WaitTimeout(5*time.Second) || tk.Error() != nil {
		t.Fatalf("connect: %v", tk.Error())
	}
	defer c.Disconnect(0)
	e.node.next(t)
	other, otherTok := e.credential(t, tenantAcme, nil)
	c2, rc, err := connect311(t, "tcp://"+e.addr(KindTCP), other, otherTok, nil)
	if err != nil || rc != 0 {
		t.Fatal(err)
	}

	e.revoke(t, id)
	select {
	case err := <-lost:
		t.Logf("revoked client disconnected: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("live connection of a revoked credential still open after 5 s")
	}
	if !c2.IsConnectionOpen() {
		t.Fatal("another credential's connection was closed too")
	}
	if _, rc, _ := connect311(t, "tcp://"+e.addr(KindTCP), id, tok, nil); rc != 0x05 {
		t.Fatalf("reconnect with the revoked credential: rc %#x, want 0x05", rc)
	}
}

func TestPerIPRateLimit(t *testing.T) {
	e := newEnv(t, envOptions{config: func(c *Config) { c.PerIPRate, c.PerIPBurst = 0.001, 2 }})
	for i := range 2 {
		// Within the burst: the gateway waits for a CONNECT.
		c, err := net.Dial("tcp", e.addr(KindTCP))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); !isTimeout(err) {
			t.Fatalf("connection %d: %v, want it held open", i, err)
		}
	}
	// Over it: reset at accept, unread.
	resetAtAccept(t, "127.0.0.1", e.addr(KindTCP))
	waitUntil(t, func() bool { return strings.Contains(scrape(t, e), `berth_gateway_rate_limited_total{scope="ip"} 1`) })
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func scrape(t *testing.T, e *testEnv) string {
	t.Helper()
	resp, err := http.Get("http://" + e.addr(KindMetrics) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestMetrics(t *testing.T) {
	e := newEnv(t, envOptions{})
	id, tok := e.credential(t, tenantAcme, nil)
	if _, rc, err := connect311(t, "tcp://"+e.addr(KindTCP), id, tok, nil); err != nil || rc != 0 {
		t.Fatal(err)
	}
	connect311(t, "tcp://"+e.addr(KindTCP), id, "bad", nil)
	dead, deadTok := e.credential(t, tenantDead, nil)
	connect311(t, "tcp://"+e.addr(KindTCP), dead, deadTok, nil)
	m := scrape(t, e)
	for _, want := range []string{
		fmt.Sprintf(`berth_gateway_connects_total{tenant_id=%q,transport="tcp"} 1`, tenantAcme),
		`berth_gateway_refusals_total{reason="bad_credentials",tenant_id=""} 1`,
		fmt.Sprintf(`berth_gateway_refusals_total{reason="node_unreachable",tenant_id=%q} 1`, tenantDead),
		fmt.Sprintf(`berth_gateway_connect_duration_seconds_count{tenant_id=%q} 1`, tenantAcme),
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestDrain(t *testing.T) {
	e := newEnv(t, envOptions{})
	id, tok := e.credential(t, tenantAcme, nil)
	lost := make(chan struct{})
	opts := mqtt.NewClientOptions().AddBroker("tcp://" + e.addr(KindTCP)).SetClientID("drained").
		SetUsername(id).SetPassword(tok).SetAutoReconnect(false).
		SetConnectionLostHandler(func(mqtt.Client, error) { close(lost) })
	c := mqtt.NewClient(opts)
	if tk := c.Connect(); !tk.WaitTimeout(5*time.Second) || tk.Error() != nil {
		t.Fatalf("connect: %v", tk.Error())
	}
	defer c.Disconnect(0)

	const grace = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- e.gw.Shutdown(ctx) }()

	// New connections are refused at once...
	waitUntil(t, func() bool {
		c, err := net.DialTimeout("tcp", e.addr(KindTCP), time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	// ...while the live one stays until the grace period ends.
	select {
	case <-lost:
		if el := time.Since(start); el < grace-50*time.Millisecond {
			t.Fatalf("live connection closed after %v, before the %v grace", el, grace)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("live connection not closed after the grace period")
	}
	if err := <-done; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want DeadlineExceeded (connections had to be cut)", err)
	}
	if e.gw.d.Limits.Held(tenantAcme) != 0 {
		t.Fatalf("connection-limit lease still held after drain")
	}
}

func TestJWKSUnreachable(t *testing.T) {
	e := newEnv(t, envOptions{config: func(c *Config) { c.JWKSURL = "http://127.0.0.1:1/v1/.well-known/jwks.json" }})
	id, tok := e.credential(t, tenantAcme, nil)
	if _, rc, err := connect5(t, e.addr(KindTCP), id, tok); err == nil || rc != 0x88 {
		t.Fatalf("MQTT 5: reason %#x (%v), want 0x88 server unavailable", byte(rc), err)
	}
	if _, rc, err := connect311(t, "tcp://"+e.addr(KindTCP), id, tok, nil); err == nil || rc != 0x03 {
		t.Fatalf("MQTT 3.1.1: return code %#x (%v), want 0x03", rc, err)
	}
}

func TestGlobalAcceptRate(t *testing.T) {
	e := newEnv(t, envOptions{config: func(c *Config) { c.AcceptRate, c.AcceptBurst = 0.001, 1 }})
	first, err := net.Dial("tcp", e.addr(KindTCP))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	// The burst of one is spent: every further connection, from any
	// address, is reset before TLS or MQTT, including WebSocket upgrades.
	resetAtAccept(t, "127.0.0.1", e.addr(KindTCP))
	if _, err := http.Get("http://" + e.addr(KindWS) + "/mqtt"); err == nil {
		t.Fatal("WebSocket upgrade request answered over the global accept rate")
	}
	waitUntil(t, func() bool {
		return strings.Contains(scrape(t, e), `berth_gateway_rate_limited_total{scope="global"} 2`)
	})
}

// BenchmarkConnect measures a whole CONNECT through the gateway on
// loopback: JWT check, revocation, route (cached), Redis admission, node
// dial, signed PROXY header, CONNACK relayed back, then close. Tracing off
// (no tracer provider), at the default sample ratio, and with every
// connect sampled; the traced runs use the real pipeline (spans kept in
// Postgres, no OTLP collector).
func BenchmarkConnect(b *testing.B) {
	for _, bc := range []struct {
		name  string
		ratio float64
	}{{"tracing=off", 0}, {"tracing=0.01", DefaultConfig().TraceSample}, {"tracing=1", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			o := envOptions{config: func(c *Config) { c.PerIPRate, c.PerIPBurst, c.AcceptRate, c.AcceptBurst = 1e6, 1e6, 1e6, 1e6 }}
			var store *tracing.SpanStore
			if bc.ratio > 0 {
				o.tracer = func(pool *pgxpool.Pool) trace.TracerProvider {
					p, err := tracing.New(context.Background(), tracing.Options{SampleRatio: bc.ratio, Pool: pool})
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { p.Shutdown(context.Background()) })
					store = p.Store()
					return p.TracerProvider()
				}
			}
			benchConnect(b, newEnv(b, o))
			if store != nil {
				store.ForceFlush(context.Background())
				b.ReportMetric(float64(store.Stored()), "spans-stored")
				b.ReportMetric(float64(store.Dropped(tracing.DropQueueFull)), "spans-dropped")
			}
		})
	}
}

func benchConnect(b *testing.B, e *testEnv) {
	id, tok := e.credential(b, tenantAcme, nil)
	connect := packet.Connect{CleanStart: true, KeepAlive: 30, ClientID: []byte("bench"), Username: []byte(id), Password: []byte(tok)}
	msg, _ := connect.Append(nil, packet.Version311)
	addr := e.addr(KindTCP)
	ack := make([]byte, 4)
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		c.Write(msg)
		if _, err := io.ReadFull(c, ack); err != nil || ack[3] != 0 {
			b.Fatalf("CONNACK % X, %v", ack, err)
		}
		c.Close()
		<-e.node.conns
	}
}
