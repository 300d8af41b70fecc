package main

import (
	"io"
	"maps"
	"strings"
	"testing"
)

// TestEnvNames: the broker's variables and their order. BERTH_<FLAG>
// comes before the conventional names (DATABASE_URL,
// OTEL_EXPORTER_OTLP_ENDPOINT), a flag before both; BERTH_VERSION is no
// switch; secrets stay out of the report.
func TestEnvNames(t *testing.T) {
	node := []string{"-node-id", "n1"}
	base := map[string]string{"BERTH_PROXY_SECRET": "0123456789abcdef", "BERTH_NODE_TOKEN": "fedcba9876543210"}
	for _, tc := range []struct {
		name     string
		args     []string
		env      map[string]string
		db, otlp string
	}{
		{"conventional names", nil, map[string]string{"DATABASE_URL": "postgres://conv/db", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://conv:4318"},
			"postgres://conv/db", "http://conv:4318"},
		{"BERTH_ names first", nil, map[string]string{"DATABASE_URL": "postgres://conv/db", "BERTH_DATABASE_URL": "postgres://berth/db",
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://conv:4318", "BERTH_OTLP_ENDPOINT": "http://berth:4318"},
			"postgres://berth/db", "http://berth:4318"},
		{"flags first", []string{"-database-url", "postgres://flag/db", "-otlp-endpoint", "http://flag:4318"},
			map[string]string{"DATABASE_URL": "postgres://conv/db", "BERTH_OTLP_ENDPOINT": "http://berth:4318"},
			"postgres://flag/db", "http://flag:4318"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := maps.Clone(base)
			maps.Copy(env, tc.env)
			cfg, rep, err := loadConfig(append(append([]string(nil), node...), tc.args...), func(k string) string { return env[k] }, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.DatabaseURL != tc.db || cfg.OTLPEndpoint != tc.otlp {
				t.Fatalf("database %q otlp %q, want %q %q", cfg.DatabaseURL, cfg.OTLPEndpoint, tc.db, tc.otlp)
			}
			for _, s := range rep.Settings {
				if strings.Contains(s.Value, "0123456789abcdef") || strings.Contains(s.Value, "fedcba9876543210") {
					t.Fatalf("report shows a secret: %+v", s)
				}
			}
		})
	}
	cfg, err := parseConfig([]string{"-listen", "127.0.0.1:0"}, func(k string) string {
		return map[string]string{"BERTH_VERSION": "true"}[k]
	}, io.Discard)
	if err != nil || cfg.ShowVersion {
		t.Fatalf("BERTH_VERSION=true: version %v, %v; want no switch", cfg.ShowVersion, err)
	}
}
