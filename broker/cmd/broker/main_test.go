package main

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"berth.dev/broker/packet"
	"github.com/google/go-cmp/cmp"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    func(*Config)
		wantErr bool
	}{
		{name: "defaults", want: func(*Config) {}},
		{name: "flags", args: []string{"-listen", ":1", "-allow-anonymous", "-ws-listen", ":2", "-data", "/d"},
			want: func(c *Config) { c.Listen, c.AllowAnonymous, c.WSListen, c.DataDir = ":1", true, ":2", "/d" }},
		{name: "env fills unset flags", args: []string{"-listen", ":1"},
			env:  map[string]string{"BERTH_LISTEN": ":9", "BERTH_ALLOW_ANONYMOUS": "true", "BERTH_MAX_QUEUED": "5"},
			want: func(c *Config) { c.Listen, c.AllowAnonymous, c.MaxQueued = ":1", true, 5 }},
		{name: "bad env value", env: map[string]string{"BERTH_MAX_QUEUED": "many"}, wantErr: true},
		{name: "memory return off, heap profiles", args: []string{"-heap-profile-dir", "/p"}, env: map[string]string{"BERTH_MEM_RETURN_EVERY": "0"},
			want: func(c *Config) { c.MemReturnEvery, c.HeapProfileDir = 0, "/p" }},
		{name: "negative memory return", args: []string{"-mem-return-every", "-1s"}, wantErr: true},
		{name: "log retention", args: []string{"-retention-bytes", "1048576"}, env: map[string]string{"BERTH_RETENTION_AGE": "1h"},
			want: func(c *Config) { c.RetentionBytes, c.RetentionAge = 1<<20, time.Hour }},
		{name: "negative retention", args: []string{"-retention-bytes", "-1"}, wantErr: true},
		{name: "invalid log format", args: []string{"-log-format", "xml"}, wantErr: true},
		{name: "no listener", args: []string{"-listen", ""}, wantErr: true},
		{name: "username without password", args: []string{"-username", "u"}, wantErr: true},
		{name: "credentials from env", env: map[string]string{"BERTH_USERNAME": "u", "BERTH_PASSWORD": "p"},
			want: func(c *Config) { c.Username, c.Password = "u", "p" }},
		{name: "node re-authentication and idle close",
			args: []string{"-node-id", "n1", "-database-url", "postgres://db", "-jwks-url", "http://api:8080/v1/.well-known/jwks.json", "-issuer", "staging", "-idle-timeout", "1m"},
			env:  map[string]string{"BERTH_PROXY_SECRET": "0123456789abcdef", "BERTH_NODE_TOKEN": "0123456789abcdef"},
			want: func(c *Config) {
				c.NodeID, c.DatabaseURL, c.ProxySecret, c.NodeToken = "n1", "postgres://db", "0123456789abcdef", "0123456789abcdef"
				c.JWKSURL, c.Issuer, c.IdleTimeout = "http://api:8080/v1/.well-known/jwks.json", "staging", time.Minute
			}},
		{name: "node handoff socket from env",
			args: []string{"-node-id", "n1", "-database-url", "postgres://db"},
			env:  map[string]string{"BERTH_PROXY_SECRET": "0123456789abcdef", "BERTH_NODE_TOKEN": "0123456789abcdef", "BERTH_HANDOFF_LISTEN": "/run/berth/n1.sock"},
			want: func(c *Config) {
				c.NodeID, c.DatabaseURL, c.ProxySecret, c.NodeToken = "n1", "postgres://db", "0123456789abcdef", "0123456789abcdef"
				c.HandoffListen = "/run/berth/n1.sock"
			}},
		{name: "node JWKS URL not http",
			args: []string{"-node-id", "n1", "-database-url", "postgres://db", "-jwks-url", "file:///etc/keys"},
			env:  map[string]string{"BERTH_PROXY_SECRET": "0123456789abcdef", "BERTH_NODE_TOKEN": "0123456789abcdef"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseConfig(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
			if tc.wantErr {
				if err == nil {
					t.Fatal("want an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := defaultConfig()
			tc.want(&want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("config (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRunServesAndShutsDown runs the standalone broker, talks MQTT 5 to
// it, and checks that cancelling (SIGTERM) sends DISCONNECT 0x8B and
// returns cleanly.
func TestRunServesAndShutsDown(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-listen", "127.0.0.1:0", "-allow-anonymous", "-data", dataDir, "-log-level", "warn"},
			func(string) string { return "" }, func(tcp, _ net.Addr) { ready <- tcp })
	}()
	var addr net.Addr
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	if fi, err := os.Stat(dataDir); err != nil || !fi.IsDir() {
		t.Fatalf("data dir: %v", err)
	}
	nc, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b, _ := (&packet.Connect{ClientID: []byte("cmd"), CleanStart: true}).Append(nil, packet.Version5)
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
	rd := packet.NewReader(nc, 256)
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if fh, _, err := rd.ReadPacket(0); err != nil || fh.Type != packet.TypeConnack {
		t.Fatalf("CONNACK: %v %v", fh.Type, err)
	}
	cancel()
	fh, body, err := rd.ReadPacket(0)
	if err != nil || fh.Type != packet.TypeDisconnect || len(body) == 0 || packet.ReasonCode(body[0]) != packet.ErrServerShuttingDown {
		t.Fatalf("want DISCONNECT 0x8B, got %v % x %v", fh.Type, body, err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return")
	}
}

func TestCheckPassword(t *testing.T) {
	tests := []struct {
		name, user, pass, u, p string
		want                   bool
	}{
		{"match", "dev", "s3cret", "dev", "s3cret", true},
		{"wrong password", "dev", "s3cret", "dev", "nope", false},
		{"wrong user", "dev", "s3cret", "eve", "s3cret", false},
		{"none configured", "", "", "", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := checkPassword(tc.user, tc.pass)([]byte(tc.u), []byte(tc.p)); got != tc.want {
				t.Fatalf("got %v", got)
			}
		})
	}
}
