package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/services/internal/account"
	"berth.dev/services/internal/credential"
	"berth.dev/services/internal/httpapi"
	"berth.dev/services/internal/nodeclient"
	"berth.dev/services/internal/store"
	"berth.dev/testenv"
)

// testParams keep argon2id cheap in tests; production uses account.DefaultParams.
var testParams = account.Params{MemoryKiB: 1024, Passes: 1, Lanes: 1}

const nodeToken = "test-node-token"

// env is a real API on a real migrated database.
type env struct {
	t       *testing.T
	srv     *httptest.Server
	pool    *pgxpool.Pool
	store   *store.Store
	keyring *credential.Keyring
	url     string
	dbURL   string
	opts    httpapi.Options
}

type envOption func(*httpapi.Options)

func newEnv(t *testing.T, opts ...envOption) *env {
	t.Helper()
	dbURL := testenv.DatabaseURL(t)
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st := store.New(pool)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() && os.Getenv("BERTH_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	kr, err := credential.NewKeyring(st, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	o := httpapi.Options{
		Store: st, Accounts: account.NewService(st, testParams, 15*time.Minute, 24*time.Hour, nil), Keyring: kr,
		Nodes: nodeclient.New(nil, nodeToken), Logger: log, Registry: prometheus.NewRegistry(),
		Domain: "mqtt.test", MQTTAddr: "127.0.0.1:1883", Issuer: "berth", AuthRateLimit: 100000,
		CORSOrigin: "https://dash.example.com",
	}
	for _, f := range opts {
		f(&o)
	}
	r, err := httpapi.NewRouter(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return &env{t: t, srv: srv, pool: pool, store: st, keyring: kr, url: srv.URL, dbURL: dbURL, opts: o}
}

// resp is a decoded answer.
type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

func (r resp) problem(t *testing.T) httpapi.Problem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json; body %s", ct, r.body)
	}
	var p httpapi.Problem
	r.json(t, &p)
	if p.Status != r.status || p.Type == "" || p.Title == "" {
		t.Fatalf("problem %+v does not match status %d", p, r.status)
	}
	return p
}

// do sends a request; body is sent raw when it is a string or []byte,
// else as JSON; token "" sends no Authorization.
func (e *env) do(t testing.TB, method, path, token string, body any, hdr ...string) resp {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	case io.Reader:
		rd = b
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp{status: res.StatusCode, header: res.Header, body: data}
}

// want fails unless r has status.
func want(t *testing.T, r resp, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
}

// user is a signed-up account.
type user struct {
	accountID, key, tenantID, slug string
}

// signup signs up as a client does: POST /v1/signup (202, an answer that
// says nothing about the account), then a login; it gives the account an
// API key named "signup" (in the store, so the account's REST write
// bucket stays full) and finds its first tenant.
func (e *env) signup(email string) user {
	e.t.Helper()
	const password = "correct horse battery"
	want(e.t, e.do(e.t, "POST", "/v1/signup", "", map[string]string{"email": email, "password": password}), http.StatusAccepted)
	r := e.do(e.t, "POST", "/v1/login", "", map[string]string{"email": email, "password": password})
	want(e.t, r, http.StatusCreated)
	var ses struct {
		AccountID string `json:"account_id"`
	}
	r.json(e.t, &ses)
	secret, hash := account.NewSecret(account.PrefixAPIKey)
	if err := e.store.CreateAPIKey(context.Background(), &store.APIKey{ID: store.NewID(store.PrefixAPIKey), AccountID: ses.AccountID, Name: "signup"}, hash); err != nil {
		e.t.Fatal(err)
	}
	r = e.do(e.t, "GET", "/v1/tenants", secret, nil)
	want(e.t, r, http.StatusOK)
	var tenants struct {
		Items []struct{ ID, Slug string }
	}
	r.json(e.t, &tenants)
	if len(tenants.Items) != 1 {
		e.t.Fatalf("a new account has %d tenants, want 1", len(tenants.Items))
	}
	return user{accountID: ses.AccountID, key: secret, tenantID: tenants.Items[0].ID, slug: tenants.Items[0].Slug}
}

// createCredential makes a credential and returns the answer's fields.
func (e *env) createCredential(u user, body any) map[string]any {
	e.t.Helper()
	r := e.do(e.t, "POST", "/v1/tenants/"+u.tenantID+"/credentials", u.key, body)
	want(e.t, r, http.StatusCreated)
	var out map[string]any
	r.json(e.t, &out)
	return out
}
