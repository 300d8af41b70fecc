package node

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"berth.dev/broker/packet"
	"berth.dev/testenv"
)

// testKeys is the API's side of tokens: an Ed25519 key published as a
// JWKS from a real HTTP server on 127.0.0.1.
type testKeys struct {
	kid  string
	priv ed25519.PrivateKey
	url  string
}

func serveJWKS(t *testing.T) *testKeys {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k := &testKeys{kid: "k1", priv: priv}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{{
			"kty": "OKP", "crv": "Ed25519", "x": base64.RawURLEncoding.EncodeToString(pub),
			"kid": k.kid, "alg": "EdDSA", "use": "sig",
		}}})
	}))
	t.Cleanup(srv.Close)
	k.url = srv.URL + "/v1/.well-known/jwks.json"
	return k
}

// sign makes a token as the API does (docs/contracts.md), with priv (nil:
// the published key).
func (k *testKeys) sign(t *testing.T, priv ed25519.PrivateKey, claims map[string]any) []byte {
	t.Helper()
	if priv == nil {
		priv = k.priv
	}
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	signing := enc(map[string]string{"alg": "EdDSA", "typ": "JWT", "kid": k.kid}) + "." + enc(claims)
	return []byte(signing + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, []byte(signing))))
}

func claimsFor(tenant, credential string, exp time.Time) map[string]any {
	return map[string]any{"iss": "berth", "sub": credential, "tid": tenant, "iat": time.Now().Unix(),
		"exp": exp.Unix(), "jti": "j1", "acl": map[string][]string{"pub": {"#"}, "sub": {"#"}}}
}

type noAuther struct{}

func (noAuther) Authenticate(a *paho.Auth) *paho.Auth { return a }
func (noAuther) Authenticated()                       {}

// A v5 client whose token is about to expire sends a fresh one (AUTH 0x19,
// method berth-jwt) and stays connected past the old expiry.
func TestReauthenticationExtendsTheConnection(t *testing.T) {
	t.Parallel()
	keys := serveJWKS(t)
	n := startNodeCfg(t, testenv.DatabaseURL(t), "", true, func(c *Config) { c.JWKSURL = keys.url })
	expiry := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second)
	conn := n.dial(t, cred{"ten_a", "crd_a", allowAll, expiry.Unix()}, nil)
	got := make(chan string, 10)
	var disconnected = make(chan byte, 1)
	cl := paho.NewClient(paho.ClientConfig{
		Conn:        conn,
		AuthHandler: noAuther{},
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(p paho.PublishReceived) (bool, error) {
			got <- p.Packet.Topic + "=" + string(p.Packet.Payload)
			return true, nil
		}},
		OnServerDisconnect: func(d *paho.Disconnect) { disconnected <- d.ReasonCode },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := cl.Connect(ctx, &paho.Connect{ClientID: "renewer", KeepAlive: 30, CleanStart: true,
		Properties: &paho.ConnectProperties{AuthMethod: AuthMethodJWT}})
	if err != nil || ack.ReasonCode != 0 {
		t.Fatalf("connect with method berth-jwt: %+v %v", ack, err)
	}
	if ack.Properties == nil || ack.Properties.AuthMethod != AuthMethodJWT {
		t.Fatalf("CONNACK authentication method %+v, want %q echoed", ack.Properties, AuthMethodJWT)
	}
	t.Cleanup(func() { _ = cl.Disconnect(&paho.Disconnect{}) })

	fresh := keys.sign(t, nil, claimsFor("ten_a", "crd_a", time.Now().Add(time.Hour)))
	resp, err := cl.Authenticate(ctx, &paho.Auth{ReasonCode: byte(packet.CodeReAuthenticate),
		Properties: &paho.AuthProperties{AuthMethod: AuthMethodJWT, AuthData: fresh}})
	if err != nil || !resp.Success || resp.ReasonCode != 0 {
		t.Fatalf("re-authentication: %+v %v, want AUTH 0x00", resp, err)
	}

	subscribe(t, cl, "alive/#")
	select {
	case rc := <-disconnected:
		t.Fatalf("disconnected (%#x) before the old expiry", rc)
	case <-time.After(time.Until(expiry.Add(700 * time.Millisecond))):
		// The old token's expiry has passed.
	}
	publish(t, cl, "alive/now", "still here")
	expectMsg(t, got, "alive/now=still here")
	select {
	case rc := <-disconnected:
		t.Fatalf("disconnected with %#x after re-authenticating", rc)
	default:
	}
}

// Every answer to a re-authentication, on the wire: AUTH 0x00 naming the
// method for a good token; DISCONNECT 0x87 for a bad one, 0x82 (protocol
// error) for another method [MQTT-4.12.1-1].
func TestReauthenticationAnswers(t *testing.T) {
	t.Parallel()
	keys := serveJWKS(t)
	n := startNodeCfg(t, testenv.DatabaseURL(t), "", true, func(c *Config) { c.JWKSURL = keys.url })
	_, forger, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	hour := time.Now().Add(time.Hour)
	for _, tc := range []struct {
		name   string
		method string
		token  []byte
		want   packet.ReasonCode
	}{
		{"forged signature", AuthMethodJWT, keys.sign(t, forger, claimsFor("ten_a", "crd_a", hour)), packet.ErrNotAuthorized},
		{"another credential", AuthMethodJWT, keys.sign(t, nil, claimsFor("ten_a", "crd_other", hour)), packet.ErrNotAuthorized},
		{"another tenant", AuthMethodJWT, keys.sign(t, nil, claimsFor("ten_b", "crd_a", hour)), packet.ErrNotAuthorized},
		{"expired", AuthMethodJWT, keys.sign(t, nil, claimsFor("ten_a", "crd_a", time.Now().Add(-time.Minute))), packet.ErrNotAuthorized},
		{"garbage", AuthMethodJWT, []byte("not.a.token"), packet.ErrNotAuthorized},
		{"another method", "SCRAM-SHA-256", keys.sign(t, nil, claimsFor("ten_a", "crd_a", hour)), packet.ErrProtocol},
		{"good", AuthMethodJWT, keys.sign(t, nil, claimsFor("ten_a", "crd_a", hour)), packet.CodeSuccess},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := n.dial(t, cred{"ten_a", "crd_a", allowAll, hour.Unix()}, nil)
			r := rawConnect(t, conn, "reauth-"+tc.name)
			a := packet.Auth{Reason: packet.CodeReAuthenticate}
			a.Props.AuthMethod, a.Props.AuthData = []byte(tc.method), tc.token
			b, err := a.Append(nil, packet.Version5)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Write(b); err != nil {
				t.Fatal(err)
			}
			if tc.want != packet.CodeSuccess {
				expectDisconnect(t, r, tc.want)
				return
			}
			fh, body, err := r.ReadPacket(0)
			if err != nil || fh.Type != packet.TypeAuth {
				t.Fatalf("want AUTH, got %v %v", fh.Type, err)
			}
			var ans packet.Auth
			if err := ans.Decode(packet.Version5, fh, body); err != nil || ans.Reason != packet.CodeSuccess ||
				string(ans.Props.AuthMethod) != AuthMethodJWT {
				t.Fatalf("AUTH answer reason %#x method %q (%v), want 0x00 %q [MQTT-4.12.0-5]", byte(ans.Reason), ans.Props.AuthMethod, err, AuthMethodJWT)
			}
		})
	}

	// A CONNECT naming another method is refused with 0x8C.
	conn := n.dial(t, cred{"ten_a", "crd_a", allowAll, 0}, nil)
	cp := packet.Connect{Version: packet.Version5, CleanStart: true, ClientID: []byte("scram")}
	cp.Props.AuthMethod = []byte("SCRAM-SHA-256")
	if _, ack := sendConnect(t, conn, &cp); ack.Reason != packet.ErrBadAuthMethod {
		t.Fatalf("CONNACK reason %#x, want 0x8C", byte(ack.Reason))
	}
}

// Without the API's keys a CONNECT naming berth-jwt is still admitted (the
// gateway verified its token) and named back, but a re-authentication
// cannot be verified: DISCONNECT 0x87.
func TestReauthenticationWithoutJWKS(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	conn := n.dial(t, cred{"ten_a", "crd_a", allowAll, 0}, nil)
	cp := packet.Connect{Version: packet.Version5, CleanStart: true, ClientID: []byte("jwt")}
	cp.Props.AuthMethod = []byte(AuthMethodJWT)
	r, ack := sendConnect(t, conn, &cp)
	if ack.Reason != packet.CodeSuccess || string(ack.Props.AuthMethod) != AuthMethodJWT {
		t.Fatalf("CONNACK reason %#x method %q, want 0x00 naming %q", byte(ack.Reason), ack.Props.AuthMethod, AuthMethodJWT)
	}
	a := packet.Auth{Reason: packet.CodeReAuthenticate}
	a.Props.AuthMethod, a.Props.AuthData = []byte(AuthMethodJWT), []byte("a.b.c")
	b, err := a.Append(nil, packet.Version5)
	if err != nil {
		t.Fatal(err)
	}
	conn.Write(b)
	expectDisconnect(t, r, packet.ErrNotAuthorized)
}
