package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/eclipse/paho.mqtt.golang"

	"berth.dev/broker/packet"
)

// connect5 connects a paho.golang client for credential c with clean
// start as given and Session Expiry Interval expiry (nil: absent). It
// returns the client (nil when refused) and the CONNACK.
func (n *testNode) connect5(t *testing.T, c cred, clientID string, clean bool, expiry *uint32, got chan<- string) (*paho.Client, *paho.Connack) {
	t.Helper()
	cl := newPaho5(n.dial(t, c, nil), got)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ack, err := cl.Connect(ctx, connectPacket(c, clientID, clean, expiry))
	if ack == nil {
		t.Fatalf("connect %s: %v", clientID, err)
	}
	if ack.ReasonCode != 0 {
		return nil, ack
	}
	t.Cleanup(func() { _ = cl.Disconnect(&paho.Disconnect{}) })
	return cl, ack
}

func newPaho5(conn net.Conn, got chan<- string) *paho.Client {
	return paho.NewClient(paho.ClientConfig{Conn: conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(p paho.PublishReceived) (bool, error) {
			if got != nil {
				got <- p.Packet.Topic + "=" + string(p.Packet.Payload)
			}
			return true, nil
		}},
	})
}

func connectPacket(c cred, clientID string, clean bool, expiry *uint32) *paho.Connect {
	cp := &paho.Connect{ClientID: clientID, KeepAlive: 30, CleanStart: clean, Username: c.id, UsernameFlag: true}
	if expiry != nil {
		cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: expiry}
	}
	return cp
}

// connect3 connects a paho.mqtt.golang (MQTT 3.1.1) client for credential
// c over a gateway-style connection and returns it with its CONNACK's
// token (return code, session present), refused or not.
func (n *testNode) connect3(t *testing.T, c cred, clientID string, clean bool) (mqtt.Client, *mqtt.ConnectToken) {
	t.Helper()
	conn := n.dial(t, c, nil)
	o := mqtt.NewClientOptions().AddBroker("tcp://127.0.0.1:7883").SetClientID(clientID).SetCleanSession(clean).
		SetUsername(c.id).SetProtocolVersion(4).SetAutoReconnect(false).SetConnectRetry(false).
		SetConnectTimeout(5 * time.Second).
		SetCustomOpenConnectionFn(func(*url.URL, mqtt.ClientOptions) (net.Conn, error) { return conn, nil })
	cl := mqtt.NewClient(o)
	tok := cl.Connect()
	if !tok.WaitTimeout(10 * time.Second) {
		t.Fatalf("connect %s: no CONNACK within 10 s", clientID)
	}
	ct := tok.(*mqtt.ConnectToken)
	if ct.ReturnCode() == 0 {
		t.Cleanup(func() { cl.Disconnect(50) })
	}
	return cl, ct
}

// adminSessions returns the tenant's sessions by client id (true:
// connected), from the node's admin API.
func adminSessions(t *testing.T, n *testNode, tenant string) map[string]bool {
	t.Helper()
	code, body := adminDo(t, n, "GET", "/admin/tenants/"+tenant+"/sessions", "")
	var out struct {
		Sessions []struct {
			ClientID  string `json:"client_id"`
			Connected bool   `json:"connected"`
		} `json:"sessions"`
	}
	if err := json.Unmarshal(body, &out); code != 200 || err != nil {
		t.Fatalf("sessions: %d %s (%v)", code, body, err)
	}
	m := make(map[string]bool, len(out.Sessions))
	for _, s := range out.Sessions {
		m[s.ClientID] = s.Connected
	}
	return m
}

// waitSessions polls the admin API until cond holds of the tenant's
// sessions, for at most 10 s.
func waitSessions(t *testing.T, n *testNode, tenant, what string, cond func(map[string]bool) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := adminSessions(t, n, tenant)
		if cond(m) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: sessions %v after 10 s", what, m)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func offline(id string) func(map[string]bool) bool {
	return func(m map[string]bool) bool { c, ok := m[id]; return ok && !c }
}

func gone(id string) func(map[string]bool) bool {
	return func(m map[string]bool) bool { _, ok := m[id]; return !ok }
}

func u32(v uint32) *uint32 { return &v }

// max_sessions bounds the tenant's sessions, offline persistent ones and
// connected clean ones alike: a CONNECT that would create one more gets
// CONNACK 0x97 (3.1.1: return code 3); resuming or taking over a session
// is always allowed, and a raised quota lets a new session in at once.
func TestSessionsQuota(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	a := cred{"ten_a", "crd_a", allowAll, 0}
	hour := u32(3600)

	p, _ := n.connect5(t, a, "dev-1", true, hour, nil) // opens the shard; stays as an offline session
	_ = p.Disconnect(&paho.Disconnect{})
	waitSessions(t, n, "ten_a", "dev-1 offline", offline("dev-1"))
	n.setQuota(t, "ten_a", "max_sessions", 2)
	if cl, ack := n.connect5(t, a, "dev-2", true, nil, nil); cl == nil { // clean, expiry 0: counts while connected
		t.Fatalf("second session: CONNACK %#x", ack.ReasonCode)
	}

	if _, ack := n.connect5(t, a, "dev-3", true, nil, nil); ack.ReasonCode != byte(packet.ErrQuotaExceeded) || ack.SessionPresent {
		t.Fatalf("third session (MQTT 5): CONNACK %#x present %v, want 0x97", ack.ReasonCode, ack.SessionPresent)
	}
	if _, tok := n.connect3(t, a, "dev-3", true); tok.ReturnCode() != packet.ConnackServerUnavailable {
		t.Fatalf("third session (3.1.1): return code %d, want 3", tok.ReturnCode())
	}
	if m := adminSessions(t, n, "ten_a"); len(m) != 2 {
		t.Fatalf("sessions after the refusals: %v", m)
	}
	// Another tenant's quota is its own.
	if cl, ack := n.connect5(t, cred{"ten_b", "crd_b", allowAll, 0}, "dev-3", true, nil, nil); cl == nil {
		t.Fatalf("other tenant: CONNACK %#x", ack.ReasonCode)
	}

	// At the cap, resuming and taking over are allowed.
	if cl, ack := n.connect5(t, a, "dev-1", false, hour, nil); cl == nil || !ack.SessionPresent {
		t.Fatalf("resuming dev-1 at the cap: CONNACK %#x present %v", ack.ReasonCode, ack.SessionPresent)
	}
	if cl, ack := n.connect5(t, a, "dev-2", true, nil, nil); cl == nil {
		t.Fatalf("taking over dev-2 (clean start) at the cap: CONNACK %#x", ack.ReasonCode)
	}
	if _, tok := n.connect3(t, a, "dev-2", true); tok.ReturnCode() != 0 {
		t.Fatalf("taking over dev-2 (3.1.1) at the cap: return code %d", tok.ReturnCode())
	}

	// Raised live: a new session gets in, on the same shard.
	n.setQuota(t, "ten_a", "max_sessions", 3)
	d3, ack := n.connect5(t, a, "dev-3", true, nil, nil)
	if d3 == nil {
		t.Fatalf("after raising the quota: CONNACK %#x", ack.ReasonCode)
	}
	// A clean session ends with its connection and frees its place.
	_ = d3.Disconnect(&paho.Disconnect{})
	waitSessions(t, n, "ten_a", "dev-3 ended", gone("dev-3"))
	if cl, ack := n.connect5(t, a, "dev-4", true, nil, nil); cl == nil {
		t.Fatalf("after a clean session ended: CONNACK %#x", ack.ReasonCode)
	}

	// Lowered below the count: nobody is dropped, new sessions are refused.
	n.setQuota(t, "ten_a", "max_sessions", 1)
	if m := adminSessions(t, n, "ten_a"); len(m) != 3 {
		t.Fatalf("sessions after lowering the quota: %v, want all 3 kept", m)
	}
	if _, ack := n.connect5(t, a, "dev-5", true, nil, nil); ack.ReasonCode != byte(packet.ErrQuotaExceeded) {
		t.Fatalf("over a lowered quota: CONNACK %#x, want 0x97", ack.ReasonCode)
	}
	if cl, ack := n.connect5(t, a, "dev-1", false, hour, nil); cl == nil || !ack.SessionPresent {
		t.Fatalf("resuming over a lowered quota: CONNACK %#x present %v", ack.ReasonCode, ack.SessionPresent)
	}
}

// CONNECTs racing for the last session below the quota: exactly one gets
// it, the others CONNACK 0x97, round after round.
func TestSessionsQuotaRace(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	a := cred{"ten_a", "crd_a", allowAll, 0}
	n.mqtt5(t, a, "fill-0", nil) // opens the shard
	const racers = 8
	limit := int64(3)
	n.setQuota(t, "ten_a", "max_sessions", limit)
	n.mqtt5(t, a, "fill-1", nil) // limit-1 sessions
	for round := range 3 {
		clients := make([]*paho.Client, racers)
		for i := range clients {
			clients[i] = newPaho5(n.dial(t, a, nil), nil)
		}
		start := make(chan struct{})
		codes := make(chan byte, racers)
		for i, cl := range clients {
			go func() {
				<-start
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				ack, _ := cl.Connect(ctx, connectPacket(a, fmt.Sprintf("racer-%d-%d", round, i), true, nil))
				if ack == nil {
					codes <- 0xFF // no CONNACK
					return
				}
				codes <- ack.ReasonCode
			}()
		}
		close(start)
		won, refused := 0, 0
		for range racers {
			switch c := <-codes; c {
			case 0:
				won++
			case byte(packet.ErrQuotaExceeded):
				refused++
			default:
				t.Fatalf("round %d: CONNACK %#x", round, c)
			}
		}
		if won != 1 || refused != racers-1 {
			t.Fatalf("round %d: %d connected, %d refused; want 1 and %d", round, won, refused, racers-1)
		}
		if m := adminSessions(t, n, "ten_a"); int64(len(m)) != limit {
			t.Fatalf("round %d: %d sessions, want %d", round, len(m), limit)
		}
		for _, cl := range clients {
			t.Cleanup(func() { _ = cl.Disconnect(&paho.Disconnect{}) })
		}
		limit++
		n.setQuota(t, "ten_a", "max_sessions", limit) // room for exactly one more
	}
}

// max_session_expiry caps how long a session outlives its connection: an
// MQTT 5 CONNECT's larger interval (0xFFFFFFFF included) is lowered and
// the CONNACK says so, a DISCONNECT's is lowered too, an MQTT 3.1.1
// clean-session-0 session (which never expires in that protocol) expires
// after it, and lowering it live shortens sessions already offline.
func TestSessionExpiryQuota(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	a := cred{"ten_a", "crd_a", allowAll, 0}
	n.mqtt5(t, a, "opener", nil)
	n.setQuota(t, "ten_a", "max_session_expiry", 1)

	t.Run("CONNACK carries the granted interval", func(t *testing.T) {
		for _, asked := range []uint32{0xFFFFFFFF, 3600} {
			cl, ack := n.connect5(t, a, "exp-connack", true, u32(asked), nil)
			if cl == nil {
				t.Fatalf("asked %d: CONNACK %#x", asked, ack.ReasonCode)
			}
			if ack.Properties == nil || ack.Properties.SessionExpiryInterval == nil || *ack.Properties.SessionExpiryInterval != 1 {
				t.Fatalf("asked %d: CONNACK properties %+v, want Session Expiry Interval 1", asked, ack.Properties)
			}
		}
		cl, ack := n.connect5(t, a, "exp-within", true, u32(1), nil)
		if cl == nil || ack.Properties != nil && ack.Properties.SessionExpiryInterval != nil {
			t.Fatalf("asked the cap: CONNACK %#x %+v, want no Session Expiry Interval (the client's holds)", ack.ReasonCode, ack.Properties)
		}
	})

	t.Run("DISCONNECT interval is capped", func(t *testing.T) {
		cl, _ := n.connect5(t, a, "exp-disc", true, u32(1), nil)
		if rc := subscribe(t, cl, "disc/#"); rc != 1 {
			t.Fatalf("subscribe: %#x", rc)
		}
		if err := cl.Disconnect(&paho.Disconnect{Properties: &paho.DisconnectProperties{SessionExpiryInterval: u32(3600)}}); err != nil {
			t.Fatal(err)
		}
		waitSessions(t, n, "ten_a", "exp-disc expired", gone("exp-disc"))
		if cl, ack := n.connect5(t, a, "exp-disc", false, u32(1), nil); cl == nil || ack.SessionPresent {
			t.Fatalf("reconnect: CONNACK %#x present %v, want a fresh session", ack.ReasonCode, ack.SessionPresent)
		}
	})

	t.Run("3.1.1 clean session 0 expires", func(t *testing.T) {
		cl, tok := n.connect3(t, a, "v3-dev", false)
		if tok.ReturnCode() != 0 {
			t.Fatalf("CONNACK return code %d", tok.ReturnCode())
		}
		if st := cl.Subscribe("v3/#", 1, nil); !st.WaitTimeout(5*time.Second) || st.Error() != nil {
			t.Fatalf("subscribe: %v", st.Error())
		}
		cl.Disconnect(50)
		waitSessions(t, n, "ten_a", "v3-dev expired", gone("v3-dev"))
		if _, tok := n.connect3(t, a, "v3-dev", false); tok.ReturnCode() != 0 || tok.SessionPresent() {
			t.Fatalf("reconnect: return code %d present %v, want a fresh session", tok.ReturnCode(), tok.SessionPresent())
		}
	})

	t.Run("lowered live, offline sessions follow", func(t *testing.T) {
		n.setQuota(t, "ten_a", "max_session_expiry", 3600)
		cl, tok := n.connect3(t, a, "v3-old", false)
		if tok.ReturnCode() != 0 {
			t.Fatalf("CONNACK return code %d", tok.ReturnCode())
		}
		cl.Disconnect(50)
		waitSessions(t, n, "ten_a", "v3-old offline", offline("v3-old"))
		n.setQuota(t, "ten_a", "max_session_expiry", 1)
		waitSessions(t, n, "ten_a", "v3-old expired under the lowered quota", gone("v3-old"))
	})
}

// max_subscriptions holds per session, across reconnects: a resumed
// session's subscriptions count, one more is refused (SUBACK 0x97; 3.1.1:
// 0x80) while the existing ones keep delivering, and a quota lowered live
// keeps what the session has and refuses anything new.
func TestSubscriptionsQuotaPerSession(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	a := cred{"ten_a", "crd_a", allowAll, 0}
	hour := u32(3600)
	first, _ := n.connect5(t, a, "subs-5", true, hour, nil)
	n.setQuota(t, "ten_a", "max_subscriptions", 2)
	for _, f := range []string{"s/1", "s/2"} {
		if rc := subscribe(t, first, f); rc != 1 {
			t.Fatalf("subscribe %s: %#x", f, rc)
		}
	}
	_ = first.Disconnect(&paho.Disconnect{})
	waitSessions(t, n, "ten_a", "subs-5 offline", offline("subs-5"))

	got := make(chan string, 10)
	cl, ack := n.connect5(t, a, "subs-5", false, hour, got)
	if cl == nil || !ack.SessionPresent {
		t.Fatalf("resume: CONNACK %#x present %v", ack.ReasonCode, ack.SessionPresent)
	}
	if rc := subscribe(t, cl, "s/3"); rc != byte(packet.ErrQuotaExceeded) {
		t.Fatalf("third subscription of a resumed session: %#x, want 0x97", rc)
	}
	if rc := subscribe(t, cl, "s/1"); rc != 1 {
		t.Fatalf("subscribing again to a held filter: %#x, want granted", rc)
	}
	pub := n.mqtt5(t, a, "pub", nil)
	publish(t, pub, "s/2", "kept")
	expectMsg(t, got, "s/2=kept")

	// 3.1.1: the same, refused with 0x80.
	c3, tok := n.connect3(t, a, "subs-3", false)
	if tok.ReturnCode() != 0 {
		t.Fatalf("CONNACK return code %d", tok.ReturnCode())
	}
	if st := c3.SubscribeMultiple(map[string]byte{"t/1": 1, "t/2": 1}, nil); !st.WaitTimeout(5*time.Second) || st.Error() != nil {
		t.Fatalf("subscribe: %v", st.Error())
	}
	c3.Disconnect(50)
	waitSessions(t, n, "ten_a", "subs-3 offline", offline("subs-3"))
	c3, tok = n.connect3(t, a, "subs-3", false)
	if tok.ReturnCode() != 0 || !tok.SessionPresent() {
		t.Fatalf("resume (3.1.1): return code %d present %v", tok.ReturnCode(), tok.SessionPresent())
	}
	st := c3.Subscribe("t/3", 1, nil)
	if !st.WaitTimeout(5 * time.Second) {
		t.Fatal("no SUBACK")
	}
	if rc := st.(*mqtt.SubscribeToken).Result()["t/3"]; rc != 0x80 {
		t.Fatalf("third subscription of a resumed 3.1.1 session: %#x, want 0x80", rc)
	}

	// Lowered live: both subscriptions stay and deliver; nothing new.
	n.setQuota(t, "ten_a", "max_subscriptions", 1)
	publish(t, pub, "s/1", "one")
	expectMsg(t, got, "s/1=one")
	publish(t, pub, "s/2", "two")
	expectMsg(t, got, "s/2=two")
	if rc := subscribe(t, cl, "s/4"); rc != byte(packet.ErrQuotaExceeded) {
		t.Fatalf("subscription over the lowered quota: %#x, want 0x97", rc)
	}
}
