package flagenv

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

// testRule is a rule like the processes': BERTH_<FLAG>, aliases tried in
// order, -version skipped, -token secret.
var testRule = Rule{
	Prefix: "BERTH_",
	Aliases: map[string][]string{
		"database-url": {"DATABASE_URL", "BERTH_DATABASE_URL"},
		"listen":       {"BERTH_API_LISTEN"},
	},
	Skip:   []string{"version"},
	Secret: []string{"token"},
}

type flags struct {
	listen, db, token, level string
	queued                   int
	grace                    time.Duration
	anon, version            bool
}

func newFlags() (*flag.FlagSet, *flags) {
	var f flags
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.listen, "listen", ":8080", "")
	fs.StringVar(&f.db, "database-url", "", "")
	fs.StringVar(&f.token, "token", "", "")
	fs.StringVar(&f.level, "log-level", "info", "")
	fs.IntVar(&f.queued, "max-queued", 10, "")
	fs.DurationVar(&f.grace, "drain-grace", time.Second, "")
	fs.BoolVar(&f.anon, "allow-anonymous", false, "")
	fs.BoolVar(&f.version, "version", false, "")
	return fs, &f
}

func apply(t *testing.T, args []string, env map[string]string) (*flags, Report, error) {
	t.Helper()
	fs, f := newFlags()
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	rep, err := testRule.Apply(fs, func(k string) string { return env[k] })
	return f, rep, err
}

// TestPrecedence: the command line beats the environment, the first set
// alias beats the later ones, the environment beats the default; an empty
// variable counts as unset.
func TestPrecedence(t *testing.T) {
	env := map[string]string{
		"DATABASE_URL": "postgres://first/db", "BERTH_DATABASE_URL": "postgres://second/db",
		"BERTH_MAX_QUEUED": "5", "BERTH_LOG_LEVEL": "debug", "BERTH_DRAIN_GRACE": "",
		"BERTH_ALLOW_ANONYMOUS": "true", "BERTH_LISTEN": ":1", "BERTH_VERSION": "true",
	}
	f, rep, err := apply(t, []string{"-log-level", "warn"}, env)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"the first alias wins", f.db, "postgres://first/db"},
		{"BERTH_<FLAG> fills an unset flag", f.queued, 5},
		{"a bool from the environment", f.anon, true},
		{"the command line beats the environment", f.level, "warn"},
		{"an empty variable is unset", f.grace, time.Second},
		{"aliases replace the rule's name", f.listen, ":8080"},
		{"a skipped flag reads nothing", f.version, false},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	want := []Setting{
		{"allow-anonymous", "BERTH_ALLOW_ANONYMOUS", "true"},
		{"database-url", "DATABASE_URL", "postgres://first/db"},
		{"max-queued", "BERTH_MAX_QUEUED", "5"},
	}
	if !slices.Equal(rep.Settings, want) {
		t.Fatalf("settings %v, want %v", rep.Settings, want)
	}

	// Without the first alias, the second fills the flag.
	delete(env, "DATABASE_URL")
	env["BERTH_API_LISTEN"] = ":9"
	if f, _, err = apply(t, nil, env); err != nil || f.db != "postgres://second/db" || f.listen != ":9" {
		t.Fatalf("second alias: db %q listen %q, %v", f.db, f.listen, err)
	}
	// -flag= on the command line (even empty) beats every alias.
	if f, _, err = apply(t, []string{"-database-url="}, env); err != nil || f.db != "" {
		t.Fatalf("empty flag: db %q, %v", f.db, err)
	}
}

// TestMalformedNamesTheVariable: each refused value is one error naming
// the variable and the flag; a secret's value is never shown.
func TestMalformedNamesTheVariable(t *testing.T) {
	_, _, err := apply(t, nil, map[string]string{"BERTH_MAX_QUEUED": "many", "BERTH_DRAIN_GRACE": "soon", "BERTH_LOG_LEVEL": "debug"})
	if err == nil {
		t.Fatal("malformed values accepted")
	}
	msg := err.Error()
	for _, want := range []string{`BERTH_MAX_QUEUED: invalid value "many" for flag -max-queued`, `BERTH_DRAIN_GRACE: invalid value "soon" for flag -drain-grace`} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if n := strings.Count(msg, "\n") + 1; n != 2 {
		t.Errorf("%d error lines, want 2: %q", n, msg)
	}

	// A secret flag that refuses its value (a bool here) keeps it out of the error.
	sr := testRule
	sr.Secret = []string{"allow-anonymous"}
	fs, _ := newFlags()
	_ = fs.Parse(nil)
	_, err = sr.Apply(fs, func(k string) string {
		if k == "BERTH_ALLOW_ANONYMOUS" {
			return "hunter2"
		}
		return ""
	})
	if err == nil || !strings.Contains(err.Error(), "BERTH_ALLOW_ANONYMOUS") || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("secret error %v: want the variable named and the value hidden", err)
	}
}

// TestReportHidesSecrets: the report, as logged, shows which variable set
// what, with secret flags and URL passwords hidden.
func TestReportHidesSecrets(t *testing.T) {
	_, rep, err := apply(t, nil, map[string]string{
		"BERTH_TOKEN": "s3cret-token", "DATABASE_URL": "postgres://berth:pa55word@db:5432/berth", "BERTH_MAX_QUEUED": "7",
	})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("starting", "env", rep)
	out := buf.String()
	for _, secret := range []string{"s3cret-token", "pa55word"} {
		if strings.Contains(out, secret) {
			t.Errorf("log line shows %q: %s", secret, out)
		}
	}
	for _, want := range []string{"env.BERTH_TOKEN=REDACTED", "env.DATABASE_URL=postgres://REDACTED@db:5432/berth", "env.BERTH_MAX_QUEUED=7"} {
		if !strings.Contains(out, want) {
			t.Errorf("log line lacks %q: %s", want, out)
		}
	}
}

// TestTypos: BERTH_ variables no flag reads are warned about when they are
// one or two edits from one that a flag reads; others are left alone.
func TestTypos(t *testing.T) {
	_, rep, err := apply(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	environ := []string{
		"BERTH_MAX_QUEUE=5",         // a letter missing
		"BERTH_LOG_LEVLE=debug",     // two letters swapped
		"berth_allow_anonymous=1",   // the wrong case
		"BERTH_DRAIN_GRAZE=1s",      // a letter changed
		"BERTH_LISTEN=:1",           // the rule's name where an alias replaces it: not a typo
		"BERTH_MAX_QUEUED=5",        // read
		"BERTH_VERSION=1",           // skipped flag: nothing to match
		"BERTH_TEST_DATABASE_URL=x", // another program's variable
		"BERTH_PG_PORT=54329",       // another program's variable
		"BERTH_TOKENS=x",            // one edit from a 5-letter name
		"BERTH_TOKNES=x",            // two edits from a 5-letter name: too far
		"HOME=/root",
		"MAX_QUEUED=5", // not under the prefix
	}
	got := rep.Typos(environ)
	want := []Typo{
		{"BERTH_DRAIN_GRAZE", "BERTH_DRAIN_GRACE", "drain-grace"},
		{"BERTH_LOG_LEVLE", "BERTH_LOG_LEVEL", "log-level"},
		{"BERTH_MAX_QUEUE", "BERTH_MAX_QUEUED", "max-queued"},
		{"BERTH_TOKENS", "BERTH_TOKEN", "token"},
		{"berth_allow_anonymous", "BERTH_ALLOW_ANONYMOUS", "allow-anonymous"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("typos\n got %v\nwant %v", got, want)
	}
	if s := got[2].String(); s != "environment variable BERTH_MAX_QUEUE is not read; did you mean BERTH_MAX_QUEUED (-max-queued)?" {
		t.Fatalf("warning %q", s)
	}
}

// TestWatchPrefix: a rule whose own names are longer (BERTH_BILLING_)
// still checks the family's variables (BERTH_).
func TestWatchPrefix(t *testing.T) {
	r := Rule{Prefix: "BERTH_BILLING_", Aliases: map[string][]string{"log-level": {"BERTH_LOG_LEVEL"}}, Watch: "BERTH_"}
	fs, f := newFlags()
	_ = fs.Parse(nil)
	rep, err := r.Apply(fs, func(k string) string {
		return map[string]string{"BERTH_BILLING_MAX_QUEUED": "3", "BERTH_MAX_QUEUED": "4"}[k]
	})
	if err != nil || f.queued != 3 {
		t.Fatalf("queued %d, %v", f.queued, err)
	}
	got := rep.Typos([]string{"BERTH_LOG_LEVL=x", "BERTH_BILLING_MAX_QUEUD=1"})
	want := []Typo{{"BERTH_BILLING_MAX_QUEUD", "BERTH_BILLING_MAX_QUEUED", "max-queued"}, {"BERTH_LOG_LEVL", "BERTH_LOG_LEVEL", "log-level"}}
	if !slices.Equal(got, want) {
		t.Fatalf("typos %v, want %v", got, want)
	}
}

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b  string
		limit int
		want  int
	}{
		{"", "", 2, 0}, {"ABC", "ABC", 2, 0}, {"ABC", "ACB", 2, 1}, {"ABC", "AB", 2, 1}, {"AB", "ABC", 2, 1},
		{"ABC", "AXC", 2, 1}, {"LISTEN", "LISTEN_WS", 2, 3}, {"KITTEN", "SITTING", 3, 3}, {"ABCDEF", "ABC", 1, 2},
	} {
		if got := distance(c.a, c.b, c.limit); got != c.want {
			t.Errorf("distance(%q, %q, %d) = %d, want %d", c.a, c.b, c.limit, got, c.want)
		}
	}
}

// TestParse: the command line is parsed before the environment fills the
// rest; -h stays flag.ErrHelp, and an environment error is a config error
// naming its variable.
func TestParse(t *testing.T) {
	fs, f := newFlags()
	fs.SetOutput(io.Discard)
	env := map[string]string{"BERTH_MAX_QUEUED": "7", "BERTH_LOG_LEVEL": "warn"}
	if _, err := testRule.Parse(fs, []string{"-log-level", "debug"}, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if f.level != "debug" || f.queued != 7 {
		t.Errorf("log-level %q max-queued %d, want debug (command line) and 7 (environment)", f.level, f.queued)
	}

	fs, _ = newFlags()
	fs.SetOutput(io.Discard)
	if _, err := testRule.Parse(fs, []string{"-h"}, func(string) string { return "" }); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}

	fs, _ = newFlags()
	_, err := testRule.Parse(fs, nil, func(k string) string { return map[string]string{"BERTH_MAX_QUEUED": "many"}[k] })
	if err == nil || !strings.HasPrefix(err.Error(), "config: BERTH_MAX_QUEUED") {
		t.Errorf("bad variable: %v, want a config error naming BERTH_MAX_QUEUED", err)
	}
}
