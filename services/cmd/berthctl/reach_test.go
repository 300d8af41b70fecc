package main

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// An API that is not there (nothing listens at the address) is named,
// with how to point berthctl elsewhere; exit 1.
func TestUnreachableAPISaysWhereItLooked(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c := newCLI(t, "http://"+addr)
	code, _, errOut := c.run("signup", "--email", "a@example.com", "--password", "correct horse battery")
	if code != exitError || !strings.Contains(errOut, "cannot reach the API at http://"+addr) || !strings.Contains(errOut, "BERTH_API_URL") {
		t.Fatalf("exit %d %q, want 1 naming the address and BERTH_API_URL", code, errOut)
	}
}

// A login while BERTH_API_KEY is set (. demo.env sets it) says that the
// variable, not the login, will decide later commands.
func TestLoginNotesAnOverridingAPIKey(t *testing.T) {
	url := api(t)
	dir := t.TempDir()
	for _, key := range []string{"", "bk_demo"} {
		vars := map[string]string{"BERTH_CONFIG": filepath.Join(dir, "config.json"), "BERTH_API_URL": url, "BERTH_API_KEY": key}
		var o, e bytes.Buffer
		args := []string{"signup", "--email", "note@example.com", "--password", "correct horse battery"}
		code := run(context.Background(), args, &env{stdin: strings.NewReader(""), stdout: &o, stderr: &e, getenv: func(k string) string { return vars[k] }})
		if code != 0 || strings.Contains(e.String(), "BERTH_API_KEY is set") != (key != "") {
			t.Fatalf("BERTH_API_KEY=%q: exit %d, stderr %q", key, code, e.String())
		}
	}
}
