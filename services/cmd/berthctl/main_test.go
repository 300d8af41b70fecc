package main

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/jackc/pgx/v5/pgxpool"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/services/apiclient"
	"berth.dev/services/internal/account"
	"berth.dev/services/internal/credential"
	"berth.dev/services/internal/httpapi"
	"berth.dev/services/internal/nodeclient"
	"berth.dev/services/internal/store"
	"berth.dev/testenv"
)

// api serves a real API on a fresh migrated database and returns its URL.
func api(t *testing.T) string {
	t.Helper()
	url, _ := apiDB(t)
	return url
}

// apiDB is api, also returning the database under it.
func apiDB(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	pool := testenv.Postgres(t)
	st := store.New(pool)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	kr, err := credential.NewKeyring(st, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	r, err := httpapi.NewRouter(httpapi.Options{
		Store: st, Accounts: account.NewService(st, account.Params{MemoryKiB: 1024, Passes: 1, Lanes: 1}, 15*time.Minute, 24*time.Hour, nil),
		Keyring: kr, Nodes: nodeclient.New(nil, "node-token"), Logger: log, Registry: prometheus.NewRegistry(),
		Domain: "mqtt.test", MQTTAddr: "127.0.0.1:1883", Issuer: "berth", AuthRateLimit: 1000,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL, pool
}

// cli runs berthctl with its config file in dir and BERTH_API_URL url.
type cli struct {
	t        *testing.T
	dir, url string
}

func newCLI(t *testing.T, url string) *cli { return &cli{t: t, dir: t.TempDir(), url: url} }

func (c *cli) run(args ...string) (code int, stdout, stderr string) {
	c.t.Helper()
	var o, e bytes.Buffer
	vars := map[string]string{"BERTH_CONFIG": filepath.Join(c.dir, "berth", "config.json"), "BERTH_API_URL": c.url}
	code = run(context.Background(), args, &env{stdin: strings.NewReader(""), stdout: &o, stderr: &e, getenv: func(k string) string { return vars[k] }})
	return code, o.String(), e.String()
}

func (c *cli) ok(args ...string) string {
	c.t.Helper()
	code, out, errOut := c.run(args...)
	if code != 0 {
		c.t.Fatalf("berthctl %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func (c *cli) config() config {
	c.t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, "berth", "config.json"))
	if err != nil {
		c.t.Fatal(err)
	}
	var cfg config
	if err := json.Unmarshal(b, &cfg); err != nil {
		c.t.Fatal(err)
	}
	return cfg
}

// vars parses demo's output.
func vars(t *testing.T, out string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("line %q", line)
		}
		m[k] = strings.Trim(v, "'")
	}
	return m
}

// TestDemoIsIdempotent: the first run signs up; a second reuses the API
// key (kept in the config file), the tenant and the "demo device"
// credential; with another password and no stored key it fails at login.
func TestDemoIsIdempotent(t *testing.T) {
	url := api(t)
	c := newCLI(t, url)
	a := vars(t, c.ok("demo", "--email", "demo@example.com", "--password", "berth-demo-password"))
	for _, k := range []string{"BERTH_API_KEY", "BERTH_TENANT_ID", "BERTH_MQTT_USERNAME", "BERTH_MQTT_PASSWORD"} {
		if a[k] == "" {
			t.Fatalf("%s empty in %v", k, a)
		}
	}
	if a["BERTH_MQTT_ADDR"] != "127.0.0.1:1883" {
		t.Fatalf("BERTH_MQTT_ADDR %q", a["BERTH_MQTT_ADDR"])
	}
	b := vars(t, c.ok("demo", "--email", "demo@example.com", "--password", "berth-demo-password"))
	if b["BERTH_API_KEY"] != a["BERTH_API_KEY"] || b["BERTH_TENANT_ID"] != a["BERTH_TENANT_ID"] || b["BERTH_MQTT_USERNAME"] != a["BERTH_MQTT_USERNAME"] {
		t.Fatalf("second run differs:\n%v\n%v", a, b)
	}
	if b["BERTH_MQTT_PASSWORD"] == "" {
		t.Fatal("second run: no MQTT password")
	}
	api := apiclient.New(url, a["BERTH_API_KEY"])
	var keys apiclient.List[apiclient.APIKey]
	if err := api.Call(t.Context(), apiclient.ListAPIKeys, nil, nil, nil, &keys); err != nil || len(keys.Items) != 1 {
		t.Fatalf("API keys after two runs: %+v %v, want 1", keys.Items, err)
	}
	var creds apiclient.List[apiclient.Credential]
	if err := api.Call(t.Context(), apiclient.ListCredentials, []string{a["BERTH_TENANT_ID"]}, nil, nil, &creds); err != nil || len(creds.Items) != 1 {
		t.Fatalf("credentials after two runs: %+v %v, want 1", creds.Items, err)
	}

	other := newCLI(t, url)
	code, _, errOut := other.run("demo", "--email", "demo@example.com", "--password", "not-the-demo-password")
	if code != exitAuth || !strings.Contains(errOut, "login") {
		t.Fatalf("another password: exit %d %q, want 3 and the login's 401", code, errOut)
	}
}

// TestSignupLoginCredentialsLogout walks the account commands against a
// real API: the config file's modes, --json output, the refusals' exit codes.
func TestSignupLoginCredentialsLogout(t *testing.T) {
	url := api(t)
	c := newCLI(t, url)
	if code, _, _ := c.run("tenants"); code != exitAuth {
		t.Fatalf("tenants before login: exit %d, want 3", code)
	}
	out := c.ok("signup", "--email", "me@example.com", "--password", "correct horse battery", "--tenant-slug", "home")
	if !strings.Contains(out, "tenant home (ten_") {
		t.Fatalf("signup: %q", out)
	}
	p := filepath.Join(c.dir, "berth", "config.json")
	for path, want := range map[string]os.FileMode{p: 0o600, filepath.Dir(p): 0o700} {
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != want {
			t.Fatalf("%s: %v %v, want %v", path, fi.Mode().Perm(), err, want)
		}
	}
	cfg := c.config()
	if cfg.APIKey == "" || cfg.APIKeyID == "" || !strings.HasPrefix(cfg.Tenant, "ten_") || cfg.API != url {
		t.Fatalf("config after signup: %+v", cfg)
	}

	var tenants apiclient.List[apiclient.Tenant]
	if err := json.Unmarshal([]byte(c.ok("tenants", "--json")), &tenants); err != nil || len(tenants.Items) != 1 || tenants.Items[0].Slug != "home" {
		t.Fatalf("tenants --json: %+v %v", tenants, err)
	}
	if out := c.ok("tenants"); !strings.Contains(out, "SLUG") || !strings.Contains(out, "*"+cfg.Tenant) {
		t.Fatalf("tenants table:\n%s", out)
	}

	var cred apiclient.Credential
	if err := json.Unmarshal([]byte(c.ok("credentials", "create", "sensor", "--pub", "s/#", "--sub", "s/#,cmd/#", "--json")), &cred); err != nil || cred.Password == "" {
		t.Fatalf("credentials create --json: %+v %v", cred, err)
	}
	if got := strings.Join(cred.ACL.Sub, " "); got != "s/# cmd/#" {
		t.Fatalf("sub ACL %q", got)
	}
	if out := c.ok("credentials", "--tenant", "home"); !strings.Contains(out, cred.ID) || !strings.Contains(out, "active") {
		t.Fatalf("credentials list:\n%s", out)
	}
	if out := c.ok("credentials", "token", cred.ID); !strings.Contains(out, cred.ID) {
		t.Fatalf("credentials token:\n%s", out)
	}
	if code, _, errOut := c.run("credentials", "token", "crd_doesnotexist"); code != exitNotFound {
		t.Fatalf("token for an unknown credential: exit %d %s, want 4", code, errOut)
	}
	if code, _, _ := c.run("credentials", "--tenant", "nosuch"); code != exitNotFound {
		t.Fatalf("unknown tenant slug: exit %d, want 4", code)
	}
	c.ok("credentials", "revoke", cred.ID)
	if out := c.ok("credentials"); !strings.Contains(out, "revoked") {
		t.Fatalf("after revoke:\n%s", out)
	}

	// A second login revokes the first key; logout revokes the second.
	first := cfg.APIKey
	c.ok("login", "--email", "me@example.com", "--password", "correct horse battery")
	second := c.config().APIKey
	if err := apiclient.New(url, first).Call(t.Context(), apiclient.ListTenants, nil, nil, nil, nil); err == nil {
		t.Fatal("the first login's key still works after the second login")
	}
	c.ok("logout")
	if err := apiclient.New(url, second).Call(t.Context(), apiclient.ListTenants, nil, nil, nil, nil); err == nil {
		t.Fatal("the key still works after logout")
	}
	if code, _, _ := c.run("credentials"); code != exitAuth {
		t.Fatalf("after logout: exit %d, want 3", code)
	}
	if code, _, _ := c.run("login", "--email", "me@example.com", "--password", "wrong password!"); code != exitAuth {
		t.Fatalf("wrong password: exit %d, want 3", code)
	}
}
