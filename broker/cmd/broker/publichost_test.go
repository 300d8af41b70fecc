package main

import (
	"io"
	"strings"
	"testing"
)

// TestPublicHostConfig: -public-host (BERTH_PUBLIC_HOST) reaches the
// node's configuration, and a value a DNS answer cannot name (a port, a
// URL) stops the node before it starts.
func TestPublicHostConfig(t *testing.T) {
	env := map[string]string{"BERTH_PROXY_SECRET": "0123456789abcdef", "BERTH_NODE_TOKEN": "fedcba9876543210",
		"DATABASE_URL": "postgres://127.0.0.1:1/x"}
	getenv := func(k string) string { return env[k] }
	for _, tc := range []struct {
		name string
		args []string
		env  string
		want string // PublicHost, or a substring of the error
		ok   bool
	}{
		{"unset", nil, "", "", true},
		{"environment", nil, "node-0.mqtt.example.com", "node-0.mqtt.example.com", true},
		{"flag over environment", []string{"-public-host", "203.0.113.7"}, "node-0.mqtt.example.com", "203.0.113.7", true},
		{"IPv6", []string{"-public-host", "2001:db8::7"}, "", "2001:db8::7", true},
		{"a port", []string{"-public-host", "203.0.113.7:1883"}, "", "public host", false},
		{"a URL", []string{"-public-host", "mqtt://node-0.example.com"}, "", "public host", false},
		{"an empty label", []string{"-public-host", "node-0..example.com"}, "", "public host", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env["BERTH_PUBLIC_HOST"] = tc.env
			cfg, _, err := loadConfig(append([]string{"-node-id", "n1"}, tc.args...), getenv, io.Discard)
			if !tc.ok {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want one naming %q", err, tc.want)
				}
				return
			}
			if err != nil || cfg.PublicHost != tc.want || cfg.nodeConfig(nil).PublicHost != tc.want {
				t.Fatalf("PublicHost %q (%v), want %q", cfg.PublicHost, err, tc.want)
			}
		})
	}
}
