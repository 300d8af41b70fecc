package chartcheck

import (
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// handoffDir is where the node's handoff socket and the gateway's
// -handoff-dir meet (bench/README.md, "Deployment").
const handoffDir = "/run/berth"

// podGateway returns the gateway container of the node pods, if any.
func podGateway(sts *appsv1.StatefulSet) (corev1.Container, bool) {
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.Name == "gateway" {
			return c, true
		}
	}
	return corev1.Container{}, false
}

// mountAt returns the volume mounted at path in c, "" if none.
func mountAt(c corev1.Container, path string) string {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			return m.Name
		}
	}
	return ""
}

// uidOf is the uid c runs as: its own runAsUser, else the pod's.
func uidOf(ps corev1.PodSpec, c corev1.Container) *int64 {
	if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
		return c.SecurityContext.RunAsUser
	}
	if ps.SecurityContext != nil {
		return ps.SecurityContext.RunAsUser
	}
	return nil
}

// TestColocatedOff: by default the gateways are a Deployment with an HPA
// and a PDB of their own, nothing is handed off (no -handoff-dir, no
// -handoff-listen, no shared volume, no public host) and no per-pod
// Service is rendered.
func TestColocatedOff(t *testing.T) {
	h := newHelm(t)
	objs := render(t, h, "-f", prodValues)
	sts, node := nodeContainer(t, objs)
	if len(sts.Spec.Template.Spec.Containers) != 1 {
		t.Errorf("node pod containers: %d, want the node alone", len(sts.Spec.Template.Spec.Containers))
	}
	for _, f := range []string{"handoff-listen", "public-host"} {
		if v, ok := flagValue(node.Args, f); ok {
			t.Errorf("node -%s=%s without gateway.colocated", f, v)
		}
	}
	if m := mountAt(node, handoffDir); m != "" {
		t.Errorf("node mounts %s at %s", m, handoffDir)
	}
	dep := find[*appsv1.Deployment](t, objs, "Deployment", "berth-gateway")
	if v, ok := flagValue(dep.Spec.Template.Spec.Containers[0].Args, "handoff-dir"); ok {
		t.Errorf("gateway Deployment -handoff-dir=%s", v)
	}
	n := countKinds(objs)
	if n["HorizontalPodAutoscaler"] != 1 || n["Service"] != 4 {
		t.Errorf("objects %v: want the gateway HPA and no per-pod Service", n)
	}
	svc := find[*corev1.Service](t, objs, "Service", "berth-gateway")
	if !mustSelector(t, svc.Spec.Selector).Matches(labels.Set(dep.Spec.Template.Labels)) ||
		mustSelector(t, svc.Spec.Selector).Matches(labels.Set(sts.Spec.Template.Labels)) {
		t.Errorf("gateway Service selector %v: want the gateway Deployment's pods only", svc.Spec.Selector)
	}
}

// TestColocated: with gateway.colocated every node pod runs the gateway
// container the Deployment would have run (the same image, flags, env,
// probes, preStop, resources, securityContext) plus -handoff-dir; the node
// listens for handoffs in that directory, on an emptyDir both mount, as
// the same uid (the socket is mode 0600 and the node checks its peer's
// uid); the node registers $(POD_NAME).<publicDomain> as its public host;
// no gateway Deployment, HPA or PDB is rendered; the gateway Services
// select the node pods.
func TestColocated(t *testing.T) {
	h := newHelm(t)
	// The same values without colocated: the gateway Deployment's container.
	want := find[*appsv1.Deployment](t, render(t, h, "-f", prodValues, "-f", colocatedValues, "--set", "gateway.colocated.enabled=false"),
		"Deployment", "berth-gateway").Spec.Template.Spec.Containers[0]
	objs := render(t, h, "-f", prodValues, "-f", colocatedValues)
	for _, o := range objs {
		if o.Name == "berth-gateway" && (o.Kind == "Deployment" || o.Kind == "HorizontalPodAutoscaler" || o.Kind == "PodDisruptionBudget") {
			t.Errorf("%s %s rendered with gateway.colocated", o.Kind, o.Name)
		}
	}
	sts, node := nodeContainer(t, objs)
	ps := sts.Spec.Template.Spec
	var names []string
	for _, c := range ps.Containers {
		names = append(names, c.Name)
	}
	if !slices.Equal(names, []string{"node", "gateway"}) {
		t.Fatalf("node pod containers %v, want [node gateway]", names)
	}
	gw := ps.Containers[1]

	// The handoff socket is in the directory the gateway scans (*.sock),
	// named for the pod (the node's id), on one emptyDir mounted by both.
	sock, _ := flagValue(node.Args, "handoff-listen")
	dir, _ := flagValue(gw.Args, "handoff-dir")
	if sock != handoffDir+"/$(POD_NAME).sock" || dir != handoffDir || filepath.Dir(sock) != dir {
		t.Errorf("node -handoff-listen=%q, gateway -handoff-dir=%q: want the socket %s/$(POD_NAME).sock in the gateway's directory", sock, dir, handoffDir)
	}
	vol := mountAt(node, handoffDir)
	if vol == "" || mountAt(gw, handoffDir) != vol {
		t.Errorf("%s: node mounts %q, gateway %q: want one shared volume", handoffDir, vol, mountAt(gw, handoffDir))
	}
	if i := slices.IndexFunc(ps.Volumes, func(v corev1.Volume) bool { return v.Name == vol }); i < 0 || ps.Volumes[i].EmptyDir == nil {
		t.Errorf("volume %q is not an emptyDir of the pod", vol)
	}
	if host, _ := flagValue(node.Args, "public-host"); host != "$(POD_NAME).mqtt-nodes.example.com" {
		t.Errorf("node -public-host=%q, want $(POD_NAME).<gateway.colocated.publicDomain>", host)
	}
	nu, gu := uidOf(ps, node), uidOf(ps, gw)
	if nu == nil || gu == nil || *nu != *gu {
		t.Errorf("node uid %v, gateway uid %v: the handoff socket needs one uid, set", nu, gu)
	}

	// Otherwise the Deployment's container, untouched.
	got := *gw.DeepCopy()
	got.Args = slices.DeleteFunc(slices.Clone(got.Args), func(a string) bool { return a == "-handoff-dir="+handoffDir })
	got.VolumeMounts = slices.DeleteFunc(slices.Clone(got.VolumeMounts), func(m corev1.VolumeMount) bool { return m.MountPath == handoffDir })
	if !reflect.DeepEqual(got, want) {
		t.Errorf("co-located gateway container differs from the Deployment's beyond the handoff:\n got %+v\nwant %+v", got, want)
	}
	if !slices.ContainsFunc(ps.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "mqtt-example-com-tls" }) {
		t.Error("the gateway's TLS Secret is not a volume of the node pod")
	}

	// Devices' Service and the metrics Service select the node pods.
	for _, name := range []string{"berth-gateway", "berth-gateway-metrics"} {
		svc := find[*corev1.Service](t, objs, "Service", name)
		for _, w := range workloads(objs) {
			if got := mustSelector(t, svc.Spec.Selector).Matches(labels.Set(w.pod.Labels)); got != (w.name == "berth-node") {
				t.Errorf("Service %s selects %s %s: %v, want only the node pods", name, w.kind, w.name, got)
			}
		}
	}
}

// TestColocatedGrace: a pod's containers are stopped together against one
// deadline, so the node pod's grace is the longer of the node's need
// (preStop drain + -shutdown-grace + margin) and the gateway's (preStop
// sleep + -drain-grace + margin), whichever values make it longer.
func TestColocatedGrace(t *testing.T) {
	h := newHelm(t)
	for _, tc := range []struct {
		name string
		args []string
		want int64 // from the values: max(50+30+15, 5+25+10), max(95, 5+120+10)
	}{
		{"node longer", nil, 95},
		{"gateway longer", []string{"--set", "gateway.drainGraceSeconds=120"}, 135},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sts, node := nodeContainer(t, render(t, h, append([]string{"-f", prodValues, "-f", colocatedValues}, tc.args...)...))
			gw, _ := podGateway(sts)
			seconds := func(flag string, args []string) time.Duration {
				v, _ := flagValue(args, flag)
				d, err := time.ParseDuration(v)
				if err != nil {
					t.Fatalf("-%s=%q: %v", flag, v, err)
				}
				return d
			}
			if node.Lifecycle == nil || node.Lifecycle.PreStop == nil || node.Lifecycle.PreStop.Exec == nil ||
				gw.Lifecycle == nil || gw.Lifecycle.PreStop == nil || gw.Lifecycle.PreStop.Sleep == nil {
				t.Fatalf("preStop hooks: node %+v, gateway %+v", node.Lifecycle, gw.Lifecycle)
			}
			nodeNeed := seconds("timeout", node.Lifecycle.PreStop.Exec.Command) + seconds("shutdown-grace", node.Args)
			gwNeed := time.Duration(gw.Lifecycle.PreStop.Sleep.Seconds)*time.Second + seconds("drain-grace", gw.Args)
			grace := sts.Spec.Template.Spec.TerminationGracePeriodSeconds
			if grace == nil || *grace != tc.want {
				t.Fatalf("terminationGracePeriodSeconds %v, want %d", grace, tc.want)
			}
			g := time.Duration(*grace) * time.Second
			if g <= nodeNeed || g <= gwNeed {
				t.Errorf("grace %v does not cover the node (%v) and the gateway (%v)", g, nodeNeed, gwNeed)
			}
			t.Logf("grace %v: node needs %v, gateway %v", g, nodeNeed, gwNeed)
		})
	}
}

// TestColocatedPerPodServices: one Service per node pod, each selecting
// that pod alone (statefulset.kubernetes.io/pod-name), with the gateway
// Service's ports and policy and its annotations' templates filled in for
// the pod; none with perPodServices off.
func TestColocatedPerPodServices(t *testing.T) {
	h := newHelm(t)
	objs := render(t, h, "-f", prodValues, "-f", colocatedValues)
	sts, _ := nodeContainer(t, objs)
	main := find[*corev1.Service](t, objs, "Service", "berth-gateway")
	replicas := int(*sts.Spec.Replicas)
	if replicas != 5 {
		t.Fatalf("prod-values runs 5 nodes, rendered %d", replicas)
	}
	pods := make([]labels.Set, replicas)
	for i := range pods {
		pods[i] = maps.Clone(labels.Set(sts.Spec.Template.Labels))
		pods[i]["statefulset.kubernetes.io/pod-name"] = fmt.Sprintf("%s-%d", sts.Name, i)
	}
	n := 0
	for _, o := range objs {
		if svc, ok := o.Value.(*corev1.Service); ok && strings.HasPrefix(o.Name, "berth-node-") {
			n++
			var i int
			if _, err := fmt.Sscanf(o.Name, "berth-node-%d-mqtt", &i); err != nil || fmt.Sprintf("berth-node-%d-mqtt", i) != o.Name {
				t.Errorf("per-pod Service name %q, want berth-node-<i>-mqtt", o.Name)
				continue
			}
			sel := mustSelector(t, svc.Spec.Selector)
			for j, pod := range pods {
				if sel.Matches(pod) != (i == j) {
					t.Errorf("Service %s selects pod %d: %v", o.Name, j, i != j)
				}
			}
			if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Spec.ExternalTrafficPolicy != main.Spec.ExternalTrafficPolicy ||
				!reflect.DeepEqual(svc.Spec.Ports, main.Spec.Ports) {
				t.Errorf("Service %s: type %s, policy %s, ports %v; want LoadBalancer and the gateway Service's %s, %v",
					o.Name, svc.Spec.Type, svc.Spec.ExternalTrafficPolicy, svc.Spec.Ports, main.Spec.ExternalTrafficPolicy, main.Spec.Ports)
			}
			if got, want := svc.Annotations["external-dns.alpha.kubernetes.io/hostname"], fmt.Sprintf("berth-node-%d.mqtt-nodes.example.com", i); got != want {
				t.Errorf("Service %s hostname annotation %q, want %q", o.Name, got, want)
			}
		}
	}
	if n != replicas {
		t.Errorf("%d per-pod Services, want node.replicas = %d", n, replicas)
	}
	perPod := func(objs []Object) (names []string) {
		for _, o := range objs {
			if o.Kind == "Service" && strings.HasSuffix(o.Name, "-mqtt") {
				names = append(names, o.Name)
			}
		}
		return names
	}
	objs = render(t, h, "-f", prodValues, "-f", colocatedValues, "--set", "gateway.colocated.perPodServices.enabled=false", "--set", "node.replicas=3")
	if got := perPod(objs); len(got) != 0 {
		t.Errorf("perPodServices off: Services %v rendered", got)
	}
	objs = render(t, h, "-f", prodValues, "-f", colocatedValues, "--set", "node.replicas=3", "--set", "gateway.colocated.perPodServices.type=NodePort")
	if svc := find[*corev1.Service](t, objs, "Service", "berth-node-2-mqtt"); svc.Spec.Type != corev1.ServiceTypeNodePort || len(perPod(objs)) != 3 {
		t.Errorf("3 nodes, NodePort: berth-node-2-mqtt is %s, per-pod Services %v", svc.Spec.Type, perPod(objs))
	}
}

// TestColocatedNetwork: devices reach the node pods' gateway ports and
// nothing else of them; the node pods' MQTT port is reached by the node
// pods (their gateways); metrics scrapers reach the gateway's metrics
// port; the bundled Redis admits the node pods; the gateway ServiceMonitor
// scrapes the node pods.
func TestColocatedNetwork(t *testing.T) {
	h := newHelm(t)
	objs := render(t, h, "--set", "image.tag=0.1.0", "--set", "gateway.colocated.enabled=true",
		"--set", "gateway.colocated.publicDomain=nodes.example.com", "--set", "redis.bundled.enabled=true",
		"--api-versions", "monitoring.coreos.com/v1")
	sts, _ := nodeContainer(t, objs)
	nodePods := labels.Set(sts.Spec.Template.Labels)
	gw := find[*networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", "berth-gateway")
	if !mustSelector(t, gw.Spec.PodSelector.MatchLabels).Matches(nodePods) {
		t.Fatal("the gateway policy does not select the node pods")
	}
	var open, scraped []string
	for _, rule := range gw.Spec.Ingress {
		for _, p := range rule.Ports {
			if len(rule.From) == 0 {
				open = append(open, p.Port.String())
			} else {
				scraped = append(scraped, p.Port.String())
			}
		}
	}
	if !slices.Equal(open, []string{"mqtt", "ws"}) || !slices.Equal(scraped, []string{"metrics"}) {
		t.Errorf("node pods open to everyone on %v, to scrapers on %v; want [mqtt ws], [metrics]", open, scraped)
	}
	reachedFrom := func(policy, port string) bool {
		np := find[*networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", policy)
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				for _, peer := range rule.From {
					if p.Port.String() == port && peer.PodSelector != nil && mustSelector(t, peer.PodSelector.MatchLabels).Matches(nodePods) {
						return true
					}
				}
			}
		}
		return false
	}
	if !reachedFrom("berth-node", "mqtt-internal") {
		t.Error("node pods (their gateways) cannot reach the nodes' MQTT port")
	}
	if !reachedFrom("berth-redis", "redis") {
		t.Error("node pods (their gateways) cannot reach the bundled Redis")
	}
	sm := find[*monitoringv1.ServiceMonitor](t, objs, "ServiceMonitor", "berth-gateway")
	svc := find[*corev1.Service](t, objs, "Service", "berth-gateway-metrics")
	if !mustSelector(t, sm.Spec.Selector.MatchLabels).Matches(labels.Set(svc.Labels)) || !mustSelector(t, svc.Spec.Selector).Matches(nodePods) {
		t.Error("the gateway ServiceMonitor does not scrape the node pods")
	}
}
