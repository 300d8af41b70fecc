package e2e

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"berth.dev/e2e/internal/stack"
)

// dialV5 connects an MQTT 5 client (over TLS when serverName is set, as
// its SNI), after edit has shaped its CONNECT (a will, clean start,
// session expiry, …), and returns the client with the whole CONNACK. A
// refused client is closed already.
func dialV5(t testing.TB, addr, serverName string, c stack.Credential, clientID string, edit func(*paho.Connect)) (*v5, *paho.Connack) {
	t.Helper()
	var conn net.Conn
	var err error
	if serverName != "" {
		conn, err = tls.Dial("tcp", addr, &tls.Config{ServerName: serverName, InsecureSkipVerify: true}) //nolint:gosec // the test's own self-signed certificate
	} else {
		conn, err = net.Dial("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	cl := &v5{got: make(chan string, 1000), disconnected: make(chan byte, 2)}
	cl.Client = paho.NewClient(paho.ClientConfig{
		Conn: conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(p paho.PublishReceived) (bool, error) {
			cl.got <- p.Packet.Topic + "=" + string(p.Packet.Payload)
			return true, nil
		}},
		OnServerDisconnect: func(d *paho.Disconnect) { cl.disconnected <- d.ReasonCode },
		OnClientError:      func(error) { cl.disconnected <- 0xFF },
	})
	cp := &paho.Connect{
		ClientID: clientID, KeepAlive: 30, CleanStart: true,
		Username: c.Username, UsernameFlag: true, Password: []byte(c.Password), PasswordFlag: true,
	}
	if edit != nil {
		edit(cp)
	}
	// paho sizes a receive queue by the Receive Maximum it announces,
	// 65535 by default: half a megabyte per client, which with hundreds
	// of abuser clients made the test process's own garbage collector
	// the victim's worst latency. The clients take at most 1000 anyway.
	if cp.Properties == nil {
		cp.Properties = &paho.ConnectProperties{}
	}
	if cp.Properties.ReceiveMaximum == nil {
		rm := uint16(cap(cl.got))
		cp.Properties.ReceiveMaximum = &rm
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := cl.Connect(ctx, cp)
	if ack == nil {
		t.Fatalf("connect %s: no CONNACK: %v", clientID, err)
	}
	if ack.ReasonCode == 0 {
		t.Cleanup(func() { _ = cl.Disconnect(&paho.Disconnect{}) })
	} else {
		_ = conn.Close()
	}
	return cl, ack
}

// mustDialV5 connects with a plain CONNECT and fails unless CONNACK is
// 0x00. Its receive buffer holds 1000 messages.
func mustDialV5(t testing.TB, addr string, c stack.Credential, clientID string) *v5 {
	t.Helper()
	cl, ack := dialV5(t, addr, "", c, clientID, nil)
	if ack.ReasonCode != 0 {
		t.Fatalf("connect %s: CONNACK %#x", clientID, ack.ReasonCode)
	}
	return cl
}

// persistent asks for a session that outlives the connection by expiry
// seconds and resumes one that exists.
func persistent(expiry uint32) func(*paho.Connect) {
	return func(cp *paho.Connect) {
		cp.CleanStart = false
		cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: &expiry}
	}
}

// withWill gives the CONNECT a QoS 1 will.
func withWill(topic string, payload []byte) func(*paho.Connect) {
	return func(cp *paho.Connect) {
		cp.WillMessage = &paho.WillMessage{Topic: topic, QoS: 1, Payload: payload}
		cp.WillProperties = &paho.WillProperties{}
	}
}

// subscribeCode sends one SUBSCRIBE for filter (QoS 1, with user
// properties when given) and returns its SUBACK reason code.
func (c *v5) subscribeCode(t testing.TB, filter string, props ...paho.UserProperty) byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub := &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}}
	if len(props) > 0 {
		sub.Properties = &paho.SubscribeProperties{User: props}
	}
	sa, err := c.Subscribe(ctx, sub)
	if sa == nil || len(sa.Reasons) != 1 {
		t.Fatalf("subscribe %q: no SUBACK: %v", filter, err)
	}
	return sa.Reasons[0]
}

// publishCode publishes a QoS 1 message and returns its PUBACK reason
// code.
func (c *v5) publishCode(t testing.TB, topic, payload string, retain bool) byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pr, err := c.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Retain: retain, Payload: []byte(payload)})
	if pr == nil {
		t.Fatalf("publish %q: no PUBACK: %v", topic, err)
	}
	return pr.ReasonCode
}

// connectV3With connects a paho 3.1.1 client like connectV3 after edit
// has shaped its options; it returns the client and the CONNACK return
// code.
func connectV3With(t testing.TB, addr string, c stack.Credential, id string, edit func(*mqtt3.ClientOptions)) (mqtt3.Client, byte) {
	t.Helper()
	opts := mqtt3.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).
		SetUsername(c.Username).SetPassword(c.Password).SetProtocolVersion(4).
		SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(10 * time.Second)
	if edit != nil {
		edit(opts)
	}
	cl := mqtt3.NewClient(opts)
	tok := cl.Connect()
	if !tok.WaitTimeout(15 * time.Second) {
		t.Fatalf("connect %s: timed out", id)
	}
	rc := tok.(*mqtt3.ConnectToken).ReturnCode()
	if rc == 0 {
		t.Cleanup(func() { cl.Disconnect(100) })
	}
	return cl, rc
}

// retainedTopics lists the topics of a's retained messages, as the API
// answers them.
func retainedTopics(t testing.TB, s *stack.Stack, a stack.Account) []string {
	t.Helper()
	var out struct {
		Items []struct {
			Topic string `json:"topic"`
		} `json:"items"`
	}
	if code := s.Do(t, "GET", "/v1/tenants/"+a.Tenant.ID+"/retained?filter=%23", a.APIKey, nil, &out); code != http.StatusOK {
		t.Fatalf("retained: status %d", code)
	}
	var topics []string
	for _, r := range out.Items {
		topics = append(topics, r.Topic)
	}
	return topics
}

// goT lets a goroutine that a test starts use the test's helpers: errors
// go to the test (Errorf is safe from any goroutine), and Fatal also ends
// the goroutine, as it would end the test's own.
type goT struct{ testing.TB }

func (g goT) Fatal(args ...any) { g.TB.Error(args...); runtime.Goexit() }

func (g goT) Fatalf(format string, args ...any) { g.TB.Errorf(format, args...); runtime.Goexit() }

func (g goT) FailNow() { g.TB.Fail(); runtime.Goexit() }
