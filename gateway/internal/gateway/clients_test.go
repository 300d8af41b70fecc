package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/eclipse/paho.mqtt.golang"

	"berth.dev/broker/packet"
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

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
