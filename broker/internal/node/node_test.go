package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/broker/internal/tenanttest"
	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
	"berth.dev/broker/proxyproto"
	"berth.dev/testenv"
)

var (
	testSecret = []byte("0123456789abcdef0123456789abcdef")
	testToken  = "node-token-0123456789"
)

type testNode struct {
	*Node
	pool *pgxpool.Pool
}

func startNode(t *testing.T) *testNode {
	t.Helper()
	return startNodeWith(t, testenv.DatabaseURL(t), "", true)
}

// startNodeWith starts a node on the database at url, keeping tenants'
// state under dataDir (empty: memory). seed creates the two test tenants.
func startNodeWith(t *testing.T, url, dataDir string, seed bool) *testNode {
	t.Helper()
	return startNodeCfg(t, url, dataDir, seed, nil)
}

// startNodeCfg is startNodeWith with a hook to change the node's Config.
func startNodeCfg(t *testing.T, url, dataDir string, seed bool, change func(*Config)) *testNode {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if seed {
		for _, id := range []string{"ten_a", "ten_b"} {
			seedTenant(t, pool, id)
		}
	}
	cfg := Config{
		ID: "node-test", InternalListen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", DataDir: dataDir, Fsync: wal.SyncAlways,
		DatabaseURL: url, ProxySecret: testSecret, NodeToken: testToken,
		UsageInterval: time.Hour, HeartbeatInterval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if change != nil {
		change(&cfg)
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return &testNode{Node: n, pool: pool}
}

func seedTenant(t *testing.T, pool *pgxpool.Pool, id string) {
	t.Helper()
	tenanttest.SeedFree(t, pool, id)
}

type cred struct {
	tenant, id string
	acl        string
	expiry     int64
}

var allowAll = `{"pub":["#"],"sub":["#"]}`

// dial opens a connection to the node as a gateway would: a signed PROXY
// header first. secret nil signs with the test secret. As in production
// (a gateway forwards only credentials the API made), the credential has
// a live row in credentials when its tenant exists: the node ends the
// sessions of credentials that are revoked or have no row.
// ensureCredential puts c's row in place, as the API would have made it,
// for a tenant that exists.
func (n *testNode) ensureCredential(t *testing.T, c cred) {
	t.Helper()
	if _, err := n.pool.Exec(context.Background(), `INSERT INTO credentials (id, tenant_id, name, acl)
		SELECT $1, $2, $1, '{}' WHERE EXISTS (SELECT 1 FROM tenants WHERE id = $2) ON CONFLICT DO NOTHING`, c.id, c.tenant); err != nil {
		t.Fatal(err)
	}
}

func (n *testNode) dial(t *testing.T, c cred, secret []byte) net.Conn {
	t.Helper()
	if secret == nil {
		secret = testSecret
	}
	if c.id != "" {
		n.ensureCredential(t, c)
	}
	s, err := proxyproto.NewSigner(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	hdr, err := s.Append(nil, netip.MustParseAddrPort("203.0.113.7:40000"), netip.MustParseAddrPort("127.0.0.1:7883"),
		&proxyproto.Info{TenantID: c.tenant, CredentialID: c.id, ACL: []byte(c.acl), TokenExpiry: c.expiry})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", n.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.Write(hdr); err != nil {
		t.Fatal(err)
	}
	return conn
}

// mqtt5 connects a paho.golang client over a gateway-style connection.
func (n *testNode) mqtt5(t *testing.T, c cred, clientID string, got chan<- string) *paho.Client {
	t.Helper()
	conn := n.dial(t, c, nil)
	cl := paho.NewClient(paho.ClientConfig{
		Conn: conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(p paho.PublishReceived) (bool, error) {
			if got != nil {
				got <- p.Packet.Topic + "=" + string(p.Packet.Payload)
			}
			return true, nil
		}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ack, err := cl.Connect(ctx, &paho.Connect{ClientID: clientID, KeepAlive: 30, CleanStart: true, Username: c.id, UsernameFlag: true})
	if err != nil {
		t.Fatalf("connect %s/%s: %v", c.tenant, clientID, err)
	}
	if ack.ReasonCode != 0 {
		t.Fatalf("connect %s/%s: reason %#x", c.tenant, clientID, ack.ReasonCode)
	}
	t.Cleanup(func() { _ = cl.Disconnect(&paho.Disconnect{}) })
	return cl
}

func subscribe(t *testing.T, cl *paho.Client, filter string) byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sa, err := cl.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}})
	if sa == nil || len(sa.Reasons) == 0 { // paho also returns an error for a refusal: the reason code is what counts
		t.Fatalf("subscribe %q: %v", filter, err)
	}
	return sa.Reasons[0]
}

func publish(t *testing.T, cl *paho.Client, topic, payload string) byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := cl.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(payload)})
	if err != nil && r == nil {
		t.Fatalf("publish %q: %v", topic, err)
	}
	return r.ReasonCode
}

func expectMsg(t *testing.T, got <-chan string, want string) {
	t.Helper()
	select {
	case m := <-got:
		if m != want {
			t.Fatalf("received %q, want %q", m, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no message %q within 5 s", want)
	}
}

func expectNone(t *testing.T, got <-chan string, within time.Duration) {
	t.Helper()
	select {
	case m := <-got:
		t.Fatalf("unexpected message %q", m)
	case <-time.After(within):
	}
}

// Two tenants on one node share nothing: not topics (even under '#'), not
// client ids.
func TestTenantsAreIsolated(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	gotA, gotB := make(chan string, 10), make(chan string, 10)
	subA := n.mqtt5(t, cred{"ten_a", "crd_a", allowAll, 0}, "same-id", gotA)
	subB := n.mqtt5(t, cred{"ten_b", "crd_b", allowAll, 0}, "same-id", gotB) // same client id, other tenant: no takeover
	subscribe(t, subA, "#")
	subscribe(t, subB, "#")

	pubB := n.mqtt5(t, cred{"ten_b", "crd_b", allowAll, 0}, "pub-b", nil)
	if rc := publish(t, pubB, "secret/b", "for b only"); rc >= 0x80 {
		t.Fatalf("publish reason %#x", rc)
	}
	expectMsg(t, gotB, "secret/b=for b only")
	expectNone(t, gotA, 300*time.Millisecond)

	// Tenant a's "same-id" session is still alive after b's connected.
	pubA := n.mqtt5(t, cred{"ten_a", "crd_a", allowAll, 0}, "pub-a", nil)
	publish(t, pubA, "x", "for a")
	expectMsg(t, gotA, "x=for a")
	expectNone(t, gotB, 300*time.Millisecond)
}

func TestCredentialACLIsEnforced(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	c := cred{"ten_a", "crd_limited", `{"pub":["devices/d1/#"],"sub":["cmd/d1/#"]}`, 0}
	got := make(chan string, 10)
	cl := n.mqtt5(t, c, "d1", got)

	if rc := subscribe(t, cl, "cmd/d1/+"); rc != 1 {
		t.Fatalf("allowed subscribe: reason %#x, want granted QoS 1", rc)
	}
	if rc := subscribe(t, cl, "#"); rc != byte(packet.ErrNotAuthorized) {
		t.Fatalf("subscribe '#': reason %#x, want 0x87", rc)
	}
	if rc := publish(t, cl, "devices/d1/temp", "21"); rc >= 0x80 { // 0x10: accepted, no subscribers
		t.Fatalf("allowed publish: reason %#x", rc)
	}
	if rc := publish(t, cl, "devices/d2/temp", "21"); rc != byte(packet.ErrNotAuthorized) {
		t.Fatalf("forbidden publish: reason %#x, want 0x87", rc)
	}
	admin := n.mqtt5(t, cred{"ten_a", "crd_admin", allowAll, 0}, "admin", nil)
	publish(t, admin, "cmd/d1/reboot", "now")
	expectMsg(t, got, "cmd/d1/reboot=now")
}

// expectClosedSilently checks the node closes conn without answering a byte.
func expectClosedSilently(t *testing.T, conn net.Conn) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 64)
	k, err := conn.Read(b)
	if k != 0 || err == nil {
		t.Fatalf("read %d bytes (%x), err %v; want the connection closed unanswered", k, b[:k], err)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("connection still open after 5 s")
	}
}

func connectBytes(t *testing.T, id string) []byte {
	t.Helper()
	b, err := (&packet.Connect{ProtocolName: []byte("MQTT"), Version: packet.Version5, CleanStart: true, KeepAlive: 30, ClientID: []byte(id)}).Append(nil, packet.Version5)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestForgedMissingAndReplayedHeadersAreRefused(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	t.Run("missing", func(t *testing.T) {
		conn, err := net.Dial("tcp", n.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.Write(connectBytes(t, "c"))
		expectClosedSilently(t, conn)
	})
	t.Run("forged", func(t *testing.T) {
		conn := n.dial(t, cred{"ten_a", "crd_a", allowAll, 0}, []byte("another-secret-0123456789abcdef!"))
		conn.Write(connectBytes(t, "c"))
		expectClosedSilently(t, conn)
	})
	t.Run("tampered", func(t *testing.T) {
		s, _ := proxyproto.NewSigner(testSecret, nil)
		hdr, _ := s.Append(nil, netip.MustParseAddrPort("203.0.113.7:1"), netip.MustParseAddrPort("127.0.0.1:2"),
			&proxyproto.Info{TenantID: "ten_a", CredentialID: "crd_a", ACL: []byte(allowAll)})
		i := bytes.Index(hdr, []byte("ten_a"))
		copy(hdr[i:], "ten_b") // move the connection to another tenant
		conn, err := net.Dial("tcp", n.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.Write(append(hdr, connectBytes(t, "c")...))
		expectClosedSilently(t, conn)
	})
	t.Run("replayed", func(t *testing.T) {
		s, _ := proxyproto.NewSigner(testSecret, nil)
		hdr, _ := s.Append(nil, netip.MustParseAddrPort("203.0.113.7:1"), netip.MustParseAddrPort("127.0.0.1:2"),
			&proxyproto.Info{TenantID: "ten_a", CredentialID: "crd_a", ACL: []byte(allowAll)})
		first, err := net.Dial("tcp", n.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer first.Close()
		first.Write(hdr)
		rawConnect(t, first, "c1") // the header's first use is accepted
		second, err := net.Dial("tcp", n.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer second.Close()
		second.Write(append(hdr, connectBytes(t, "c2")...))
		expectClosedSilently(t, second)
	})
}

func TestTokenExpiryEndsTheConnection(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	conn := n.dial(t, cred{"ten_a", "crd_a", allowAll, time.Now().Add(2 * time.Second).Unix()}, nil)
	r := rawConnect(t, conn, "expiring")
	start := time.Now()
	fh, body, err := r.ReadPacket(0)
	if err != nil || fh.Type != packet.TypeDisconnect {
		t.Fatalf("want DISCONNECT at token expiry, got %v %v", fh.Type, err)
	}
	var d packet.Disconnect
	if err := d.Decode(packet.Version5, fh, body); err != nil || d.Reason != packet.ErrMaximumConnectTime {
		t.Fatalf("DISCONNECT reason %v (%v), want 0xA0 maximum connect time", d.Reason, err)
	}
	if waited := time.Since(start); waited > 4*time.Second {
		t.Fatalf("disconnected %v after CONNACK, want within the token's 2 s", waited)
	}
	// A token that has already expired is refused outright.
	late := n.dial(t, cred{"ten_a", "crd_a", allowAll, time.Now().Add(-time.Second).Unix()}, nil)
	late.Write(connectBytes(t, "late"))
	expectClosedSilently(t, late)
}

// A revoked credential's live connections end: an MQTT 5 client is told
// why (DISCONNECT 0x87 not authorized), a 3.1.1 client is just closed; a
// new connection with the credential is refused.
func TestRevocationEndsLiveConnections(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	for _, tc := range []struct {
		name    string
		version byte
	}{
		{"mqtt5", packet.Version5},
		{"mqtt311", packet.Version311},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			id := "crd_r" + tc.name
			if _, err := n.pool.Exec(ctx, `INSERT INTO credentials (id, tenant_id, name, acl) VALUES ($1, 'ten_a', 'r', '{}')`, id); err != nil {
				t.Fatal(err)
			}
			conn := n.dial(t, cred{"ten_a", id, allowAll, 0}, nil)
			r, _ := sendConnect(t, conn, &packet.Connect{Version: tc.version, CleanStart: true, KeepAlive: 30, ClientID: []byte("doomed")})
			// The reader reports the DISCONNECT reason (none for 3.1.1),
			// then the end of the connection.
			type end struct {
				reason  packet.ReasonCode
				sawDisc bool
				err     error
			}
			ended := make(chan end, 1)
			go func() {
				var e end
				for {
					fh, body, err := r.ReadPacket(0)
					if err != nil {
						e.err = err
						ended <- e
						return
					}
					if fh.Type == packet.TypeDisconnect {
						var d packet.Disconnect
						if err := d.Decode(tc.version, fh, body); err == nil {
							e.reason, e.sawDisc = d.Reason, true
						}
					}
				}
			}()
			// The listener may attach after the first NOTIFY; repeat it until
			// the connection goes (a revocation is idempotent).
			deadline := time.Now().Add(10 * time.Second)
			for {
				revokeAndNotify(t, n, id)
				select {
				case e := <-ended:
					if ne, ok := e.err.(net.Error); ok && ne.Timeout() {
						t.Fatal("connection still open after 10 s")
					}
					switch {
					case tc.version == packet.Version5 && (!e.sawDisc || e.reason != packet.ErrNotAuthorized):
						t.Fatalf("MQTT 5 client: DISCONNECT seen %v reason %#x, want 0x87 before the close", e.sawDisc, byte(e.reason))
					case tc.version != packet.Version5 && e.sawDisc:
						t.Fatal("MQTT 3.1.1 client got a DISCONNECT; the server must just close")
					}
					// A new connection with the revoked credential is refused
					// too, with CONNACK 0x87, even before a gateway knows.
					again := n.dial(t, cred{"ten_a", id, allowAll, 0}, nil)
					_, ack := sendConnect(t, again, &packet.Connect{Version: packet.Version5, CleanStart: true, ClientID: []byte("doomed")})
					if ack.Reason != packet.ErrNotAuthorized {
						t.Fatalf("revoked credential: CONNACK %#x, want 0x87", byte(ack.Reason))
					}
					return
				case <-time.After(200 * time.Millisecond):
					if time.Now().After(deadline) {
						t.Fatal("connection of a revoked credential still open after 10 s")
					}
				}
			}
		})
	}
}

func TestUsageIsFlushedAndServedByAdmin(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	ctx := context.Background()
	got := make(chan string, 10)
	sub := n.mqtt5(t, cred{"ten_a", "crd_a", allowAll, 0}, "sub", got)
	subscribe(t, sub, "m/#")
	pub := n.mqtt5(t, cred{"ten_a", "crd_a", allowAll, 0}, "pub", nil)
	for i := range 3 {
		publish(t, pub, "m/x", fmt.Sprint(i))
		expectMsg(t, got, fmt.Sprintf("m/x=%d", i))
	}

	req, _ := http.NewRequest("GET", "http://"+n.AdminAddr().String()+"/admin/tenants/ten_a/usage", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("admin without token: status %d, want 401", resp.StatusCode)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var u struct{ MessagesIn, MessagesOut uint64 }
	err = json.NewDecoder(resp.Body).Decode(&struct {
		In  *uint64 `json:"messages_in"`
		Out *uint64 `json:"messages_out"`
	}{&u.MessagesIn, &u.MessagesOut})
	resp.Body.Close()
	if err != nil || u.MessagesIn != 3 || u.MessagesOut != 3 {
		t.Fatalf("admin usage = %+v (%v), want 3 in / 3 out", u, err)
	}

	if err := n.flusher.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var in, out int64
	if err := n.pool.QueryRow(ctx, `SELECT coalesce(sum(messages_in),0), coalesce(sum(messages_out),0) FROM usage WHERE tenant_id='ten_a' AND node_id='node-test'`).Scan(&in, &out); err != nil {
		t.Fatal(err)
	}
	if in != 3 || out != 3 {
		t.Fatalf("usage rows: %d in / %d out, want 3 / 3", in, out)
	}
	// Flushing again adds nothing.
	if err := n.flusher.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.pool.QueryRow(ctx, `SELECT coalesce(sum(messages_in),0) FROM usage WHERE tenant_id='ten_a'`).Scan(&in); err != nil || in != 3 {
		t.Fatalf("after a second flush messages_in = %d (%v), want 3", in, err)
	}
}

func TestUnknownTenantIsRefused(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	conn := n.dial(t, cred{"ten_nope", "crd_x", allowAll, 0}, nil)
	conn.Write(connectBytes(t, "c"))
	expectClosedSilently(t, conn)
}
