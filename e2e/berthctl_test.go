package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/e2e/internal/stack"
)

// berthctl demo is what `make run` uses to hand a user a working
// credential: the first run signs up, later runs reuse the API key kept in
// the config file and the same credential (a new token); both print a
// credential that connects and is confined to demo/#.
func TestBerthctlDemoGivesAWorkingCredential(t *testing.T) {
	t.Parallel()
	s := stack.New(t, bins, stack.Options{})
	b := newBerthctl(t, s.API)
	var tenants, keys, users []string
	for run := range 2 {
		out, err := b.cmd("demo", "-api", s.API).CombinedOutput()
		if err != nil {
			t.Fatalf("run %d: %v\n%s", run, err, out)
		}
		env := map[string]string{}
		sc := bufio.NewScanner(strings.NewReader(string(out)))
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), "=")
			env[k] = strings.Trim(v, "'")
		}
		for _, k := range []string{"BERTH_API_URL", "BERTH_API_KEY", "BERTH_TENANT_ID", "BERTH_MQTT_ADDR", "BERTH_MQTT_USERNAME", "BERTH_MQTT_PASSWORD"} {
			if env[k] == "" {
				t.Fatalf("run %d: %s missing from\n%s", run, k, out)
			}
		}
		tenants = append(tenants, env["BERTH_TENANT_ID"])
		keys = append(keys, env["BERTH_API_KEY"])
		users = append(users, env["BERTH_MQTT_USERNAME"])
		c := stack.Credential{Username: env["BERTH_MQTT_USERNAME"], Password: env["BERTH_MQTT_PASSWORD"]}
		cl := mustConnectV5(t, env["BERTH_MQTT_ADDR"], c, "demo-"+string(rune('a'+run)))
		cl.subscribe(t, "demo/#")
		if _, err := cl.Publish(t.Context(), pahoPublish("demo/hi", "hello")); err != nil {
			t.Fatal(err)
		}
		cl.expect(t, "demo/hi=hello")
		if r, _ := cl.Publish(t.Context(), pahoPublish("elsewhere", "x")); r == nil || r.ReasonCode != 0x87 {
			t.Fatalf("run %d: publish outside demo/#: %+v, want 0x87", run, r)
		}
	}
	if tenants[0] != tenants[1] || keys[0] != keys[1] || users[0] != users[1] {
		t.Fatalf("second run made a new tenant, API key or credential: tenants %v, keys equal %v, credentials %v", tenants, keys[0] == keys[1], users)
	}
}

// berthctlEnv runs the berthctl binary with its own config dir and API.
type berthctlEnv struct {
	t   *testing.T
	env []string
}

func newBerthctl(t *testing.T, api string) *berthctlEnv {
	home := t.TempDir()
	return &berthctlEnv{t: t, env: append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "BERTH_API_URL="+api, "BERTH_CONFIG=")}
}

func (b *berthctlEnv) cmd(args ...string) *exec.Cmd {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	b.t.Cleanup(cancel)
	c := exec.CommandContext(ctx, bins.Berthctl, args...)
	c.Env = b.env
	return c
}

// run returns the exit code, stdout and stderr.
func (b *berthctlEnv) run(args ...string) (int, string, string) {
	b.t.Helper()
	var o, e strings.Builder
	c := b.cmd(args...)
	c.Stdout, c.Stderr = &o, &e
	err := c.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		b.t.Fatalf("berthctl %v: %v", args, err)
	}
	return c.ProcessState.ExitCode(), o.String(), e.String()
}

func (b *berthctlEnv) ok(args ...string) string {
	b.t.Helper()
	code, out, errOut := b.run(args...)
	if code != 0 {
		b.t.Fatalf("berthctl %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// roundTrip starts `sub --count 1` with extra args, waits for its
// subscription, publishes payload with `pub` and returns sub's output.
func (b *berthctlEnv) roundTrip(topic, payload string, extra ...string) string {
	b.t.Helper()
	sub := b.cmd(append([]string{"sub", "-t", "demo/#", "--count", "1", "--qos", "1"}, extra...)...)
	var out strings.Builder
	sub.Stdout = &out
	stderr, err := sub.StderrPipe()
	if err != nil {
		b.t.Fatal(err)
	}
	if err := sub.Start(); err != nil {
		b.t.Fatal(err)
	}
	subscribed := make(chan string, 1)
	go func() {
		var seen strings.Builder
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			seen.WriteString(sc.Text() + "\n")
			if strings.HasPrefix(sc.Text(), "Subscribed to demo/#") {
				subscribed <- ""
				_, _ = io.Copy(io.Discard, stderr)
				return
			}
		}
		subscribed <- seen.String()
	}()
	select {
	case failed := <-subscribed:
		if failed != "" {
			_ = sub.Wait()
			b.t.Fatalf("sub ended before subscribing:\n%s", failed)
		}
	case <-time.After(30 * time.Second):
		b.t.Fatal("sub did not subscribe within 30 s")
	}
	b.ok(append([]string{"pub", "-t", topic, "-m", payload, "--qos", "1"}, extra...)...)
	if err := sub.Wait(); err != nil {
		b.t.Fatalf("sub: %v\n%s", err, out.String())
	}
	return out.String()
}

// A newcomer's path with berthctl alone: signup (which logs in), tenants,
// a credential, and a message from pub to sub, first with the credential,
// then with the one pub and sub make for themselves (once); --json parses;
// the main refusals have their exit codes.
func TestBerthctlSignupToPubSub(t *testing.T) {
	t.Parallel()
	s := stack.New(t, bins, stack.Options{})
	b := newBerthctl(t, s.API)

	b.ok("signup", "--email", "new@example.com", "--password", "a long enough password")
	var tenants struct {
		Items []struct{ ID, Slug string } `json:"items"`
	}
	if err := json.Unmarshal([]byte(b.ok("tenants", "--json")), &tenants); err != nil || len(tenants.Items) != 1 {
		t.Fatalf("tenants --json: %+v %v", tenants, err)
	}
	var cred stack.Credential
	if err := json.Unmarshal([]byte(b.ok("credentials", "create", "laptop", "--pub", "demo/#", "--sub", "demo/#", "--json")), &cred); err != nil || cred.Password == "" {
		t.Fatalf("credentials create --json: %+v %v", cred, err)
	}

	out := b.roundTrip("demo/a", `{"temp":21.5}`, "--username", cred.Username, "--password", cred.Password)
	if want := "[#1] demo/a (qos 1)\n{\n  \"temp\": 21.5\n}\n"; out != want {
		t.Fatalf("sub printed %q, want %q", out, want)
	}
	for run := range 2 {
		if out := b.roundTrip("demo/b", "hello", "--tenant", tenants.Items[0].Slug); !strings.Contains(out, "demo/b") || !strings.Contains(out, "hello") {
			t.Fatalf("self-credential run %d: sub printed %q", run, out)
		}
	}
	var creds struct {
		Items []struct{ Name string } `json:"items"`
	}
	if err := json.Unmarshal([]byte(b.ok("credentials", "--json")), &creds); err != nil {
		t.Fatal(err)
	}
	self := 0
	for _, c := range creds.Items {
		if strings.HasPrefix(c.Name, "berthctl-") {
			self++
		}
	}
	if self != 1 || len(creds.Items) != 2 {
		t.Fatalf("credentials after two self-credential runs: %+v, want laptop and one berthctl-HOST", creds.Items)
	}

	if code, _, errOut := b.run("pub", "-t", "demo/a", "-m", "x", "--username", cred.Username, "--password", "not-a-token"); code != 3 {
		t.Fatalf("pub with a bad password: exit %d %s, want 3", code, errOut)
	}
	// A refusal says the reason code's name and what to do about it.
	if code, _, errOut := b.run("pub", "-t", "elsewhere/a", "-m", "x", "--qos", "1", "--username", cred.Username, "--password", cred.Password); code != 1 ||
		!strings.Contains(errOut, "not authorized (MQTT reason code 0x87)") || !strings.Contains(errOut, "--pub") {
		t.Fatalf("pub outside the credential's filters: exit %d %q, want 1 naming 0x87 and --pub", code, errOut)
	}
	if code, _, errOut := b.run("sub", "-t", "elsewhere/#", "--username", cred.Username, "--password", cred.Password); code != 1 ||
		!strings.Contains(errOut, "not authorized (MQTT reason code 0x87)") || !strings.Contains(errOut, "--sub") {
		t.Fatalf("sub outside the credential's filters: exit %d %q, want 1 naming 0x87 and --sub", code, errOut)
	}
	if code, _, errOut := b.run("credentials", "token", "crd_unknown"); code != 4 {
		t.Fatalf("token for an unknown credential: exit %d %s, want 4", code, errOut)
	}
	if code, _, errOut := b.run("sub", "--nosuchflag"); code != 2 {
		t.Fatalf("bad flag: exit %d %s, want 2", code, errOut)
	}
	if code, _, errOut := newBerthctl(t, s.API).run("login", "--email", "new@example.com", "--password", "the wrong password"); code != 3 {
		t.Fatalf("wrong password: exit %d %s, want 3", code, errOut)
	}
}

// The tenant commands against the real stack: quotas get/set, topic rules
// create/list/delete, sessions list/kick (the kicked sub exits 1), and the
// read-only listings' --json.
func TestBerthctlTenantCommands(t *testing.T) {
	t.Parallel()
	s := stack.New(t, bins, stack.Options{})
	b := newBerthctl(t, s.API)
	b.ok("signup", "--email", "ops@example.com", "--password", "a long enough password")

	var q struct {
		Quotas map[string]int64 `json:"quotas"`
	}
	if err := json.Unmarshal([]byte(b.ok("quotas", "set", "max_connections=5", "--json")), &q); err != nil || q.Quotas["max_connections"] != 5 {
		t.Fatalf("quotas set --json: %+v %v", q, err)
	}
	if out := b.ok("quotas"); !strings.Contains(out, "max_connections") {
		t.Fatalf("quotas:\n%s", out)
	}
	if code, _, errOut := b.run("quotas", "set", "max_connections=0"); code != 1 || !strings.Contains(errOut, "max_connections") {
		t.Fatalf("quotas set 0: exit %d %q, want 1 naming the field", code, errOut)
	}

	var rule struct{ ID, Filter string }
	if err := json.Unmarshal([]byte(b.ok("topics", "create", "--filter", "logs/#", "--retained=false", "--json")), &rule); err != nil || rule.ID == "" {
		t.Fatalf("topics create --json: %+v %v", rule, err)
	}
	if out := b.ok("topics"); !strings.Contains(out, rule.ID) || !strings.Contains(out, "logs/#") {
		t.Fatalf("topics:\n%s", out)
	}
	b.ok("topics", "delete", rule.ID)
	if code, _, _ := b.run("topics", "delete", rule.ID); code != 4 {
		t.Fatalf("deleting the rule again: exit %d, want 4", code)
	}

	sub := b.cmd("sub", "-t", "x/#", "--client-id", "kick-me")
	stderr, err := sub.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "Subscribed") {
		t.Fatalf("sub: %q", sc.Text())
	}
	var sessions struct {
		Items []struct {
			ClientID  string `json:"client_id"`
			Connected bool   `json:"connected"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(b.ok("sessions", "--json", "--state", "connected")), &sessions); err != nil || len(sessions.Items) != 1 || sessions.Items[0].ClientID != "kick-me" {
		t.Fatalf("sessions --json: %+v %v", sessions, err)
	}
	b.ok("sessions", "kick", "kick-me")
	rest, _ := io.ReadAll(stderr)
	if err := sub.Wait(); sub.ProcessState.ExitCode() != 1 || !strings.Contains(string(rest), "administrative action (MQTT reason code 0x98)") {
		t.Fatalf("kicked sub: %v %q, want exit 1 naming 0x98", err, rest)
	}
	if code, _, errOut := b.run("sessions", "kick", "kick-me"); code != 4 || !strings.Contains(errOut, "no session with this client id") {
		t.Fatalf("kicking it again: exit %d %q, want 4 saying what is missing", code, errOut)
	}

	for _, args := range [][]string{{"usage", "--json", "--step", "1h"}, {"latency", "--json"}, {"traces", "--json"}, {"retained", "--json"}} {
		var v map[string]any
		if err := json.Unmarshal([]byte(b.ok(args...)), &v); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if out := b.ok(args[0]); !strings.Contains(strings.SplitN(out, "\n", 2)[0], "  ") {
			t.Fatalf("%s: no table header:\n%s", args[0], out)
		}
	}
}
