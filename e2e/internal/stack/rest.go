package stack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// Account is a signed-up user with its first tenant.
type Account struct {
	ID     string `json:"account_id"`
	APIKey string `json:"api_key"`
	Tenant struct {
		ID       string `json:"id"`
		Slug     string `json:"slug"`
		Endpoint string `json:"endpoint"`
	} `json:"tenant"`
	// Email and Password are what Signup signed up with, for Login.
	Email    string `json:"-"`
	Password string `json:"-"`
}

// Credential is a device credential as the API returns it once.
type Credential struct {
	ID       string `json:"id"`
	Username string `json:"username"`
	Password string `json:"password"`
	Endpoint string `json:"endpoint"`
	MQTTAddr string `json:"mqtt_addr"`
}

// Do sends a JSON request with the API key and decodes a JSON answer into
// out (when not nil). It returns the status code.
func (s *Stack) Do(t testing.TB, method, path, apiKey string, body, out any) int {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.API+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, path, raw, err)
		}
	}
	if resp.StatusCode >= 300 {
		t.Logf("%s %s -> %d %s", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode
}

// Signup creates an account with a unique email, as a user does: signup
// (202, the same answer whether or not the email was taken), login, an API
// key made with the session, and the account's first tenant.
func (s *Stack) Signup(t testing.TB) Account {
	t.Helper()
	a := Account{Email: "user-" + randomHex(5) + "@example.com", Password: "correct horse battery staple"}
	body := map[string]string{"email": a.Email, "password": a.Password}
	if code := s.Do(t, "POST", "/v1/signup", "", body, nil); code != http.StatusAccepted {
		t.Fatalf("signup: status %d", code)
	}
	session := s.Login(t, a)
	var key struct {
		Secret string `json:"secret"`
	}
	if code := s.Do(t, "POST", "/v1/api-keys", session, map[string]string{"name": "e2e"}, &key); code != http.StatusCreated || key.Secret == "" {
		t.Fatalf("create API key: status %d", code)
	}
	a.APIKey = key.Secret
	var me struct {
		ID string `json:"id"`
	}
	if code := s.Do(t, "GET", "/v1/account", a.APIKey, nil, &me); code != http.StatusOK {
		t.Fatalf("account: status %d", code)
	}
	a.ID = me.ID
	var tenants struct {
		Items []json.RawMessage `json:"items"`
	}
	if code := s.Do(t, "GET", "/v1/tenants", a.APIKey, nil, &tenants); code != http.StatusOK || len(tenants.Items) != 1 {
		t.Fatalf("tenants after signup: status %d, %d tenants", code, len(tenants.Items))
	}
	if err := json.Unmarshal(tenants.Items[0], &a.Tenant); err != nil {
		t.Fatal(err)
	}
	return a
}

// Login opens a dashboard session for a and returns its token, which the
// API takes as a Bearer token like an API key.
func (s *Stack) Login(t testing.TB, a Account) string {
	t.Helper()
	var ses struct {
		Token string `json:"token"`
	}
	body := map[string]string{"email": a.Email, "password": a.Password}
	if code := s.Do(t, "POST", "/v1/login", "", body, &ses); code != http.StatusCreated || ses.Token == "" {
		t.Fatalf("login: status %d", code)
	}
	return ses.Token
}

// CreateCredential makes a device credential for a's tenant.
func (s *Stack) CreateCredential(t testing.TB, a Account, pub, sub []string, expiresAt *time.Time) Credential {
	t.Helper()
	body := map[string]any{"name": "device-" + randomHex(3), "acl": map[string][]string{"pub": pub, "sub": sub}}
	if expiresAt != nil {
		body["expires_at"] = expiresAt.UTC().Format(time.RFC3339)
	}
	var c Credential
	if code := s.Do(t, "POST", fmt.Sprintf("/v1/tenants/%s/credentials", a.Tenant.ID), a.APIKey, body, &c); code != http.StatusCreated {
		t.Fatalf("create credential: status %d", code)
	}
	return c
}

// Revoke revokes a credential.
func (s *Stack) Revoke(t testing.TB, a Account, credID string) {
	t.Helper()
	if code := s.Do(t, "DELETE", fmt.Sprintf("/v1/tenants/%s/credentials/%s", a.Tenant.ID, credID), a.APIKey, nil, nil); code/100 != 2 {
		t.Fatalf("revoke: status %d", code)
	}
}

// SetQuota changes one quota of a's tenant; the API merges it into the
// others and announces the change to the nodes and gateways.
func (s *Stack) SetQuota(t testing.TB, a Account, name string, value int64) {
	t.Helper()
	path := fmt.Sprintf("/v1/tenants/%s/quotas", a.Tenant.ID)
	if code := s.Do(t, "PUT", path, a.APIKey, map[string]int64{name: value}, nil); code != http.StatusOK {
		t.Fatalf("put quotas: status %d", code)
	}
}

// Token is a fresh token for an existing credential, as
// POST .../credentials/{cid}/token returns it.
type Token struct {
	Username  string     `json:"username"`
	Password  string     `json:"password"`
	ExpiresAt *time.Time `json:"expires_at"`
}

// IssueToken asks the API for a fresh token for a's credential credID,
// expiring at expiresAt (nil: the credential's own expiry).
func (s *Stack) IssueToken(t testing.TB, a Account, credID string, expiresAt *time.Time) Token {
	t.Helper()
	var body any
	if expiresAt != nil {
		body = map[string]string{"expires_at": expiresAt.UTC().Format(time.RFC3339)}
	}
	var tok Token
	path := fmt.Sprintf("/v1/tenants/%s/credentials/%s/token", a.Tenant.ID, credID)
	if code := s.Do(t, "POST", path, a.APIKey, body, &tok); code != http.StatusCreated {
		t.Fatalf("issue token: status %d", code)
	}
	return tok
}
