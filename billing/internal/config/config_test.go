package config

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestEnvFillsFlagsNotGiven(t *testing.T) {
	env := map[string]string{"DATABASE_URL": "postgres://u:secret@db/x", "BERTH_BILLING_INTERVAL": "30s", "BERTH_BILLING_GRACE": "2h",
		"BERTH_BILLING_CORRECTION_WINDOW": "24h"}
	c, err := Parse(flag.NewFlagSet("t", flag.ContinueOnError), []string{"-grace", "3h"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.Interval != 30*time.Second || c.Grace != 3*time.Hour || c.Poll != 5*time.Second || c.CorrectionWindow != 24*time.Hour ||
		c.DatabaseURL != env["DATABASE_URL"] {
		t.Fatalf("config %+v", c)
	}
	if r := c.Redacted(); strings.Contains(r.DatabaseURL, "secret") {
		t.Fatalf("redacted URL %q shows the password", r.DatabaseURL)
	}
	for _, u := range []string{"postgres://db/x?password=secret", "host=db password=secret", "postgres://u:sec%ret@db/x"} {
		if r := (Config{DatabaseURL: u}).Redacted(); strings.Contains(r.DatabaseURL, "secret") || strings.Contains(r.DatabaseURL, "ret@") {
			t.Errorf("redacted URL %q shows the password of %q", r.DatabaseURL, u)
		}
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

// -now (BERTH_BILLING_NOW) takes an RFC 3339 time; anything else is
// refused, naming the variable.
func TestNow(t *testing.T) {
	env := map[string]string{"DATABASE_URL": "postgres://db/x", "BERTH_BILLING_NOW": "2026-02-01T01:00:01Z"}
	c, err := Parse(flag.NewFlagSet("t", flag.ContinueOnError), nil, func(k string) string { return env[k] })
	if err != nil || !c.Now.Equal(time.Date(2026, 2, 1, 1, 0, 1, 0, time.UTC)) {
		t.Fatalf("now %v, %v", c.Now, err)
	}
	c, err = Parse(flag.NewFlagSet("t", flag.ContinueOnError), []string{"-database-url", "postgres://db/x"}, func(string) string { return "" })
	if err != nil || !c.Now.IsZero() || c.CorrectionWindow != 72*time.Hour {
		t.Fatalf("default now %v, correction window %v, %v", c.Now, c.CorrectionWindow, err)
	}
	env["BERTH_BILLING_NOW"] = "yesterday"
	if _, err := Parse(flag.NewFlagSet("t", flag.ContinueOnError), nil, func(k string) string { return env[k] }); err == nil ||
		!strings.Contains(err.Error(), "BERTH_BILLING_NOW") || !strings.Contains(err.Error(), "RFC 3339") {
		t.Fatalf("err %v", err)
	}
}
