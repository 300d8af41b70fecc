package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"berth.dev/broker/packet"
	"berth.dev/broker/tracing"
)

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
