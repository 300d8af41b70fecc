package e2e

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt3 "github.com/eclipse/paho.mqtt.golang"

	"berth.dev/e2e/internal/stack"
)

// v5 is a connected MQTT 5 client and what it received.
type v5 struct {
	*paho.Client
	got          chan string
	disconnected chan byte // reason of a server DISCONNECT, or 0xFF when the connection dropped
}

// connectV5 dials addr (optionally over TLS with serverName as SNI) and
// sends a plain CONNECT (dialV5); it returns the client and the CONNACK
// reason code.
func connectV5(t *testing.T, addr, serverName string, c stack.Credential, clientID string) (*v5, byte) {
	t.Helper()
	cl, ack := dialV5(t, addr, serverName, c, clientID, nil)
	return cl, ack.ReasonCode
}

func mustConnectV5(t *testing.T, addr string, c stack.Credential, id string) *v5 {
	t.Helper()
	cl, rc := connectV5(t, addr, "", c, id)
	if rc != 0 {
		t.Fatalf("connect %s: CONNACK %#x", id, rc)
	}
	return cl
}

func (c *v5) subscribe(t *testing.T, filter string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}})
	if err != nil || sa.Reasons[0] >= 0x80 {
		t.Fatalf("subscribe %q: %v %v", filter, sa, err)
	}
}

func (c *v5) expect(t *testing.T, want string) {
	t.Helper()
	select {
	case m := <-c.got:
		if m != want {
			t.Fatalf("received %q, want %q", m, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no %q within 10 s", want)
	}
}

// connectV3 connects a paho 3.1.1 client and returns it with the CONNACK
// return code.
func connectV3(t *testing.T, addr string, c stack.Credential, id string) (mqtt3.Client, byte) {
	t.Helper()
	opts := mqtt3.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).
		SetUsername(c.Username).SetPassword(c.Password).SetProtocolVersion(4).
		SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(10 * time.Second)
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

// mosquittoRoundTrip runs mosquitto_sub on subAddr and publishes with
// mosquitto_pub on pubAddr until the subscriber prints the message (the
// subscriber may not be subscribed yet when the first publish goes out).
func mosquittoRoundTrip(t *testing.T, subAddr, pubAddr string, c stack.Credential, topic, msg string, version string) {
	t.Helper()
	host := func(a string) (string, string) { h, p, _ := net.SplitHostPort(a); return h, p }
	sh, sp := host(subAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub := exec.CommandContext(ctx, "mosquitto_sub", "-h", sh, "-p", sp, "-u", c.Username, "-P", c.Password,
		"-V", version, "-t", topic, "-C", "1", "-W", "25", "-i", "e2e-sub-"+version)
	var out strings.Builder
	sub.Stdout = &out
	if err := sub.Start(); err != nil {
		t.Fatalf("mosquitto_sub: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- sub.Wait() }()
	ph, pp := host(pubAddr)
	for {
		pub := exec.CommandContext(ctx, "mosquitto_pub", "-h", ph, "-p", pp, "-u", c.Username, "-P", c.Password,
			"-V", version, "-t", topic, "-m", msg, "-q", "1", "-i", "e2e-pub-"+version)
		if b, err := pub.CombinedOutput(); err != nil {
			t.Fatalf("mosquitto_pub: %v %s", err, b)
		}
		select {
		case err := <-done:
			if err != nil || strings.TrimSpace(out.String()) != msg {
				t.Fatalf("mosquitto_sub: %v, printed %q, want %q", err, out.String(), msg)
			}
			return
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("mosquitto_sub never received the message")
		}
	}
}

func pahoPublish(topic, payload string) *paho.Publish {
	return &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(payload)}
}
