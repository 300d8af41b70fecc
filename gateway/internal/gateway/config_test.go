package gateway

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestConfigFlagsAndEnv(t *testing.T) {
	env := map[string]string{
		"DATABASE_URL":                     "postgres://env/db",
		"REDIS_URL":                        "redis://env:6379/0",
		"BERTH_PROXY_SECRET":               "0123456789abcdef0123",
		"BERTH_JWKS_URL":                   "http://env/jwks",
		"BERTH_PER_IP_RATE":                "7.5",
		"BERTH_MAX_PENDING_PER_IP":         "12",
		"BERTH_DRAIN_GRACE":                "3s",
		"BERTH_GATEWAY_ID":                 "gw-from-env",
		"OTEL_EXPORTER_OTLP_ENDPOINT":      "http://collector:4318",
		"BERTH_PROXY_PROTOCOL_FROM":        "10.0.0.0/8,192.168.0.0/16",
		"BERTH_PROXY_PROTOCOL_MAX_WAITING": "300",
	}
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"-redis-url", "redis://flag:6379/1", "-issuer", "berth-staging"}); err != nil {
		t.Fatal(err)
	}
	if err := ApplyEnv(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		got, want any
	}{
		{"env fills an unset flag", cfg.DatabaseURL, "postgres://env/db"},
		{"a flag beats the environment", cfg.Redis.URL, "redis://flag:6379/1"},
		{"secret from BERTH_PROXY_SECRET", cfg.ProxySecret, "0123456789abcdef0123"},
		{"BERTH_<FLAG> for the rest", cfg.PerIPRate, 7.5},
		{"pending cap from BERTH_MAX_PENDING_PER_IP", cfg.MaxPendingPerIP, 12},
		{"durations parse", cfg.DrainGrace, 3 * time.Second},
		{"gateway id", cfg.GatewayID, "gw-from-env"},
		{"issuer flag", cfg.Issuer, "berth-staging"},
		{"default kept", cfg.ListenTCP, ":1883"},
		{"default wss address", cfg.ListenWSS, ":8084"},
		{"OTLP endpoint from OTEL_EXPORTER_OTLP_ENDPOINT", cfg.OTLPEndpoint, "http://collector:4318"},
		{"default trace sample", cfg.TraceSample, 0.01},
		{"metrics internal by default", cfg.MetricsListen, "127.0.0.1:9101"},
		{"balancers from BERTH_PROXY_PROTOCOL_FROM", cfg.ProxyProtocolFrom, "10.0.0.0/8,192.168.0.0/16"},
		{"default PROXY header timeout", cfg.ProxyProtocolTimeout, 5 * time.Second},
		{"header waits cap from BERTH_PROXY_PROTOCOL_MAX_WAITING", cfg.ProxyProtocolMaxWaiting, 300},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Fatalf("got %v, want %v", tc.got, tc.want)
			}
		})
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
}

func TestConfigEnvBadValue(t *testing.T) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	err := ApplyEnv(fs, func(k string) (string, bool) {
		if k == "BERTH_CONNECT_TIMEOUT" {
			return "soon", true
		}
		return "", false
	})
	if err == nil || !strings.Contains(err.Error(), "BERTH_CONNECT_TIMEOUT") {
		t.Fatalf("ApplyEnv = %v, want an error naming BERTH_CONNECT_TIMEOUT", err)
	}
}

func TestConfigValidate(t *testing.T) {
	valid := func() Config {
		c := DefaultConfig()
		c.DatabaseURL, c.Redis.URL, c.JWKSURL, c.ProxySecret = "postgres://x", "redis://x", "http://x", "0123456789abcdef"
		return c
	}
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr string
	}{
		{"valid", func(*Config) {}, ""},
		{"no database", func(c *Config) { c.DatabaseURL = "" }, "database-url"},
		{"short secret", func(c *Config) { c.ProxySecret = "short" }, "proxy-secret"},
		{"cert without key", func(c *Config) { c.TLSCert = "a.crt" }, "tls-cert"},
		{"no listener", func(c *Config) { c.ListenTCP, c.ListenWS = "", "" }, "no listener"},
		{"only wss, with a certificate", func(c *Config) {
			c.ListenTCP, c.ListenWS, c.ListenTLS, c.TLSCert, c.TLSKey = "", "", "", "a.crt", "a.key"
		}, ""},
		{"only wss, no certificate", func(c *Config) { c.ListenTCP, c.ListenWS, c.ListenTLS = "", "", "" }, "no listener"},
		{"tiny CONNECT cap", func(c *Config) { c.MaxConnectSize = 10 }, "max-connect-size"},
		{"zero rate", func(c *Config) { c.PerIPRate = 0 }, "rates"},
		{"no pending connections allowed", func(c *Config) { c.MaxPendingPerIP = 0 }, "max-pending-per-ip"},
		{"negative flood cool-down", func(c *Config) { c.FloodCooldown = -time.Second }, "flood-cooldown"},
		{"negative handshake bound", func(c *Config) { c.MaxHandshakes = -1 }, "max-handshakes"},
		{"no handshake wait", func(c *Config) { c.HandshakeWait = 0 }, "handshake-wait"},
		{"log format", func(c *Config) { c.LogFormat = "xml" }, "log-format"},
		{"trace sample above 1", func(c *Config) { c.TraceSample = 1.5 }, "trace-sample"},
		{"negative trace sample", func(c *Config) { c.TraceSample = -0.1 }, "trace-sample"},
		{"tracing off", func(c *Config) { c.TraceSample = 0 }, ""},
		{"OTLP endpoint without a scheme", func(c *Config) { c.OTLPEndpoint = "collector:4318" }, "otlp-endpoint"},
		{"OTLP endpoint", func(c *Config) { c.OTLPEndpoint = "https://otel.example.com" }, ""},
		{"balancers", func(c *Config) { c.ProxyProtocolFrom = "10.0.0.0/8, 2001:db8::1" }, ""},
		{"balancer not a CIDR", func(c *Config) { c.ProxyProtocolFrom = "10.0.0.0/8,lb.internal" }, "proxy-protocol-from"},
		{"no PROXY header timeout", func(c *Config) { c.ProxyProtocolTimeout = 0 }, "proxy-protocol-timeout"},
		{"no PROXY header may be waited for", func(c *Config) { c.ProxyProtocolMaxWaiting = 0 }, "proxy-protocol-max-waiting"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.mod(&c)
			err := c.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate = %v, want an error about %s", err, tc.wantErr)
			}
		})
	}
}
