package chartcheck

import (
	"testing"
)

// TestRotationValues: the previous proxy secret and node token of a
// rotation (docs/operations.md, "Rotate secrets") reach the nodes, and only
// the nodes, from a Secret reference; by default no workload gets them.
func TestRotationValues(t *testing.T) {
	h := newHelm(t)
	previous := func(objs []Object) map[string]string { // "workload/VAR" -> "secret/key"
		got := map[string]string{}
		for _, w := range workloads(objs) {
			for _, c := range append(w.pod.Spec.InitContainers, w.pod.Spec.Containers...) {
				for _, e := range c.Env {
					if e.Name != "BERTH_PROXY_SECRET_PREVIOUS" && e.Name != "BERTH_NODE_TOKEN_PREVIOUS" {
						continue
					}
					ref := ""
					if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
						ref = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
					}
					got[w.name+"/"+e.Name] = ref
				}
			}
		}
		return got
	}
	if got := previous(render(t, h, "-f", prodValues)); len(got) != 0 {
		t.Errorf("default values render previous secrets: %v", got)
	}
	got := previous(render(t, h, "-f", prodValues,
		"--set", "secrets.proxySecretPrevious.name=berth-internal", "--set", "secrets.proxySecretPrevious.key=proxy-secret-new",
		"--set", "secrets.nodeTokenPrevious.name=berth-internal", "--set", "secrets.nodeTokenPrevious.key=node-token-new"))
	want := map[string]string{
		"berth-node/BERTH_PROXY_SECRET_PREVIOUS": "berth-internal/proxy-secret-new",
		"berth-node/BERTH_NODE_TOKEN_PREVIOUS":   "berth-internal/node-token-new",
	}
	if len(got) != len(want) {
		t.Errorf("previous secrets rendered %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	// Step 3 of the procedure: the previous value set to null is gone.
	if got := previous(render(t, h, "-f", prodValues,
		"--set", "secrets.proxySecretPrevious.name=berth-internal", "--set", "secrets.proxySecretPrevious.key=proxy-secret-new",
		"--set", "secrets.proxySecretPrevious=null")); len(got) != 0 {
		t.Errorf("secrets.proxySecretPrevious=null still renders %v", got)
	}
	err := renderErr(t, h, "-f", prodValues, "--set", "secrets.nodeTokenPrevious.name=berth-internal")
	t.Logf("a previous token without its key: %v", err)
}
