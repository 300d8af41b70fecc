package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

func runArgs(args ...string) (int, string, string) {
	var o, e bytes.Buffer
	code := run(context.Background(), args, &env{stdin: strings.NewReader(""), stdout: &o, stderr: &e, getenv: func(k string) string {
		if k == "BERTH_CONFIG" {
			return "/nonexistent/berth/config.json"
		}
		return ""
	}})
	return code, o.String(), e.String()
}

// TestUsageAndHelp: help succeeds and documents the exit codes; every
// command answers -h with an example and exit 0; bad command lines exit 2.
func TestUsageAndHelp(t *testing.T) {
	code, out, _ := runArgs("help")
	if code != 0 || !strings.Contains(out, "Exit codes") || !strings.Contains(out, "credentials") {
		t.Fatalf("help: %d\n%s", code, out)
	}
	for _, c := range commands() {
		args := []string{c.name, "-h"}
		for _, cs := range subcommandNames() {
			if cs[0] == c.name {
				args = []string{c.name, strings.Fields(cs[1])[0], "-h"}
			}
		}
		code, _, errOut := runArgs(args...)
		if code != 0 || !strings.Contains(errOut, "Example:") || !strings.Contains(errOut, "berthctl "+c.name) {
			t.Errorf("%v: exit %d\n%s", args, code, errOut)
		}
	}
	for _, args := range [][]string{
		{}, {"nosuch"}, {"pub", "--bogus"}, {"pub", "-m", "x"}, {"credentials", "create"},
		{"credentials", "create", "x"}, {"credentials", "frob"}, {"quotas", "set", "max_connections"},
		{"quotas", "set", "max_connections=many"}, {"usage", "--from", "yesterday"}, {"completion", "tcsh"},
	} {
		if code, _, _ := runArgs(args...); code != exitUsage {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	if code, _, _ := runArgs("credentials"); code != exitAuth {
		t.Errorf("credentials without a login: exit %d, want 3", code)
	}
}

// TestFlagsAfterArguments: positional arguments and flags mix, repeated
// and comma-separated list flags add up.
func TestFlagsAfterArguments(t *testing.T) {
	f := newFlags(&env{stderr: &bytes.Buffer{}}, "x", "", "").withTenant()
	var pub listFlag
	f.Var(&pub, "pub", "")
	pos, err := f.parse([]string{"--pub", "a/#", "name", "--tenant", "home", "--pub", "b,c"}, 1, 1)
	if err != nil || len(pos) != 1 || pos[0] != "name" || *f.tenant != "home" || strings.Join(pub, " ") != "a/# b c" {
		t.Fatalf("pos %q tenant %q pub %q err %v", pos, *f.tenant, pub, err)
	}
}

func TestTimeArgAndAssignments(t *testing.T) {
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]string{"24h": "2026-03-01T12:00:00Z", "2026-01-01T00:00:00+01:00": "2025-12-31T23:00:00Z"} {
		if got, err := timeArg(in, now); err != nil || got != want {
			t.Errorf("timeArg(%q) = %q %v, want %q", in, got, err, want)
		}
	}
	m, err := parseAssignments([]string{"max_connections=50", "max_msgs_per_sec=7"})
	if err != nil || m["max_connections"] != 50 || m["max_msgs_per_sec"] != 7 {
		t.Fatalf("%v %v", m, err)
	}
}

// TestPrintMessage: JSON payloads are indented, text as is, binary as hex.
func TestPrintMessage(t *testing.T) {
	var b bytes.Buffer
	printMessage(&b, 1, &paho.Publish{Topic: "s/1", QoS: 1, Payload: []byte(`{"t":21.5,"u":"C"}`)}, false)
	printMessage(&b, 2, &paho.Publish{Topic: "s/2", Retain: true, Payload: []byte("hello")}, false)
	printMessage(&b, 3, &paho.Publish{Topic: "s/3", Payload: []byte{0xff, 0x00}}, false)
	printMessage(&b, 4, &paho.Publish{Topic: "s/4", Payload: []byte(`{"a":1}`)}, true)
	want := "[#1] s/1 (qos 1)\n{\n  \"t\": 21.5,\n  \"u\": \"C\"\n}\n" +
		"[#2] s/2 (qos 0, retained)\nhello\n" +
		"[#3] s/3 (qos 0)\n(2 bytes, not UTF-8: ff00)\n" +
		"{\"a\":1}\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// TestWaterfall: children are indented under their parent in start order,
// bars sit on the trace's time axis.
func TestWaterfall(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	root := "a"
	got := waterfall([]span{
		{ID: "c", Parent: &root, Name: "deliver", Start: t0.Add(5 * time.Millisecond), DurationNS: int64(5 * time.Millisecond)},
		{ID: "a", Name: "mqtt.publish", Start: t0, DurationNS: int64(10 * time.Millisecond)},
		{ID: "b", Parent: &root, Name: "route", Start: t0, DurationNS: int64(5 * time.Millisecond)},
	}, 10)
	want := []string{
		"SPAN          AT    DURATION  TIMELINE 10ms",
		"mqtt.publish  +0s   10ms      |██████████|",
		"  route       +0s   5ms       |█████     |",
		"  deliver     +5ms  5ms       |     █████|",
	}
	if strings.TrimRight(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", got, strings.Join(want, "\n"))
	}
}

// TestCompletionBash: the script is valid bash and completes the commands.
func TestCompletionBash(t *testing.T) {
	code, out, _ := runArgs("completion", "bash")
	if code != 0 || !strings.Contains(out, "complete -F _berthctl berthctl") || !strings.Contains(out, "credentials) words=\"list create token revoke\"") {
		t.Fatalf("exit %d\n%s", code, out)
	}
	cmd := exec.Command("bash", "-c", out+`
COMP_WORDS=(berthctl cre); COMP_CWORD=1; _berthctl; echo "${COMPREPLY[@]}"
COMP_WORDS=(berthctl credentials t); COMP_CWORD=2; _berthctl; echo "${COMPREPLY[@]}"`)
	got, err := cmd.Output()
	if err != nil || string(got) != "credentials\ntoken\n" {
		t.Fatalf("completions %q %v", got, err)
	}
}

// TestCompletionZsh: the script is valid zsh, registers itself with
// compdef when sourced, and offers commands, subcommands and each
// command's own flags (_describe and compadd stand in for the completion
// system, which needs an interactive shell, and print what they are given).
func TestCompletionZsh(t *testing.T) {
	code, out, _ := runArgs("completion", "zsh")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	cmd := exec.Command("zsh", "-f", "-c", `
compdef() { print "compdef $*" }
_describe() { print -rl -- "${(@P)2}" }
compadd() { print -rl -- "${(@P)2}" }
source /dev/stdin
print -- "-- 1"; words=(berthctl cre); CURRENT=2; _berthctl
print -- "-- 2"; words=(berthctl credentials t); CURRENT=3; _berthctl
print -- "-- 3"; words=(berthctl pub -t x --q); CURRENT=5; _berthctl
print -- "-- 4"; words=(berthctl credentials create laptop --p); CURRENT=5; _berthctl
print -- "-- 5"; words=(berthctl tenants --l); CURRENT=3; _berthctl`)
	cmd.Stdin = strings.NewReader(out)
	got, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("zsh: %v\n%s", err, got)
	}
	parts := strings.Split(string(got), "-- ")
	for i, want := range []string{
		"compdef _berthctl berthctl\n",
		"credentials:list, create, token, revoke device credentials\n",
		"list\ncreate\ntoken\nrevoke\n",
		"--qos:QoS 0, 1 or 2\n",
		"--pub:topic filter the credential may publish to",
		"--limit:show at most this many items",
	} {
		if i >= len(parts) || !strings.Contains(parts[i], want) {
			t.Errorf("part %d lacks %q:\n%s", i, want, got)
		}
	}
	if strings.Contains(parts[3], "--pub:") || strings.Contains(parts[4], "--qos:") {
		t.Errorf("flags of one command offered for another:\n%s", got)
	}
}

// TestCompletionFish: fish completes commands, subcommands and the flags
// of the command on the line (complete -C asks fish as the shell would).
func TestCompletionFish(t *testing.T) {
	code, out, _ := runArgs("completion", "fish")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	script := filepath.Join(t.TempDir(), "berthctl.fish")
	if err := os.WriteFile(script, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	for line, want := range map[string][]string{
		"berthctl cre":                      {"credentials\tlist, create, token, revoke device credentials"},
		"berthctl credentials t":            {"token"},
		"berthctl pub --q":                  {"--qos\tQoS 0, 1 or 2"},
		"berthctl pub -":                    {"-t\ttopic (required)", "-m\tmessage payload", "--retain"},
		"berthctl credentials create x --p": {"--pub\t"},
		"berthctl tenants --":               {"--all\t", "--limit\t"},
		"berthctl tenants create --":        {"--slug\t", "--plan\t"},
		"berthctl completion ":              {"bash", "zsh", "fish"},
		"berthctl login --password":         {"--password-stdin\t"},
	} {
		got, err := exec.Command("fish", "--no-config", "-c", "source "+script+"; complete -C '"+line+"'").CombinedOutput()
		if err != nil {
			t.Fatalf("fish: %v\n%s", err, got)
		}
		for _, w := range want {
			if !strings.Contains(string(got), w) {
				t.Errorf("%q: completions lack %q:\n%s", line, w, got)
			}
		}
	}
	got, _ := exec.Command("fish", "--no-config", "-c", "source "+script+"; complete -C 'berthctl tenants create --'").CombinedOutput()
	if strings.Contains(string(got), "--limit") {
		t.Errorf("tenants create offered the listing's --limit:\n%s", got)
	}
}
