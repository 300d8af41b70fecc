package e2e

import (
	"bufio"
	"os/exec"
	"strings"
	"testing"

	"berth.dev/e2e/internal/stack"
)

// berthctl demo is what `make run` uses to hand a user a working
// credential: the first run signs up, later runs log in to the same
// account; both print a credential that connects and is confined to demo/#.
func TestBerthctlDemoGivesAWorkingCredential(t *testing.T) {
	t.Parallel()
	s := stack.New(t, bins, stack.Options{})
	var tenants []string
	for run := range 2 {
		out, err := exec.Command(bins.Berthctl, "demo", "-api", s.API).CombinedOutput()
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
	if tenants[0] != tenants[1] {
		t.Fatalf("second run made a new tenant %s (first %s)", tenants[1], tenants[0])
	}
}
