package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"berth.dev/services/internal/account"
)

// signupAnswer is POST /v1/signup's one answer body.
const signupAnswer = `{"status":"accepted","detail":"If this email can be registered, its account and first tenant now exist: log in with the same email and password."}` + "\n"

func TestSignup(t *testing.T) {
	e := newEnv(t)
	r := e.do(t, "POST", "/v1/signup", "", map[string]string{"email": "ada@example.com", "password": "correct horse battery", "tenant_slug": "ada-home"})
	want(t, r, http.StatusAccepted)
	if string(r.body) != signupAnswer {
		t.Fatalf("signup answered %s", r.body)
	}
	// The account exists: its owner logs in and finds the first tenant.
	session := e.login(t, "ada@example.com")
	var tenants struct {
		Items []struct{ ID, Slug, Endpoint, Plan string }
	}
	tr := e.do(t, "GET", "/v1/tenants", session, nil)
	want(t, tr, http.StatusOK)
	tr.json(t, &tenants)
	if len(tenants.Items) != 1 || !strings.HasPrefix(tenants.Items[0].ID, "ten_") || tenants.Items[0].Slug != "ada-home" ||
		tenants.Items[0].Endpoint != "ada-home.mqtt.test" || tenants.Items[0].Plan != "free" {
		t.Fatalf("tenants %+v", tenants.Items)
	}
	// Signup issues no API key (nobody would see it): the account makes
	// its own.
	var keys int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM api_keys`).Scan(&keys); err != nil || keys != 0 {
		t.Fatalf("api keys after signup: %d %v", keys, err)
	}
	// A generated slug when none is given.
	u := e.signup("grace@example.com")
	if !strings.HasPrefix(u.slug, "t-") {
		t.Fatalf("generated slug %q", u.slug)
	}

	cases := []struct {
		name   string
		body   any
		status int
		field  string
	}{
		{"duplicate slug", map[string]string{"email": "x@example.com", "password": "another password", "tenant_slug": "ada-home"}, 409, "tenant_slug"},
		{"duplicate slug, registered email", map[string]string{"email": "ada@example.com", "password": "another password", "tenant_slug": "ada-home"}, 409, "tenant_slug"},
		{"bad email", map[string]string{"email": "not-an-email", "password": "another password"}, 422, "email"},
		{"email with name", map[string]string{"email": "Ada <a@example.com>", "password": "another password"}, 422, "email"},
		{"sql in email", map[string]string{"email": "a'; DROP TABLE accounts; --@example.com", "password": "another password"}, 422, "email"},
		{"short password", map[string]string{"email": "b@example.com", "password": "short"}, 422, "password"},
		{"long password", map[string]string{"email": "b@example.com", "password": strings.Repeat("p", 300)}, 422, "password"},
		{"invalid slug", map[string]string{"email": "b@example.com", "password": "another password", "tenant_slug": "Not_A_Label"}, 422, "tenant_slug"},
		{"sql in slug", map[string]string{"email": "b@example.com", "password": "another password", "tenant_slug": "x'); DROP TABLE tenants;--"}, 422, "tenant_slug"},
		{"reserved slug", map[string]string{"email": "b@example.com", "password": "another password", "tenant_slug": "api"}, 422, "tenant_slug"},
		{"slug too long", map[string]string{"email": "b@example.com", "password": "another password", "tenant_slug": strings.Repeat("a", 64)}, 422, "tenant_slug"},
		{"unknown field", map[string]any{"email": "b@example.com", "password": "another password", "admin": true}, 422, "admin"},
		{"wrong type", map[string]any{"email": 42, "password": "another password"}, 422, "email"},
		{"malformed json", `{"email": "b@example.com",`, 400, ""},
		{"not an object", `[1,2]`, 400, ""},
		{"two objects", `{"email":"b@example.com","password":"another password"}{}`, 400, ""},
		{"empty body", ``, 400, ""},
		{"huge body", `{"email":"` + strings.Repeat("a", 2<<20) + `"}`, 413, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(t, "POST", "/v1/signup", "", c.body)
			want(t, r, c.status)
			p := r.problem(t)
			if c.field != "" && (len(p.Errors) == 0 || p.Errors[0].Field != c.field) {
				t.Fatalf("errors %+v, want field %q", p.Errors, c.field)
			}
			if p.RequestID == "" || p.RequestID != r.header.Get("X-Request-Id") {
				t.Fatalf("request id %q vs header %q", p.RequestID, r.header.Get("X-Request-Id"))
			}
		})
	}
	// The SQL in the refused inputs did nothing.
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM accounts`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("accounts: %d %v", n, err)
	}
	t.Run("wrong content type", func(t *testing.T) {
		r := e.do(t, "POST", "/v1/signup", "", `email=a`, "Content-Type", "application/x-www-form-urlencoded")
		want(t, r, http.StatusUnsupportedMediaType)
		r.problem(t)
	})
}

func TestSessions(t *testing.T) {
	e := newEnv(t)
	e.signup("ada@example.com")

	bad := e.do(t, "POST", "/v1/login", "", map[string]string{"email": "ada@example.com", "password": "wrong password!"})
	want(t, bad, http.StatusUnauthorized)
	unknown := e.do(t, "POST", "/v1/login", "", map[string]string{"email": "nobody@example.com", "password": "wrong password!"})
	want(t, unknown, http.StatusUnauthorized)
	if bad.problem(t).Type != unknown.problem(t).Type {
		t.Fatal("an unknown email and a wrong password must look the same")
	}
	want(t, e.do(t, "POST", "/v1/login", "", map[string]string{"email": "ada@example.com"}), http.StatusUnprocessableEntity)

	r := e.do(t, "POST", "/v1/login", "", map[string]string{"email": "Ada@Example.com", "password": "correct horse battery"})
	want(t, r, http.StatusCreated)
	var ses struct {
		Token        string `json:"token"`
		RefreshToken string `json:"refresh_token"`
	}
	r.json(t, &ses)
	cookies := (&http.Response{Header: r.header}).Cookies()
	if len(cookies) != 2 {
		t.Fatalf("cookies %v", cookies)
	}
	for _, c := range cookies {
		if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Value == "" {
			t.Fatalf("cookie %+v must be HttpOnly, SameSite=Strict", c)
		}
	}
	want(t, e.do(t, "GET", "/v1/tenants", ses.Token, nil), http.StatusOK)
	// The dashboard's cookie works too.
	want(t, e.do(t, "GET", "/v1/tenants", "", nil, "Cookie", "berth_session="+ses.Token), http.StatusOK)

	// Refresh rotates both tokens.
	rr := e.do(t, "POST", "/v1/refresh", "", map[string]string{"refresh_token": ses.RefreshToken})
	want(t, rr, http.StatusOK)
	var ses2 struct {
		Token        string `json:"token"`
		RefreshToken string `json:"refresh_token"`
	}
	rr.json(t, &ses2)
	want(t, e.do(t, "GET", "/v1/tenants", ses.Token, nil), http.StatusUnauthorized)
	want(t, e.do(t, "GET", "/v1/tenants", ses2.Token, nil), http.StatusOK)
	want(t, e.do(t, "POST", "/v1/refresh", "", map[string]string{"refresh_token": ses.RefreshToken}), http.StatusUnauthorized)
	want(t, e.do(t, "POST", "/v1/refresh", "", nil, "Cookie", "berth_refresh="+ses2.RefreshToken), http.StatusOK)
}

func TestExpiredSession(t *testing.T) {
	e := newEnv(t)
	e.signup("ada@example.com")
	r := e.do(t, "POST", "/v1/login", "", map[string]string{"email": "ada@example.com", "password": "correct horse battery"})
	want(t, r, http.StatusCreated)
	var ses struct {
		Token string `json:"token"`
	}
	r.json(t, &ses)
	var id string
	if err := e.pool.QueryRow(context.Background(), `SELECT id FROM sessions WHERE token_hash = $1`, account.HashSecret(ses.Token)).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if err := e.store.ExpireSession(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	got := e.do(t, "GET", "/v1/tenants", ses.Token, nil)
	want(t, got, http.StatusUnauthorized)
	got.problem(t)
	if got.header.Get("WWW-Authenticate") == "" {
		t.Fatal("401 without WWW-Authenticate")
	}
}

func TestLogout(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	r := e.do(t, "POST", "/v1/login", "", map[string]string{"email": "ada@example.com", "password": "correct horse battery"})
	var ses struct {
		Token string `json:"token"`
	}
	r.json(t, &ses)
	want(t, e.do(t, "POST", "/v1/logout", u.key, nil), http.StatusBadRequest) // an API key is not a session
	out := e.do(t, "POST", "/v1/logout", ses.Token, nil)
	want(t, out, http.StatusNoContent)
	for _, c := range (&http.Response{Header: out.header}).Cookies() {
		if c.MaxAge >= 0 {
			t.Fatalf("cookie %s not cleared", c.Name)
		}
	}
	want(t, e.do(t, "GET", "/v1/tenants", ses.Token, nil), http.StatusUnauthorized)
	want(t, e.do(t, "POST", "/v1/logout", ses.Token, nil), http.StatusUnauthorized)
}

func TestUnauthenticated(t *testing.T) {
	e := newEnv(t)
	for _, token := range []string{"", "garbage", account.PrefixAPIKey + "nope", account.PrefixSession + "nope", "' OR 1=1 --"} {
		r := e.do(t, "GET", "/v1/tenants", token, nil)
		want(t, r, http.StatusUnauthorized)
		r.problem(t)
	}
	r := e.do(t, "GET", "/v1/tenants", "", nil, "Authorization", "Basic YWRhOnB3")
	want(t, r, http.StatusUnauthorized)
}

func TestAPIKeys(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	r := e.do(t, "POST", "/v1/api-keys", u.key, map[string]string{"name": "ci"})
	want(t, r, http.StatusCreated)
	var k struct {
		ID, Name, Secret string
	}
	r.json(t, &k)
	if k.Secret == "" || k.Name != "ci" || !strings.HasPrefix(k.ID, "key_") {
		t.Fatalf("key %+v", k)
	}
	want(t, e.do(t, "GET", "/v1/tenants", k.Secret, nil), http.StatusOK)

	l := e.do(t, "GET", "/v1/api-keys", u.key, nil)
	want(t, l, http.StatusOK)
	if strings.Contains(string(l.body), k.Secret) || strings.Contains(string(l.body), "secret") {
		t.Fatalf("list shows a secret: %s", l.body)
	}
	var list struct {
		Items []struct{ ID string }
	}
	l.json(t, &list)
	if len(list.Items) != 2 {
		t.Fatalf("keys %s", l.body)
	}
	want(t, e.do(t, "POST", "/v1/api-keys", u.key, map[string]string{"name": "bad\x00name"}), http.StatusUnprocessableEntity)

	want(t, e.do(t, "DELETE", "/v1/api-keys/"+k.ID, u.key, nil), http.StatusNoContent)
	want(t, e.do(t, "GET", "/v1/tenants", k.Secret, nil), http.StatusUnauthorized)
	want(t, e.do(t, "DELETE", "/v1/api-keys/key_doesnotexist", u.key, nil), http.StatusNotFound)
}

// TestHugeChunkedBody: a body without Content-Length is cut at 1 MiB too.
func TestHugeChunkedBody(t *testing.T) {
	e := newEnv(t)
	u := e.signup("ada@example.com")
	body := io.MultiReader(strings.NewReader(`{"name":"`), strings.NewReader(strings.Repeat("x", 2<<20)), strings.NewReader(`"}`))
	r := e.do(t, "POST", "/v1/api-keys", u.key, body)
	want(t, r, http.StatusRequestEntityTooLarge)
	r.problem(t)
}

func TestAccount(t *testing.T) {
	e := newEnv(t)
	u := e.signup("grace@example.com")
	r := e.do(t, "GET", "/v1/account", u.key, nil)
	want(t, r, http.StatusOK)
	var acc struct {
		ID, Email   string
		Plans       []string
		TenantLimit int `json:"tenant_limit"`
	}
	r.json(t, &acc)
	if acc.ID == "" || acc.Email != "grace@example.com" {
		t.Fatalf("account %s", r.body)
	}
	// By default an account is entitled to the free plan and its bound.
	if !slices.Equal(acc.Plans, []string{"free"}) || acc.TenantLimit != 3 {
		t.Fatalf("entitlement %v, limit %d; want [free], 3", acc.Plans, acc.TenantLimit)
	}
	want(t, e.do(t, "GET", "/v1/account", "", nil), http.StatusUnauthorized)
}
