package chartcheck

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Berth's images are <registry>/berth-<process>:<tag>; the bundled trial
// images are pinned upstream tags.
var (
	berthImage   = regexp.MustCompile(`^([a-z0-9.:-]+(/[a-z0-9._-]+)*/)?berth-(api|gateway|node|billing|migrate):[A-Za-z0-9_][A-Za-z0-9_.-]*$`)
	bundledImage = regexp.MustCompile(`^docker\.io/library/(postgres|redis):[0-9][A-Za-z0-9_.-]*$`)
)

// TestPolicyContainers holds every container of every values set to the
// rules: pinned images, resources, probes where a port is served, non-root,
// read-only root filesystem, no privilege escalation, no capabilities (but
// CAP_BPF, as uid 0, for the gateway with gateway.synFilter).
func TestPolicyContainers(t *testing.T) {
	h := newHelm(t)
	for _, rc := range renderCases() {
		t.Run(rc.name, func(t *testing.T) {
			ws := workloads(render(t, h, rc.args...))
			if len(ws) == 0 {
				t.Fatal("no workloads rendered")
			}
			for _, w := range ws {
				ps := w.pod.Spec
				if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
					t.Errorf("%s %s: the service account token is mounted (no Berth process talks to the Kubernetes API)", w.kind, w.name)
				}
				if len(ps.InitContainers) > 0 {
					t.Errorf("%s %s: init containers are not checked here; add them to the policy first", w.kind, w.name)
				}
				for _, c := range ps.Containers {
					checkContainer(t, w, ps, c, rc.bundled)
				}
			}
		})
	}
}

func checkContainer(t *testing.T, w workload, ps corev1.PodSpec, c corev1.Container, bundled bool) {
	t.Helper()
	where := w.kind + " " + w.name + " container " + c.Name
	switch {
	case berthImage.MatchString(c.Image):
	case bundled && bundledImage.MatchString(c.Image):
	default:
		t.Errorf("%s: image %q is not a pinned Berth (or bundled trial) image", where, c.Image)
	}
	if strings.HasSuffix(c.Image, ":latest") || !strings.Contains(c.Image[strings.LastIndex(c.Image, "/")+1:], ":") {
		t.Errorf("%s: image %q is not pinned to a tag", where, c.Image)
	}
	r := c.Resources
	if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Memory().IsZero() {
		t.Errorf("%s: resources %v: want cpu and memory requests and a memory limit", where, r)
	}
	if len(c.Ports) > 0 && (c.ReadinessProbe == nil || c.LivenessProbe == nil) {
		t.Errorf("%s: serves ports %v but lacks a readiness or liveness probe", where, c.Ports)
	}
	if len(c.Ports) == 0 && w.name != "berth-billing" && w.kind != "Job" {
		t.Errorf("%s: serves no port, so it has no probe: only the billing worker and the migration Job may", where)
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: root filesystem is writable", where)
	}
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: privilege escalation allowed", where)
	}
	if w.name == "berth-gateway" && slices.Contains(c.Args, "-syn-filter=true") {
		// The one exception (gateway.synFilter): loading the kernel SYN
		// filter needs CAP_BPF, which Kubernetes grants to uid 0 only.
		if sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") ||
			!slices.Equal(sc.Capabilities.Add, []corev1.Capability{"BPF"}) || sc.RunAsUser == nil || *sc.RunAsUser != 0 {
			t.Errorf("%s: with -syn-filter=true, want uid 0 with every capability dropped but BPF", where)
		}
	} else {
		if sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
			t.Errorf("%s: capabilities not all dropped", where)
		}
		nonRoot := ps.SecurityContext != nil && ps.SecurityContext.RunAsNonRoot != nil && *ps.SecurityContext.RunAsNonRoot
		if sc != nil && sc.RunAsNonRoot != nil {
			nonRoot = *sc.RunAsNonRoot
		}
		if !nonRoot {
			t.Errorf("%s: may run as root (runAsNonRoot unset)", where)
		}
	}
	if sc != nil && sc.Privileged != nil && *sc.Privileged {
		t.Errorf("%s: privileged", where)
	}
}

// secretFlags name the command-line flags that would carry a secret.
var secretFlags = []string{"-proxy-secret", "-node-token", "-peer-secret", "-key-encryption-key", "-stripe-key",
	"-stripe-webhook-secret", "-password", "-database-url", "-redis-url", "-redis-password", "-redis-sentinel-password"}

// secretEnv matches the environment variables that carry secrets.
var secretEnv = regexp.MustCompile(`SECRET|TOKEN|KEY|PASSWORD|^DATABASE_URL$|^REDIS_URL$`)

// TestPolicySecrets: no Secret is rendered (secrets are references), every
// secret-carrying variable comes from a secretKeyRef (or, for the bundled
// trial URLs, is built from one by Kubernetes' $(VAR) expansion), and no
// secret is ever a flag.
func TestPolicySecrets(t *testing.T) {
	h := newHelm(t)
	expanded := regexp.MustCompile(`^(postgres|redis)://[a-z]*:\$\(BERTH_BUNDLED_(POSTGRES|REDIS)_PASSWORD\)@`)
	for _, rc := range renderCases() {
		t.Run(rc.name, func(t *testing.T) {
			objs := render(t, h, rc.args...)
			for _, o := range objs {
				if o.Kind == "Secret" || o.Kind == "ConfigMap" {
					t.Errorf("%s %s rendered: secrets and settings come from existing Secrets and flags", o.Kind, o.Name)
				}
			}
			for _, w := range workloads(objs) {
				for _, c := range w.pod.Spec.Containers {
					for _, e := range c.Env {
						if !secretEnv.MatchString(e.Name) {
							continue
						}
						fromSecret := e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil
						if !fromSecret && !(rc.bundled && expanded.MatchString(e.Value)) {
							t.Errorf("%s %s: env %s is not read from a Secret (value %q)", w.kind, w.name, e.Name, e.Value)
						}
					}
					for _, a := range append(slices.Clone(c.Command), c.Args...) {
						for _, f := range secretFlags {
							if a == f || strings.HasPrefix(a, f+"=") {
								t.Errorf("%s %s: secret flag on the command line: %s", w.kind, w.name, a)
							}
						}
					}
					if len(c.EnvFrom) > 0 {
						t.Errorf("%s %s: envFrom imports a whole object; name each variable", w.kind, w.name)
					}
				}
			}
		})
	}
}

// TestPolicyDisruptionBudgets: nodes, gateways and the API each have a PDB
// that selects exactly their pods.
func TestPolicyDisruptionBudgets(t *testing.T) {
	h := newHelm(t)
	for _, rc := range renderCases() {
		t.Run(rc.name, func(t *testing.T) {
			objs := render(t, h, rc.args...)
			pods := map[string]corev1.PodTemplateSpec{}
			for _, w := range workloads(objs) {
				pods[w.name] = w.pod
			}
			names := []string{"berth-node", "berth-gateway", "berth-api"}
			if rc.colocated { // the gateways are in the node pods, under the nodes' PDB
				names = slices.DeleteFunc(names, func(n string) bool { return n == "berth-gateway" })
			}
			for _, name := range names {
				pdb := find[*policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget", name)
				if pdb.Spec.MaxUnavailable == nil && pdb.Spec.MinAvailable == nil {
					t.Errorf("PDB %s bounds nothing", name)
				}
				for podName, pod := range pods {
					sel := mustSelector(t, pdb.Spec.Selector.MatchLabels)
					if got := sel.Matches(labels.Set(pod.Labels)); got != (podName == name) {
						t.Errorf("PDB %s selects %s: %v", name, podName, got)
					}
				}
			}
		})
	}
}

// TestPolicyNetwork: ingress is denied to every pod of the release but for
// the paths the design names: devices to the gateways' listeners, gateways
// to the nodes' MQTT port, the API (and metrics scrapers) to the nodes'
// admin port, and, when they replicate, nodes to the nodes' peer port.
func TestPolicyNetwork(t *testing.T) {
	h := newHelm(t)
	for _, rc := range renderCases() {
		t.Run(rc.name, func(t *testing.T) {
			objs := render(t, h, rc.args...)
			deny := find[*networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", "berth-default-deny")
			if len(deny.Spec.Ingress) != 0 || !slices.Contains(deny.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
				t.Errorf("default-deny allows ingress: %+v", deny.Spec)
			}
			sel := mustSelector(t, deny.Spec.PodSelector.MatchLabels)
			pods := map[string]labels.Set{}
			for _, w := range workloads(objs) {
				pods[w.name] = w.pod.Labels
				if !sel.Matches(labels.Set(w.pod.Labels)) {
					t.Errorf("default-deny does not cover %s %s", w.kind, w.name)
				}
			}

			node := find[*networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", "berth-node")
			if !mustSelector(t, node.Spec.PodSelector.MatchLabels).Matches(pods["berth-node"]) {
				t.Fatal("the node policy does not select the nodes")
			}
			reach := map[string][]string{} // port -> workloads allowed
			for _, rule := range node.Spec.Ingress {
				if len(rule.From) == 0 {
					t.Errorf("node ingress rule open to everyone: %+v", rule)
				}
				for _, p := range rule.Ports {
					for _, peer := range rule.From {
						if peer.PodSelector == nil || peer.NamespaceSelector != nil || peer.IPBlock != nil {
							if p.Port.String() != "admin" {
								t.Errorf("node port %s open to a peer outside the release: %+v", p.Port.String(), peer)
							}
							continue // metrics scrapers, on the admin port only
						}
						ps := mustSelector(t, peer.PodSelector.MatchLabels)
						for name, l := range pods {
							if ps.Matches(l) {
								reach[p.Port.String()] = append(reach[p.Port.String()], name)
							}
						}
					}
				}
			}
			for _, names := range reach {
				slices.Sort(names)
			}
			gateways := "berth-gateway"
			if rc.colocated {
				gateways = "berth-node" // a gateway in each node pod
			}
			if got := reach["mqtt-internal"]; !slices.Equal(got, []string{gateways}) {
				t.Errorf("nodes' MQTT port reachable from %v, want only the gateways (%s)", got, gateways)
			}
			if got := reach["admin"]; !slices.Equal(got, []string{"berth-api"}) {
				t.Errorf("nodes' admin port reachable from %v, want only the API", got)
			}
			wantPorts := 2
			if replicated(t, objs) {
				wantPorts = 3
				if got := reach["peer"]; !slices.Equal(got, []string{"berth-node"}) {
					t.Errorf("nodes' peer port reachable from %v, want only the nodes", got)
				}
			}
			if len(reach) != wantPorts {
				t.Errorf("node ports opened: %v, want mqtt-internal, admin and (replicating) peer", reach)
			}

			gw := find[*networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", "berth-gateway")
			if !mustSelector(t, gw.Spec.PodSelector.MatchLabels).Matches(pods[gateways]) {
				t.Errorf("the gateway policy does not select the gateways (%s)", gateways)
			}
			open := 0
			for _, rule := range gw.Spec.Ingress {
				if len(rule.From) > 0 {
					continue
				}
				for _, p := range rule.Ports {
					open++
					if !slices.Contains([]string{"mqtt", "mqtts", "ws", "wss", "dns-udp", "dns-tcp"}, p.Port.String()) {
						t.Errorf("gateway port %s open to everyone", p.Port.String())
					}
				}
			}
			if open == 0 {
				t.Error("devices cannot reach the gateways")
			}
		})
	}
}

func mustSelector(t *testing.T, m map[string]string) labels.Selector {
	t.Helper()
	if len(m) == 0 {
		t.Fatal("empty selector: it would select everything")
	}
	return labels.SelectorFromSet(m)
}
