package e2e

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"berth.dev/e2e/internal/stack"
)

// MQTT 5 re-authentication with Berth tokens (docs/contracts.md): AUTH
// reason 0x19, Authentication Method "berth-jwt", Authentication Data = a
// fresh token for the connection's own credential.
const (
	authMethod       = "berth-jwt"
	reasonReAuth     = 0x19 // AUTH: re-authenticate
	reasonNotAuthd   = 0x87 // DISCONNECT: not authorized
	reasonMaxConnect = 0xA0 // DISCONNECT: maximum connect time (the token expired)
)

// keepAuther answers the server's AUTH packets with nothing new: Berth
// never asks to continue an exchange, but paho needs a handler once a
// CONNECT names an Authentication Method.
type keepAuther struct{}

func (keepAuther) Authenticate(a *paho.Auth) *paho.Auth { return a }
func (keepAuther) Authenticated()                       {}

// reauthClient is an MQTT 5 client that named the berth-jwt method in its
// CONNECT, with what it received and the reason of a server DISCONNECT.
type reauthClient struct {
	*paho.Client
	got          chan string
	disconnected chan byte
}

// connectReauth connects through the gateway at addr with user name and
// token, naming the berth-jwt method, and fails unless CONNACK is 0x00
// with the method echoed.
func connectReauth(t *testing.T, addr, username, token, clientID string) *reauthClient {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	cl := &reauthClient{got: make(chan string, 100), disconnected: make(chan byte, 1)}
	cl.Client = paho.NewClient(paho.ClientConfig{
		Conn:        conn,
		AuthHandler: keepAuther{},
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(p paho.PublishReceived) (bool, error) {
			cl.got <- p.Packet.Topic + "=" + string(p.Packet.Payload)
			return true, nil
		}},
		OnServerDisconnect: func(d *paho.Disconnect) { cl.disconnected <- d.ReasonCode },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := cl.Connect(ctx, &paho.Connect{
		ClientID: clientID, KeepAlive: 30, CleanStart: true,
		Username: username, UsernameFlag: true, Password: []byte(token), PasswordFlag: true,
		Properties: &paho.ConnectProperties{AuthMethod: authMethod},
	})
	if err != nil || ack == nil || ack.ReasonCode != 0 {
		t.Fatalf("connect %s: %+v %v", clientID, ack, err)
	}
	if ack.Properties == nil || ack.Properties.AuthMethod != authMethod {
		t.Fatalf("connect %s: CONNACK properties %+v, want method %q echoed", clientID, ack.Properties, authMethod)
	}
	t.Cleanup(func() { _ = cl.Disconnect(&paho.Disconnect{}) })
	return cl
}

// reauthenticate sends AUTH 0x19 with token and returns the answer: AUTH
// 0x00 (Success) or the reason of the DISCONNECT that refused it.
func (c *reauthClient) reauthenticate(t *testing.T, token string) *paho.AuthResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Authenticate(ctx, &paho.Auth{ReasonCode: reasonReAuth,
		Properties: &paho.AuthProperties{AuthMethod: authMethod, AuthData: []byte(token)}})
	if err != nil {
		t.Fatalf("re-authenticate: %v", err)
	}
	return resp
}

// A device whose token is about to expire fetches a fresh one for the same
// credential from the API, sends it in AUTH, and its connection outlives
// the old token; a twin that does not re-authenticate is ended at the old
// expiry with DISCONNECT 0xA0.
//
// The credential itself lives 10 minutes: a fresh token may not outlive
// its credential (the API answers 422), so the connection opens with a
// short token issued for it, and the re-authentication brings the
// credential's full lifetime.
func TestReauthenticationExtendsTheConnection(t *testing.T) {
	t.Parallel()
	s := stack.New(t, bins, stack.Options{})
	a := s.Signup(t)
	credExp := time.Now().Add(10 * time.Minute)
	c := s.CreateCredential(t, a, []string{"alive/#"}, []string{"alive/#"}, &credExp)
	shortExp := time.Now().Add(15 * time.Second)
	short := s.IssueToken(t, a, c.ID, &shortExp)
	if short.Username != c.ID || short.ExpiresAt == nil || short.ExpiresAt.Unix() != shortExp.Unix() {
		t.Fatalf("short token %+v, want username %s, expires_at %s", short, c.ID, shortExp.UTC().Format(time.RFC3339))
	}
	expiry := *short.ExpiresAt // the connections' deadline

	renewer := connectReauth(t, s.Gateways[0].MQTT, short.Username, short.Password, "renewer")
	control := connectReauth(t, s.Gateways[0].MQTT, short.Username, short.Password, "control")

	fresh := s.IssueToken(t, a, c.ID, nil) // the credential's own expiry
	if fresh.ExpiresAt == nil || fresh.ExpiresAt.Unix() != credExp.Unix() {
		t.Fatalf("fresh token expires_at %v, want the credential's %s", fresh.ExpiresAt, credExp.UTC().Format(time.RFC3339))
	}
	if resp := renewer.reauthenticate(t, fresh.Password); !resp.Success || resp.ReasonCode != 0 {
		t.Fatalf("re-authentication answered %+v, want AUTH 0x00", resp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sa, err := renewer.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "alive/#", QoS: 1}}})
	if err != nil || sa.Reasons[0] >= 0x80 {
		t.Fatalf("subscribe: %+v %v", sa, err)
	}

	// The control ends at the old expiry: the deadline was real.
	select {
	case rc := <-control.disconnected:
		if rc != reasonMaxConnect {
			t.Fatalf("control ended with DISCONNECT %#x, want %#x (maximum connect time)", rc, reasonMaxConnect)
		}
		if early := time.Until(expiry); early > time.Second {
			t.Fatalf("control ended %v before its token expired", early)
		}
	case rc := <-renewer.disconnected:
		t.Fatalf("the re-authenticated client ended with DISCONNECT %#x", rc)
	case <-time.After(time.Until(expiry) + 15*time.Second):
		t.Fatal("the control client outlived its token's expiry by 15 s")
	}

	// The renewer is alive 5 s past the old expiry.
	select {
	case rc := <-renewer.disconnected:
		t.Fatalf("the re-authenticated client ended with DISCONNECT %#x", rc)
	case <-time.After(time.Until(expiry.Add(5 * time.Second))):
	}
	pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer pcancel()
	if pr, err := renewer.Publish(pctx, pahoPublish("alive/late", "still here")); err != nil || pr.ReasonCode != 0 {
		t.Fatalf("publish after the old expiry: %+v %v", pr, err)
	}
	select {
	case m := <-renewer.got:
		if m != "alive/late=still here" {
			t.Fatalf("received %q", m)
		}
	case rc := <-renewer.disconnected:
		t.Fatalf("the re-authenticated client ended with DISCONNECT %#x", rc)
	case <-time.After(10 * time.Second):
		t.Fatal("no message 10 s after publishing")
	}
}

// A token of another credential, of the same tenant or another, is no
// re-authentication of this one: the node ends the connection with
// DISCONNECT 0x87 [MQTT-4.12.1-2].
func TestReauthenticationWithAnotherCredentialIsRefused(t *testing.T) {
	t.Parallel()
	s := stack.New(t, bins, stack.Options{})
	a, b := s.Signup(t), s.Signup(t)
	c := s.CreateCredential(t, a, []string{"#"}, []string{"#"}, nil)
	sibling := s.CreateCredential(t, a, []string{"#"}, []string{"#"}, nil)
	foreign := s.CreateCredential(t, b, []string{"#"}, []string{"#"}, nil)
	for _, tc := range []struct {
		name  string
		token string
	}{
		{"same tenant", s.IssueToken(t, a, sibling.ID, nil).Password},
		{"another tenant", s.IssueToken(t, b, foreign.ID, nil).Password},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "victim-" + strings.ReplaceAll(tc.name, " ", "-")
			cl := connectReauth(t, s.Gateways[0].MQTT, c.Username, c.Password, id)
			waitSession(t, s, a, id, true)
			resp := cl.reauthenticate(t, tc.token)
			if resp.Success || resp.ReasonCode != reasonNotAuthd {
				t.Fatalf("re-authentication with another credential's token answered %+v, want DISCONNECT %#x", resp, reasonNotAuthd)
			}
			select {
			case rc := <-cl.disconnected:
				if rc != reasonNotAuthd {
					t.Fatalf("DISCONNECT %#x, want %#x", rc, reasonNotAuthd)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no DISCONNECT after a refused re-authentication")
			}
			// The node no longer holds the connection.
			waitSession(t, s, a, id, false)
		})
	}
}

// waitSession polls the API's live sessions of a's tenant, for at most
// 10 s, until clientID is connected there or (connected false) is not.
func waitSession(t *testing.T, s *stack.Stack, a stack.Account, clientID string, connected bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var sessions struct {
			Items []struct {
				ClientID  string `json:"client_id"`
				Connected bool   `json:"connected"`
			} `json:"items"`
		}
		if code := s.Do(t, "GET", "/v1/tenants/"+a.Tenant.ID+"/sessions", a.APIKey, nil, &sessions); code != http.StatusOK {
			t.Fatalf("sessions: status %d", code)
		}
		found := false
		for _, it := range sessions.Items {
			found = found || (it.ClientID == clientID && it.Connected)
		}
		if found == connected {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: connected %v after 10 s, want %v", clientID, found, connected)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
