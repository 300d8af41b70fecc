package config

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"strings"
	"testing"
	"time"
)

func parse(args []string, env map[string]string) (Config, error) {
	fs := flag.NewFlagSet("api", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return Parse(fs, args, func(k string) string { return env[k] })
}

func TestDefaults(t *testing.T) {
	c, err := parse([]string{"-dev"}, map[string]string{"DATABASE_URL": "postgres://x@h/db"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Dev || c.MetricsListen != "127.0.0.1:9102" || c.TrustedProxies != "" || c.Argon2Concurrency < 2 {
		t.Fatalf("defaults %+v", c)
	}
	if c.Listen != ":8080" || c.Domain != "mqtt.localhost" || c.MQTTAddr != "127.0.0.1:1883" || c.Issuer != "berth" ||
		c.KeyRotation != 30*24*time.Hour || c.AuthRateLimit != 20 || !c.SecureCookies ||
		c.MQTTTLSAddr != "" || c.MQTTWSURL != "" || c.MQTTWSSURL != "" ||
		c.SpansRetention != 7*24*time.Hour || c.UsageRetention != 35*24*time.Hour || c.PartitionsAhead != 3 ||
		c.LifecycleInterval != time.Hour {
		t.Fatalf("defaults %+v", c)
	}
}

func TestLifecycleSettings(t *testing.T) {
	c, err := parse([]string{"-spans-retention", "48h"}, map[string]string{"DATABASE_URL": "postgres://x@h/db", "BERTH_DEV": "true",
		"BERTH_SPANS_RETENTION": "72h", "BERTH_USAGE_RETENTION": "1440h", "BERTH_PARTITIONS_AHEAD": "7",
		"BERTH_LIFECYCLE_INTERVAL": "30m"})
	if err != nil {
		t.Fatal(err)
	}
	if c.SpansRetention != 48*time.Hour || c.UsageRetention != 1440*time.Hour || c.PartitionsAhead != 7 ||
		c.LifecycleInterval != 30*time.Minute {
		t.Fatalf("config %+v", c)
	}
}

func TestFlagsBeatEnvironment(t *testing.T) {
	env := map[string]string{
		"DATABASE_URL": "postgres://env@h/db", "BERTH_API_LISTEN": ":9000", "BERTH_NODE_TOKEN": "env-token",
		"BERTH_CORS_ORIGIN": "https://dash.example.com", "BERTH_KEY_ENCRYPTION_KEY": strings.Repeat("ab", 32),
		"BERTH_MQTT_TLS_ADDR": "mqtt.example.com:8883", "BERTH_MQTT_WS_URL": "ws://env:8083/mqtt",
		"BERTH_MQTT_WSS_URL": "wss://mqtt.example.com:8084/mqtt", "BERTH_METRICS_LISTEN": "",
		"BERTH_TRUSTED_PROXIES": "10.0.0.0/8, 192.168.1.7", "BERTH_ARGON2_CONCURRENCY": "3",
	}
	c, err := parse([]string{"-listen", ":7000", "-issuer", "berth-test", "-mqtt-ws-url", "ws://127.0.0.1:8083/mqtt"}, env)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != ":7000" || c.DatabaseURL != "postgres://env@h/db" || c.NodeToken != "env-token" || c.Issuer != "berth-test" ||
		c.CORSOrigin != "https://dash.example.com" || c.MQTTTLSAddr != "mqtt.example.com:8883" ||
		c.MQTTWSURL != "ws://127.0.0.1:8083/mqtt" || c.MQTTWSSURL != "wss://mqtt.example.com:8084/mqtt" ||
		c.MetricsListen != "127.0.0.1:9102" || c.Argon2Concurrency != 3 || c.Dev {
		t.Fatalf("config %+v", c)
	}
	if got := fmt.Sprint(c.TrustedProxyPrefixes()); got != "[10.0.0.0/8 192.168.1.7/32]" {
		t.Fatalf("trusted proxies %s", got)
	}
	r := c.Redacted()
	if r.NodeToken != "REDACTED" || r.KeyEncryption != "REDACTED" {
		t.Fatalf("redacted %+v", r)
	}
}

// TestKeyEncryptionRequired: signing keys are sealed at rest everywhere
// but the local dev stack; the refusal is one line naming the flag.
func TestKeyEncryptionRequired(t *testing.T) {
	_, err := parse(nil, map[string]string{"DATABASE_URL": "postgres://x@h/db"})
	if err == nil || !strings.Contains(err.Error(), "-key-encryption-key") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("no KEK without -dev: %v, want one line naming -key-encryption-key", err)
	}
	for _, c := range []struct {
		args []string
		env  map[string]string
	}{
		{[]string{"-dev"}, nil},
		{nil, map[string]string{"BERTH_DEV": "1"}},
		{[]string{"-key-encryption-key", strings.Repeat("ab", 32)}, nil},
		{nil, map[string]string{"BERTH_KEY_ENCRYPTION_KEY": strings.Repeat("cd", 32)}},
	} {
		env := map[string]string{"DATABASE_URL": "postgres://x@h/db"}
		maps.Copy(env, c.env)
		if _, err := parse(c.args, env); err != nil {
			t.Fatalf("%v %v: %v", c.args, c.env, err)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "database-url"},
		{[]string{"-database-url", "postgres://x", "-listen", "nope"}, "-listen"},
		{[]string{"-database-url", "postgres://x", "-mqtt-addr", "nope"}, "-mqtt-addr"},
		{[]string{"-database-url", "postgres://x", "-spans-retention", "1h"}, "-spans-retention"},
		{[]string{"-database-url", "postgres://x", "-usage-retention", "168h"}, "-usage-retention"},
		{[]string{"-database-url", "postgres://x", "-partitions-ahead", "0"}, "-partitions-ahead"},
		{[]string{"-database-url", "postgres://x", "-lifecycle-interval", "1s"}, "-lifecycle-interval"},
		{[]string{"-database-url", "postgres://x", "-mqtt-tls-addr", "nope"}, "-mqtt-tls-addr"},
		{[]string{"-database-url", "postgres://x", "-mqtt-ws-url", "127.0.0.1:8083/mqtt"}, "-mqtt-ws-url"},
		{[]string{"-database-url", "postgres://x", "-mqtt-ws-url", "wss://h:8084/mqtt"}, "-mqtt-ws-url"},
		{[]string{"-database-url", "postgres://x", "-mqtt-wss-url", "ws://h:8083/mqtt"}, "-mqtt-wss-url"},
		{[]string{"-database-url", "postgres://x", "-cors-origin", "dash.example.com"}, "-cors-origin"},
		{[]string{"-database-url", "postgres://x", "-key-encryption-key", "short"}, "-key-encryption-key"},
		{[]string{"-database-url", "postgres://x", "-key-rotation", "1m"}, "-key-rotation"},
		{[]string{"-database-url", "postgres://x", "-log-format", "xml"}, "-log-format"},
		{[]string{"-database-url", "postgres://x", "-domain", ".bad"}, "-domain"},
		{[]string{"-database-url", "postgres://x", "-metrics-listen", "nope"}, "-metrics-listen"},
		{[]string{"-database-url", "postgres://x", "-trusted-proxies", "10.0.0.0/8,proxy.local"}, "-trusted-proxies"},
		{[]string{"-database-url", "postgres://x", "-argon2-concurrency", "0"}, "-argon2-concurrency"},
		{[]string{"-database-url", "postgres://x", "-open-plans", "free,gold"}, "-open-plans"},
		{[]string{"-database-url", "postgres://x", "-open-plans", "pro,business"}, "-open-plans"},
		{[]string{"-database-url", "postgres://x", "-account-write-rate", "0"}, "-account-write-rate"},
		{[]string{"-database-url", "postgres://x", "-account-write-burst", "0"}, "-account-write-burst"},
	} {
		if _, err := parse(append([]string{"-dev"}, c.args...), nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%v: %v, want an error naming %s", c.args, err, c.want)
		}
	}
	if _, err := parse([]string{"-dev"}, map[string]string{"DATABASE_URL": "postgres://x", "BERTH_KEY_ROTATION": "soon"}); err == nil {
		t.Fatal("a bad environment value was accepted")
	}
}

// TestPlansAndWriteRate: only free is open and writes are 20 a second
// (bursts of 40) by default; flags and BERTH_* set them.
func TestPlansAndWriteRate(t *testing.T) {
	base := map[string]string{"DATABASE_URL": "postgres://x@h/db", "BERTH_DEV": "1"}
	c, err := parse(nil, base)
	if err != nil {
		t.Fatal(err)
	}
	if plans, err := c.OpenPlanNames(); err != nil || fmt.Sprint(plans) != "[free]" || c.AccountWriteRate != 20 || c.AccountWriteBurst != 40 {
		t.Fatalf("defaults: plans %v (%v), write rate %v burst %d", plans, err, c.AccountWriteRate, c.AccountWriteBurst)
	}
	env := maps.Clone(base)
	maps.Copy(env, map[string]string{"BERTH_OPEN_PLANS": "free, pro,pro", "BERTH_ACCOUNT_WRITE_RATE": "2.5", "BERTH_ACCOUNT_WRITE_BURST": "5"})
	c, err = parse(nil, env)
	if err != nil {
		t.Fatal(err)
	}
	if plans, _ := c.OpenPlanNames(); fmt.Sprint(plans) != "[free pro]" || c.AccountWriteRate != 2.5 || c.AccountWriteBurst != 5 {
		t.Fatalf("from the environment: plans %v, write rate %v burst %d", plans, c.AccountWriteRate, c.AccountWriteBurst)
	}
	c, err = parse([]string{"-open-plans", "free,pro,business", "-account-write-rate", "1000"}, env)
	if err != nil {
		t.Fatal(err)
	}
	if plans, _ := c.OpenPlanNames(); fmt.Sprint(plans) != "[free pro business]" || c.AccountWriteRate != 1000 || c.AccountWriteBurst != 5 {
		t.Fatalf("flags over the environment: plans %v, write rate %v burst %d", plans, c.AccountWriteRate, c.AccountWriteBurst)
	}
}

// TestDatabasePasswordNeverShown: a database URL whose password breaks the
// URL syntax is refused without quoting it, and the config as logged
// shows no password, however the URL is written.
func TestDatabasePasswordNeverShown(t *testing.T) {
	_, err := parse([]string{"-dev"}, map[string]string{"DATABASE_URL": "postgres://berth:pa%zzsecret@db/berth"})
	if err == nil || !strings.Contains(err.Error(), "-database-url") || strings.Contains(err.Error(), "zzsecret") {
		t.Fatalf("unparsable URL: %v, want -database-url named and the password not shown", err)
	}
	for _, u := range []string{"postgres://berth:pa55secret@db/berth", "postgres://db/berth?password=pa55secret",
		"host=db user=berth password=pa55secret", "postgres://berth:1234/pa55secret@db/berth"} {
		if r := (Config{DatabaseURL: u}).Redacted(); strings.Contains(r.DatabaseURL, "pa55secret") {
			t.Errorf("%q logged as %q", u, r.DatabaseURL)
		}
	}
}

// {slug} may stand for the tenant's slug in the host of every gateway
// address (the gateways' tenant DNS); the address is checked as filled.
func TestSlugPlaceholderInAddresses(t *testing.T) {
	env := map[string]string{"DATABASE_URL": "postgres://x@h/db", "BERTH_DEV": "true"}
	c, err := parse([]string{"-mqtt-addr", "{slug}.mqtt.example.com:1883", "-mqtt-tls-addr", "{slug}.mqtt.example.com:8883",
		"-mqtt-ws-url", "ws://{slug}.mqtt.example.com:8083/mqtt", "-mqtt-wss-url", "wss://{slug}.mqtt.example.com:443/mqtt"}, env)
	if err != nil {
		t.Fatal(err)
	}
	if c.MQTTAddr != "{slug}.mqtt.example.com:1883" || c.MQTTWSSURL != "wss://{slug}.mqtt.example.com:443/mqtt" {
		t.Fatalf("config %+v", c)
	}
	for _, bad := range [][]string{
		{"-mqtt-addr", "{slug}.mqtt.example.com"},           // no port
		{"-mqtt-wss-url", "ws://{slug}.mqtt.example.com/x"}, // wrong scheme
	} {
		if _, err := parse(bad, env); err == nil {
			t.Fatalf("%v accepted", bad)
		}
	}
}
