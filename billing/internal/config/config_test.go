package config

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestEnvFillsFlagsNotGiven(t *testing.T) {
	env := map[string]string{"DATABASE_URL": "postgres://u:secret@db/x", "BERTH_BILLING_INTERVAL": "30s", "BERTH_BILLING_GRACE": "2h"}
	c, err := Parse(flag.NewFlagSet("t", flag.ContinueOnError), []string{"-grace", "3h"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.Interval != 30*time.Second || c.Grace != 3*time.Hour || c.Poll != 5*time.Second || c.DatabaseURL != env["DATABASE_URL"] {
		t.Fatalf("config %+v", c)
	}
	if r := c.Redacted(); strings.Contains(r.DatabaseURL, "secret") {
		t.Fatalf("redacted URL %q shows the password", r.DatabaseURL)
	}
}

func TestValidate(t *testing.T) {
	_, err := Parse(flag.NewFlagSet("t", flag.ContinueOnError), []string{"-interval", "0s", "-log-format", "xml"}, func(string) string { return "" })
	for _, want := range []string{"-database-url", "-interval", "-log-format"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err %v does not name %s", err, want)
		}
	}
}
