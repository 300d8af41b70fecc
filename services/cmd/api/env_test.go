package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestStartupLogsEnvironment: the API's first log lines say which
// environment variables set which flags, secrets hidden, and warn about a
// BERTH_ variable no flag reads that looks like a misspelt one. (The
// database is unreachable: the process stops right after.)
func TestStartupLogsEnvironment(t *testing.T) {
	bin := build(t)
	cmd := exec.Command(bin, "-metrics-listen", "")
	cmd.Env = append(os.Environ(),
		"DATABASE_URL=postgres://berth:pa55word@127.0.0.1:1/none?connect_timeout=2", "BERTH_DEV=1",
		"BERTH_API_LISTEN="+freeAddr(t), "BERTH_NODE_TOKEN=s3cret-node-token", "BERTH_KEY_ENCRYPTION_KEY=",
		"BERTH_LOG_FROMAT=text")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("started with an unreachable database:\n%s", out)
	}
	s := string(out)
	for _, secret := range []string{"pa55word", "s3cret-node-token"} {
		if strings.Contains(s, secret) {
			t.Errorf("the log shows %q:\n%s", secret, s)
		}
	}
	for _, want := range []string{
		`"msg":"settings from the environment"`, `"BERTH_NODE_TOKEN":"REDACTED"`, `"BERTH_DEV":"1"`,
		`"DATABASE_URL":"postgres://REDACTED@127.0.0.1:1/none?connect_timeout=2"`,
		`"level":"WARN","msg":"environment variable BERTH_LOG_FROMAT is not read; did you mean BERTH_LOG_FORMAT (-log-format)?"`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the log lacks %s:\n%s", want, s)
		}
	}
}
