package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
	"unicode/utf8"

	"github.com/eclipse/paho.golang/paho"

	"berth.dev/services/apiclient"
)

// mqttFlags are pub's and sub's connection flags.
type mqttFlags struct {
	addr, username, password, clientID *string
	qos                                *int
	onDisconnect                       func(*paho.Disconnect) // the server's DISCONNECT, when set
}

func addMQTTFlags(f *flags) *mqttFlags {
	return &mqttFlags{
		addr:     f.String("server", "", "MQTT address host:port (default the tenant's endpoint)"),
		username: f.String("username", "", "MQTT user name (a credential id); default a credential berthctl makes for itself"),
		password: f.String("password", "", "MQTT password (env BERTH_MQTT_PASSWORD)"),
		clientID: f.String("client-id", "", "MQTT client id (default berthctl-RANDOM)"),
		qos:      f.Int("qos", 0, "QoS 0, 1 or 2"),
	}
}

// refusedError is a CONNACK refusing the credentials.
type refusedError struct{ code byte }

func (r *refusedError) Error() string {
	return fmt.Sprintf("MQTT connect refused: %s (MQTT reason code %#02x); check --username and --password: the credential may be revoked or expired, or its token for another tenant", reasonName(r.code), r.code)
}

// selfCredentialName names the credential pub and sub make for themselves.
func selfCredentialName() string {
	host, _ := os.Hostname()
	return "berthctl-" + host
}

// connectMQTT resolves the address and credentials and connects.
func connectMQTT(ctx context.Context, e *env, f *flags, m *mqttFlags, onMsg func(paho.PublishReceived) (bool, error)) (*paho.Client, error) {
	if *m.qos < 0 || *m.qos > 2 {
		return nil, usagef("--qos must be 0, 1 or 2")
	}
	addr, user, pw := *m.addr, *m.username, *m.password
	if pw == "" {
		pw = e.getenv("BERTH_MQTT_PASSWORD")
	}
	if addr == "" || user == "" {
		s, err := open(e, f)
		if err != nil {
			return nil, err
		}
		t, err := s.tenant(ctx, e, f)
		if err != nil {
			return nil, err
		}
		if addr == "" {
			addr = t.Endpoints.MQTT
		}
		if user == "" {
			if user, pw, err = selfToken(ctx, s, t.ID); err != nil {
				return nil, err
			}
		}
	}
	id := *m.clientID
	if id == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		id = "berthctl-" + hex.EncodeToString(b[:])
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("MQTT %s: %w", addr, err)
	}
	cfg := paho.ClientConfig{Conn: conn, OnClientError: func(error) {}, OnServerDisconnect: m.onDisconnect}
	if onMsg != nil {
		cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){onMsg}
	}
	c := paho.NewClient(cfg)
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	ack, err := c.Connect(cctx, &paho.Connect{
		ClientID: id, KeepAlive: 30, CleanStart: true,
		Username: user, UsernameFlag: true, Password: []byte(pw), PasswordFlag: pw != "",
	})
	if ack != nil && ack.ReasonCode != 0 {
		conn.Close()
		if ack.ReasonCode == 0x86 || ack.ReasonCode == 0x87 || ack.ReasonCode == 0x8C {
			return nil, &refusedError{ack.ReasonCode}
		}
		return nil, fmt.Errorf("MQTT %s", refusal("connect", ack.ReasonCode, ack.Properties.ReasonString))
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("MQTT connect %s: %w", addr, err)
	}
	return c, nil
}

// selfToken finds (or makes, once) the credential named for this host,
// allowed everything, and issues it a token valid for an hour.
func selfToken(ctx context.Context, s *session, tid string) (user, pw string, err error) {
	name := selfCredentialName()
	creds, err := allItems[apiclient.Credential](ctx, s.api, apiclient.ListCredentials, []string{tid})
	if err != nil {
		return "", "", fmt.Errorf("credentials: %w", err)
	}
	id := ""
	for _, c := range creds {
		if c.Name == name && c.RevokedAt == nil && (c.ExpiresAt == nil || c.ExpiresAt.After(time.Now().Add(time.Hour))) {
			id = c.ID
			break
		}
	}
	if id == "" {
		var c apiclient.Credential
		body := map[string]any{"name": name, "acl": apiclient.ACL{Pub: []string{"#"}, Sub: []string{"#"}}}
		if err := s.api.Call(ctx, apiclient.CreateCredential, []string{tid}, nil, body, &c); err != nil {
			return "", "", fmt.Errorf("create credential %s: %w", name, err)
		}
		id = c.ID
	}
	var tok apiclient.IssuedToken
	body := map[string]string{"expires_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}
	if err := s.api.Call(ctx, apiclient.IssueToken, []string{tid, id}, nil, body, &tok); err != nil {
		return "", "", fmt.Errorf("token for %s: %w", name, err)
	}
	return tok.Username, tok.Password, nil
}

func runPub(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pub", "-t TOPIC -m MESSAGE [--qos N] [--retain] [--count N]",
		"  berthctl pub -t sensors/1 -m '{\"t\":21.5}' --qos 1\n  berthctl pub -t cmd/all -m reboot --username crd_... --password \"$TOKEN\"").withTenant()
	topic := f.String("t", "", "topic (required)")
	msg := f.String("m", "", "message payload")
	retain := f.Bool("retain", false, "retain the message")
	count := f.Int("count", 1, "publish the message this many times")
	m := addMQTTFlags(f)
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	if *topic == "" {
		f.Usage()
		return usagef("pub: -t TOPIC is required")
	}
	if *count < 1 {
		return usagef("pub: --count must be at least 1")
	}
	c, err := connectMQTT(ctx, e, f, m, nil)
	if err != nil {
		return err
	}
	defer c.Disconnect(&paho.Disconnect{})
	for i := range *count {
		r, err := c.Publish(ctx, &paho.Publish{Topic: *topic, QoS: byte(*m.qos), Retain: *retain, Payload: []byte(*msg)})
		if r != nil && r.ReasonCode >= 0x80 { // paho returns an error too: the reason code says more
			return fmt.Errorf("message %d: %s", i+1, refusal("publish", r.ReasonCode, r.Properties.ReasonString))
		}
		if err != nil {
			return fmt.Errorf("publish %d: %w", i+1, err)
		}
	}
	fmt.Fprintf(e.stderr, "Published %d message(s) to %s\n", *count, *topic)
	return nil
}

func runSub(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "sub", "-t FILTER [--qos N] [--count N] [--raw]",
		"  berthctl sub -t 'sensors/#'\n  berthctl sub -t sensors/1 --count 1 --raw").withTenant()
	filter := f.String("t", "", "topic filter (required)")
	count := f.Int("count", 0, "exit after this many messages (default run until interrupted)")
	raw := f.Bool("raw", false, "print payloads only, one a line, as they are")
	m := addMQTTFlags(f)
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	if *filter == "" {
		f.Usage()
		return usagef("sub: -t FILTER is required")
	}
	msgs := make(chan *paho.Publish, 256)
	disc := make(chan *paho.Disconnect, 1)
	m.onDisconnect = func(d *paho.Disconnect) {
		select {
		case disc <- d:
		default:
		}
	}
	c, err := connectMQTT(ctx, e, f, m, func(p paho.PublishReceived) (bool, error) {
		select {
		case msgs <- p.Packet:
		case <-ctx.Done():
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	defer c.Disconnect(&paho.Disconnect{})
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: *filter, QoS: byte(*m.qos)}}})
	if sa != nil && len(sa.Reasons) == 1 && sa.Reasons[0] >= 0x80 { // paho returns an error too: the reason code says more
		return fmt.Errorf("%s: %s", *filter, refusal("subscribe", sa.Reasons[0], sa.Properties.ReasonString))
	}
	if err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	if len(sa.Reasons) != 1 {
		return fmt.Errorf("subscribe: SUBACK with %d reason codes", len(sa.Reasons))
	}
	fmt.Fprintf(e.stderr, "Subscribed to %s (QoS %d)\n", *filter, sa.Reasons[0])
	for n := 1; *count == 0 || n <= *count; n++ {
		select {
		case p := <-msgs:
			printMessage(e.stdout, n, p, *raw)
		case <-c.Done():
			// paho reports the server's DISCONNECT just after closing.
			select {
			case d := <-disc:
				return errors.New(refusal("connection", d.ReasonCode, d.Properties.ReasonString))
			case <-time.After(time.Second):
			}
			return fmt.Errorf("MQTT connection closed")
		case <-ctx.Done():
			return nil // interrupted
		}
	}
	return nil
}

// printMessage prints one received message; a JSON payload indented.
func printMessage(w io.Writer, n int, p *paho.Publish, raw bool) {
	if raw {
		w.Write(append(p.Payload, '\n'))
		return
	}
	flags := fmt.Sprintf("qos %d", p.QoS)
	if p.Retain {
		flags += ", retained"
	}
	fmt.Fprintf(w, "[#%d] %s (%s)\n", n, p.Topic, flags)
	var b bytes.Buffer
	switch {
	case json.Valid(p.Payload) && len(bytes.TrimSpace(p.Payload)) > 0 && json.Indent(&b, p.Payload, "", "  ") == nil:
		b.WriteByte('\n')
		w.Write(b.Bytes())
	case utf8.Valid(p.Payload):
		fmt.Fprintf(w, "%s\n", p.Payload)
	default:
		fmt.Fprintf(w, "(%d bytes, not UTF-8: %s)\n", len(p.Payload), hex.EncodeToString(p.Payload[:min(len(p.Payload), 32)]))
	}
}
