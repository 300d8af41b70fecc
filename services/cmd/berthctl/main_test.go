package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/services/internal/account"
	"berth.dev/services/internal/credential"
	"berth.dev/services/internal/httpapi"
	"berth.dev/services/internal/nodeclient"
	"berth.dev/services/internal/store"
	"berth.dev/testenv"
)

// api serves a real API on a fresh migrated database.
func api(t *testing.T) *client {
	t.Helper()
	st := store.New(testenv.Postgres(t))
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
	return &client{base: srv.URL, http: srv.Client()}
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

// TestDemo: the first run signs up, a second (the account exists) reuses
// the account and its tenant; with another password it fails at login.
func TestDemo(t *testing.T) {
	c := api(t)
	ctx := context.Background()
	first, err := demo(ctx, c, "demo@example.com", "berth-demo-password")
	if err != nil {
		t.Fatal(err)
	}
	a := vars(t, first)
	for _, k := range []string{"BERTH_API_KEY", "BERTH_TENANT_ID", "BERTH_MQTT_USERNAME", "BERTH_MQTT_PASSWORD"} {
		if a[k] == "" {
			t.Fatalf("%s empty in %q", k, first)
		}
	}
	if a["BERTH_MQTT_ADDR"] != "127.0.0.1:1883" {
		t.Fatalf("BERTH_MQTT_ADDR %q", a["BERTH_MQTT_ADDR"])
	}
	// The key works.
	if err := c.do(ctx, "GET", "/v1/tenants/"+a["BERTH_TENANT_ID"], a["BERTH_API_KEY"], nil, nil); err != nil {
		t.Fatal(err)
	}

	second, err := demo(ctx, c, "demo@example.com", "berth-demo-password")
	if err != nil {
		t.Fatal(err)
	}
	b := vars(t, second)
	if b["BERTH_TENANT_ID"] != a["BERTH_TENANT_ID"] || b["BERTH_API_KEY"] == a["BERTH_API_KEY"] {
		t.Fatalf("second run: tenant %s (first %s), key new: %v", b["BERTH_TENANT_ID"], a["BERTH_TENANT_ID"], b["BERTH_API_KEY"] != a["BERTH_API_KEY"])
	}

	_, err = demo(ctx, c, "demo@example.com", "not-the-demo-password")
	var se *statusError
	if !errors.As(err, &se) || se.code != http.StatusUnauthorized || !strings.Contains(err.Error(), "login") {
		t.Fatalf("another password: %v, want the login's 401", err)
	}
}
