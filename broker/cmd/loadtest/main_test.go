package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startMosquitto runs a private mosquitto on a free loopback port and
// stops it by PID at cleanup.
func startMosquitto(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, port, _ := net.SplitHostPort(addr)
	conf := filepath.Join(t.TempDir(), "mosquitto.conf")
	if err := os.WriteFile(conf, []byte("listener "+port+" 127.0.0.1\nallow_anonymous true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/usr/sbin/mosquitto", "-c", conf)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start mosquitto (apt-get install mosquitto): %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
	}
	t.Fatalf("mosquitto not listening on %s", addr)
	return ""
}

func TestRun(t *testing.T) {
	addr := startMosquitto(t)
	tests := []struct {
		name     string
		args     []string
		wantCode int
		check    func(t *testing.T, stdout, stderr string)
	}{
		{"pubsub json", []string{"-addr", addr, "-mode", "pubsub", "-pubs", "2", "-subs", "2", "-qos", "1", "-count", "50", "-duration", "5s", "-json"}, 0,
			func(t *testing.T, stdout, _ string) {
				var r struct {
					Mode      string   `json:"mode"`
					Delivered uint64   `json:"delivered"`
					Lost      uint64   `json:"lost"`
					Failures  []string `json:"failures"`
					Latency   struct {
						P99 float64 `json:"p99_us"`
					} `json:"latency"`
				}
				if err := json.Unmarshal([]byte(stdout), &r); err != nil {
					t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
				}
				if r.Mode != "pubsub" || r.Delivered != 200 || r.Lost != 0 || len(r.Failures) != 0 || r.Latency.P99 <= 0 {
					t.Errorf("report %+v", r)
				}
			}},
		{"conn text", []string{"-addr", addr, "-mode", "conn", "-levels", "5,10", "-hold", "10ms"}, 0,
			func(t *testing.T, stdout, _ string) {
				if !strings.Contains(stdout, "result: PASS") || !strings.Contains(stdout, "      10       10        0") {
					t.Errorf("stdout:\n%s", stdout)
				}
			}},
		{"progress on stderr", []string{"-addr", addr, "-mode", "pub", "-pubs", "1", "-rate", "50", "-duration", "1500ms"}, 0,
			func(t *testing.T, _, stderr string) {
				if !strings.Contains(stderr, "sent ") || !strings.Contains(stderr, "errors 0") {
					t.Errorf("no progress line on stderr:\n%s", stderr)
				}
			}},
		{"connection failures exit 1", []string{"-addr", "127.0.0.1:1", "-mode", "conn", "-levels", "3", "-hold", "0s"}, 1,
			func(t *testing.T, stdout, _ string) {
				if !strings.Contains(stdout, "refused 3") {
					t.Errorf("stdout:\n%s", stdout)
				}
			}},
		{"remote refused", []string{"-addr", "192.0.2.1:1883"}, 2,
			func(t *testing.T, _, stderr string) {
				if !strings.Contains(stderr, "-allow-remote") {
					t.Errorf("stderr:\n%s", stderr)
				}
			}},
		{"bad qos", []string{"-qos", "3"}, 2, func(*testing.T, string, string) {}},
		{"bad levels", []string{"-levels", "1,x"}, 2, func(*testing.T, string, string) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.args, &stdout, &stderr)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.wantCode, stdout.String(), stderr.String())
			}
			tt.check(t, stdout.String(), stderr.String())
		})
	}
}

func TestParseInts(t *testing.T) {
	got, err := parseInts("1000, 10000,,30000")
	if err != nil || fmt.Sprint(got) != "[1000 10000 30000]" {
		t.Fatalf("parseInts = %v, %v", got, err)
	}
	if joinInts(got) != "1000,10000,30000" {
		t.Fatalf("joinInts = %s", joinInts(got))
	}
}

// TestCredentialsFromEnv checks that the environment fills -user and -pass
// when unset, that flags win, and that -h never shows the password.
func TestCredentialsFromEnv(t *testing.T) {
	t.Setenv("BERTH_LOADTEST_USER", "env-user")
	t.Setenv("BERTH_LOADTEST_PASS", "env-secret")
	cfg, _, _, err := parseFlags([]string{"-user", "flag-user"}, &bytes.Buffer{})
	if err != nil || cfg.User != "flag-user" || cfg.Pass != "env-secret" {
		t.Fatalf("user %q pass %q err %v", cfg.User, cfg.Pass, err)
	}
	var help bytes.Buffer
	if code := run([]string{"-h"}, &bytes.Buffer{}, &help); code != 0 || strings.Contains(help.String(), "env-secret") {
		t.Fatalf("-h exit %d, output shows the password: %v", code, strings.Contains(help.String(), "env-secret"))
	}
}

// TestSourceAddrsFlag: -source-addrs takes a comma-separated list of
// addresses and refuses anything else.
func TestSourceAddrsFlag(t *testing.T) {
	cfg, _, _, err := parseFlags([]string{"-mode", "conn", "-source-addrs", "127.0.0.2, 127.0.0.3"}, &bytes.Buffer{})
	if err != nil || len(cfg.SourceAddrs) != 2 || cfg.SourceAddrs[1].String() != "127.0.0.3" {
		t.Fatalf("parseFlags = %v, %v", cfg.SourceAddrs, err)
	}
	if _, _, _, err := parseFlags([]string{"-source-addrs", "127.0.0.2,nope"}, &bytes.Buffer{}); err == nil {
		t.Fatal("-source-addrs with a bad address accepted")
	}
}
