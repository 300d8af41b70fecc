package gateway

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

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
