package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"berth.dev/services/internal/httpapi"
)

// inspected is the answer of POST .../inspector-token.
type inspected struct {
	Username       string    `json:"username"`
	Password       string    `json:"password"`
	ClientIDPrefix string    `json:"client_id_prefix"`
	ExpiresAt      time.Time `json:"expires_at"`
	ACL            struct {
		Pub []string `json:"pub"`
		Sub []string `json:"sub"`
	} `json:"acl"`
	WSURL *string `json:"ws_url"`
}

func inspectorPath(u user) string { return "/v1/tenants/" + u.tenantID + "/inspector-token" }

func (e *env) inspectorToken(t *testing.T, u user, token string, body any) inspected {
	t.Helper()
	r := e.do(t, "POST", inspectorPath(u), token, body)
	want(t, r, http.StatusCreated)
	var out inspected
	r.json(t, &out)
	return out
}

// login opens a dashboard session and returns its token.
func (e *env) login(t *testing.T, email string) string {
	t.Helper()
	r := e.do(t, "POST", "/v1/login", "", map[string]string{"email": email, "password": "correct horse battery"})
	want(t, r, http.StatusCreated)
	var ses struct{ Token string }
	r.json(t, &ses)
	return ses.Token
}

// An inspector token is an ordinary credential token, verified with the
// JWKS alone: tenant-scoped, subscribe to everything, publish only when
// asked, expiring within 15 minutes. Every mint reuses one credential.
func TestInspectorToken(t *testing.T) {
	e := newEnv(t, func(o *httpapi.Options) { o.MQTTWSURL = "ws://127.0.0.1:8083/mqtt" })
	u := e.signup("ada@example.com")
	session := e.login(t, "ada@example.com")

	cases := []struct {
		name    string
		token   string
		body    any
		wantPub string
	}{
		{"session, no body", session, nil, "[]"},
		{"session, empty object", session, map[string]any{}, "[]"},
		{"session, publish false", session, map[string]any{"publish": false}, "[]"},
		{"session, publish true", session, map[string]any{"publish": true}, "[#]"},
		{"API key, no body", u.key, nil, "[]"},
		{"API key, publish true", u.key, map[string]any{"publish": true}, "[#]"},
	}
	var username string
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := time.Now().Truncate(time.Second)
			out := e.inspectorToken(t, u, tc.token, tc.body)
			if out.Username == "" || !strings.HasPrefix(out.Username, "crd_") || out.Password == "" ||
				out.ClientIDPrefix == "" || out.WSURL == nil || *out.WSURL != "ws://127.0.0.1:8083/mqtt" {
				t.Fatalf("answer %+v", out)
			}
			if username == "" {
				username = out.Username
			}
			if out.Username != username {
				t.Fatalf("username %s, want the tenant's one inspector credential %s", out.Username, username)
			}
			c, _, err := fetchJWKS(t, e).verify(out.Password)
			if err != nil {
				t.Fatal(err)
			}
			if c.Iss != "berth" || c.Sub != out.Username || c.Tid != u.tenantID || c.Jti == "" || c.Exp == nil {
				t.Fatalf("claims %+v", c)
			}
			exp := time.Unix(*c.Exp, 0)
			if life := exp.Sub(time.Unix(c.Iat, 0)); life <= 0 || life > 15*time.Minute || exp.Before(before.Add(5*time.Minute)) {
				t.Fatalf("iat %d exp %d: a life of %v, want at most 15m and not already ending", c.Iat, *c.Exp, life)
			}
			if !out.ExpiresAt.Equal(exp) {
				t.Fatalf("expires_at %v, exp %v", out.ExpiresAt, exp)
			}
			if got := fmt.Sprint(c.ACL.Sub); got != "[#]" {
				t.Fatalf("acl.sub %s, want [#]", got)
			}
			if got := fmt.Sprint(c.ACL.Pub); got != tc.wantPub {
				t.Fatalf("acl.pub %s, want %s", got, tc.wantPub)
			}
			if fmt.Sprint(out.ACL) != fmt.Sprint(c.ACL) {
				t.Fatalf("answer acl %v, token acl %v", out.ACL, c.ACL)
			}
		})
	}

	// Exactly one inspector credential, and only ?kind=inspector or all lists it.
	dev := e.createCredential(u, map[string]any{"name": "sensor", "acl": map[string]any{"pub": []string{"a/#"}}})
	for _, tc := range []struct{ query, want string }{
		{"", "[" + dev["id"].(string) + ":device]"},
		{"?kind=device", "[" + dev["id"].(string) + ":device]"},
		{"?kind=inspector", "[" + username + ":inspector]"},
		{"?kind=all", "[" + username + ":inspector " + dev["id"].(string) + ":device]"},
	} {
		r := e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/credentials"+tc.query, u.key, nil)
		want(t, r, http.StatusOK)
		var l struct {
			Items []struct{ ID, Kind, Name string }
		}
		r.json(t, &l)
		var got []string
		for _, c := range l.Items {
			got = append(got, c.ID+":"+c.Kind)
		}
		if fmt.Sprint(got) != tc.want {
			t.Fatalf("credentials%s: %v, want %s", tc.query, got, tc.want)
		}
	}
	r := e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/credentials?kind=robot", u.key, nil)
	want(t, r, http.StatusUnprocessableEntity)
	if p := r.problem(t); len(p.Errors) != 1 || p.Errors[0].Field != "kind" {
		t.Fatalf("problem %+v", p)
	}
	// It is got by id, with the newest token's acl and expiry.
	g := e.do(t, "GET", "/v1/tenants/"+u.tenantID+"/credentials/"+username, u.key, nil)
	want(t, g, http.StatusOK)
	var got struct {
		Kind      string
		ExpiresAt *time.Time `json:"expires_at"`
		ACL       struct{ Pub, Sub []string }
		KID       string
	}
	g.json(t, &got)
	if got.Kind != "inspector" || got.ExpiresAt == nil || time.Until(*got.ExpiresAt) > 15*time.Minute ||
		fmt.Sprint(got.ACL.Pub) != "[#]" || got.KID == "" {
		t.Fatalf("inspector credential %s", g.body)
	}
}

// The inspector credential gets tokens only from inspector-token; revoking
// it ends it, and the next mint makes a new one.
func TestInspectorTokenRevocation(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	first := e.inspectorToken(t, u, u.key, nil)
	if first.WSURL != nil {
		t.Fatalf("ws_url %q without -mqtt-ws-url", *first.WSURL)
	}

	r := e.do(t, "POST", tokenPath(u, first.Username), u.key, nil)
	want(t, r, http.StatusConflict)
	if p := r.problem(t); p.Type != "https://berth.dev/problems/inspector-credential" {
		t.Fatalf("problem %+v", p)
	}

	want(t, e.do(t, "DELETE", "/v1/tenants/"+u.tenantID+"/credentials/"+first.Username, u.key, nil), http.StatusNoContent)
	second := e.inspectorToken(t, u, u.key, nil)
	if second.Username == first.Username {
		t.Fatal("a revoked inspector credential was reused")
	}
	var live, revoked int
	if err := e.pool.QueryRow(context.Background(),
		`SELECT count(*) FILTER (WHERE revoked_at IS NULL), count(*) FILTER (WHERE revoked_at IS NOT NULL)
		 FROM credentials WHERE tenant_id = $1 AND kind = 'inspector'`, u.tenantID).Scan(&live, &revoked); err != nil {
		t.Fatal(err)
	}
	if live != 1 || revoked != 1 {
		t.Fatalf("%d live and %d revoked inspector credentials, want 1 and 1", live, revoked)
	}
}

// Concurrent first mints of a tenant share one credential.
func TestInspectorTokenConcurrent(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	const n = 8
	names := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := e.do(t, "POST", inspectorPath(u), u.key, nil)
			if r.status != http.StatusCreated {
				t.Errorf("status %d: %s", r.status, r.body)
				return
			}
			var out inspected
			if err := json.Unmarshal(r.body, &out); err != nil {
				t.Errorf("decode %s: %v", r.body, err)
			}
			names[i] = out.Username
		})
	}
	wg.Wait()
	for _, name := range names[1:] {
		if name != names[0] {
			t.Fatalf("usernames %v, want one", names)
		}
	}
}

// A key rotation does not strand a live inspector token: the credential
// names the key that signed the newest token until that token expires.
func TestInspectorTokenAfterRotation(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	out := e.inspectorToken(t, u, u.key, nil)
	if _, _, err := e.keyring.Rotate(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fetchJWKS(t, e).verify(out.Password); err != nil {
		t.Fatalf("inspector token no longer verifies after a rotation: %v", err)
	}
}

func TestInspectorTokenRefusals(t *testing.T) {
	e := newEnv(t)
	a := e.signup("a@example.com")
	b := e.signup("b@example.com")
	bSession := e.login(t, "b@example.com")
	for _, tc := range []struct {
		name   string
		path   string
		token  string
		body   any
		status int
		slug   string
		field  string
	}{
		{"another account's session", inspectorPath(a), bSession, nil, http.StatusNotFound, "not-found", ""},
		{"another account's key", inspectorPath(a), b.key, nil, http.StatusNotFound, "not-found", ""},
		{"no such tenant", inspectorPath(user{tenantID: "ten_doesnotexist00000"}), bSession, nil, http.StatusNotFound, "not-found", ""},
		{"unauthenticated", inspectorPath(a), "", nil, http.StatusUnauthorized, "unauthenticated", ""},
		{"publish not a boolean", inspectorPath(a), a.key, map[string]any{"publish": "yes"}, http.StatusUnprocessableEntity, "validation", "publish"},
		{"unknown field", inspectorPath(a), a.key, map[string]any{"ttl": 3600}, http.StatusUnprocessableEntity, "validation", "ttl"},
		{"malformed JSON", inspectorPath(a), a.key, `{"publish":`, http.StatusBadRequest, "malformed", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(t, "POST", tc.path, tc.token, tc.body)
			want(t, r, tc.status)
			p := r.problem(t)
			if p.Type != "https://berth.dev/problems/"+tc.slug {
				t.Fatalf("problem type %q, want %s", p.Type, tc.slug)
			}
			if tc.field != "" && (len(p.Errors) != 1 || p.Errors[0].Field != tc.field) {
				t.Fatalf("field errors %+v, want one for %q", p.Errors, tc.field)
			}
		})
	}
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM credentials WHERE kind = 'inspector'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d inspector credentials after refusals (%v), want 0", n, err)
	}
}
