package chartcheck

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestGatewaySYNFilter: by default the gateway runs non-root with no
// capability and is told the SYN filter is off (it could not load it);
// with gateway.synFilter.enabled it is told to load it and runs as uid 0
// with CAP_BPF alone (what the kernel needs, verified by
// gateway/cmd/gateway's TestSYNFilterPrivileges), no privilege escalation,
// a read-only root file system and the runtime's seccomp profile, while
// every other workload stays as it was.
func TestGatewaySYNFilter(t *testing.T) {
	h := newHelm(t)
	gateway := func(args ...string) (corev1.PodSpec, corev1.Container) {
		t.Helper()
		objs := render(t, h, append([]string{"--set", "image.tag=0.1.0"}, args...)...)
		dep := find[*appsv1.Deployment](t, objs, "Deployment", "berth-gateway")
		for _, w := range workloads(objs) {
			if w.name == "berth-gateway" {
				continue
			}
			for _, c := range w.pod.Spec.Containers {
				if sc := c.SecurityContext; sc != nil && sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 {
					t.Errorf("%v: %s %s adds capabilities %v", args, w.kind, w.name, sc.Capabilities.Add)
				}
			}
		}
		return dep.Spec.Template.Spec, dep.Spec.Template.Spec.Containers[0]
	}

	ps, c := gateway()
	if v, _ := flagValue(c.Args, "syn-filter"); v != "false" {
		t.Errorf("default: -syn-filter=%q, want false (a non-root pod cannot load it)", v)
	}
	if sc := c.SecurityContext; sc == nil || sc.RunAsUser != nil || sc.Capabilities == nil || len(sc.Capabilities.Add) > 0 {
		t.Errorf("default: container securityContext %+v, want the chart's non-root one", sc)
	}
	if ps.SecurityContext == nil || ps.SecurityContext.RunAsNonRoot == nil || !*ps.SecurityContext.RunAsNonRoot {
		t.Error("default: the gateway pod may run as root")
	}

	ps, c = gateway("--set", "gateway.synFilter.enabled=true")
	if v, _ := flagValue(c.Args, "syn-filter"); v != "true" {
		t.Errorf("synFilter: -syn-filter=%q, want true", v)
	}
	sc := c.SecurityContext
	switch {
	case sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.RunAsNonRoot == nil || *sc.RunAsNonRoot:
		t.Errorf("synFilter: securityContext %+v, want uid 0 (runAsUser 0, runAsNonRoot false)", sc)
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		!slices.Equal(sc.Capabilities.Add, []corev1.Capability{"BPF"}):
		t.Errorf("synFilter: capabilities %+v, want drop [ALL] add [BPF]", sc.Capabilities)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Errorf("synFilter: securityContext %+v, want no privilege escalation and a read-only root", sc)
	case sc.Privileged != nil && *sc.Privileged:
		t.Error("synFilter: privileged")
	}
	if ps.SecurityContext == nil || ps.SecurityContext.SeccompProfile == nil || ps.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("synFilter: pod seccomp %+v, want RuntimeDefault (it allows bpf() to CAP_BPF)", ps.SecurityContext)
	}
}

// TestGatewayProxyProtocol: gateway.proxyProtocolFrom becomes
// -proxy-protocol-from, and nothing is passed without it.
func TestGatewayProxyProtocol(t *testing.T) {
	h := newHelm(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, ""},
		{[]string{"--set", "gateway.proxyProtocolFrom=10.0.0.0/8\\,192.168.0.0/16"}, "10.0.0.0/8,192.168.0.0/16"},
		{[]string{"--set", "gateway.proxyProtocolFrom=2001:db8::/32"}, "2001:db8::/32"},
	} {
		objs := render(t, h, append([]string{"--set", "image.tag=0.1.0"}, tc.args...)...)
		args := find[*appsv1.Deployment](t, objs, "Deployment", "berth-gateway").Spec.Template.Spec.Containers[0].Args
		got, ok := flagValue(args, "proxy-protocol-from")
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("%v: -proxy-protocol-from=%q (given: %v), want %q", tc.args, got, ok, tc.want)
		}
	}
}
