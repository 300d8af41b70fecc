package chartcheck

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// nodeContainer is the node StatefulSet and its container.
func nodeContainer(t *testing.T, objs []Object) (*appsv1.StatefulSet, corev1.Container) {
	t.Helper()
	sts := find[*appsv1.StatefulSet](t, objs, "StatefulSet", "berth-node")
	return sts, sts.Spec.Template.Spec.Containers[0]
}

// replicated reports whether the rendered nodes replicate (-peers).
func replicated(t *testing.T, objs []Object) bool {
	t.Helper()
	_, c := nodeContainer(t, objs)
	_, ok := flagValue(c.Args, "peers")
	return ok
}

// TestNodeReplication: with three nodes or more (the default values, the
// production-like five) the nodes replicate: -peers names every pod by its
// stable DNS name on the peer port, which the headless Service and the
// container expose; the cluster secret comes from its Secret by
// reference; a preStop hook drains the node within a grace period that
// also covers the node's shutdown. One node, or replication disabled,
// renders none of it.
func TestNodeReplication(t *testing.T) {
	h := newHelm(t)
	for _, tc := range []struct {
		name  string
		args  []string
		nodes int // 0: not replicated
	}{
		{"default", []string{"--set", "image.tag=0.1.0"}, 3},
		{"prod", []string{"-f", prodValues}, 5},
		{"one node", []string{"--set", "image.tag=0.1.0", "--set", "node.replicas=1"}, 0},
		{"disabled", []string{"-f", prodValues, "--set", "node.replication.enabled=false"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, h, tc.args...)
			sts, c := nodeContainer(t, objs)
			svc := find[*corev1.Service](t, objs, "Service", "berth-node")
			peerPort := slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool {
				return p.Name == "peer" && p.Port == 7881 && p.TargetPort.String() == "peer"
			})
			containerPort := slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "peer" && p.ContainerPort == 7881 })
			peerSecret := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "BERTH_PEER_SECRET" })
			peers, hasPeers := flagValue(c.Args, "peers")
			if tc.nodes == 0 {
				if hasPeers || peerPort || containerPort || peerSecret >= 0 || c.Lifecycle != nil {
					t.Errorf("not replicating, yet -peers %v, Service peer port %v, container peer port %v, BERTH_PEER_SECRET %v, lifecycle %+v",
						hasPeers, peerPort, containerPort, peerSecret >= 0, c.Lifecycle)
				}
				return
			}
			var want []string
			for i := range tc.nodes {
				want = append(want, fmt.Sprintf("berth-node-%d=berth-node-%d.berth-node.berth.svc.cluster.local:7881", i, i))
			}
			if got := strings.Split(peers, ","); !slices.Equal(got, want) {
				t.Errorf("-peers\n got %v\nwant %v", got, want)
			}
			if id, _ := flagValue(c.Args, "node-id"); id != "$(POD_NAME)" || sts.Name != "berth-node" || sts.Spec.ServiceName != svc.Name {
				t.Errorf("node ids %q of StatefulSet %s (service %s): -peers names pods <sts>-<i>.<service>", id, sts.Name, sts.Spec.ServiceName)
			}
			if int(*sts.Spec.Replicas) != tc.nodes {
				t.Errorf("%d pods, -peers names %d", *sts.Spec.Replicas, tc.nodes)
			}
			if l, _ := flagValue(c.Args, "peer-listen"); l != ":7881" || !peerPort || !containerPort {
				t.Errorf("-peer-listen %q, Service peer port %v, container peer port %v", l, peerPort, containerPort)
			}
			if r, _ := flagValue(c.Args, "replicas"); r != "3" {
				t.Errorf("-replicas=%s, want 3", r)
			}
			if !svc.Spec.PublishNotReadyAddresses {
				t.Error("headless Service hides not-ready nodes: a node catching up could not be reached by its leaders")
			}
			if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
				t.Error("OrderedReady pods: the first node cannot be ready (caught up) before its peers start")
			}
			// The secret only by reference: a secretKeyRef, never a value or flag.
			if peerSecret < 0 {
				t.Fatal("no BERTH_PEER_SECRET")
			}
			ref := c.Env[peerSecret].ValueFrom
			if c.Env[peerSecret].Value != "" || ref == nil || ref.SecretKeyRef == nil ||
				ref.SecretKeyRef.Name != "berth-internal" || ref.SecretKeyRef.Key != "peer-secret" {
				t.Errorf("BERTH_PEER_SECRET %+v, want a secretKeyRef to berth-internal/peer-secret", c.Env[peerSecret])
			}
			// preStop: broker drain, within the grace period before SIGTERM's shutdown.
			if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil {
				t.Fatalf("no preStop exec hook: %+v", c.Lifecycle)
			}
			cmd := c.Lifecycle.PreStop.Exec.Command
			if len(cmd) < 2 || cmd[0] != "/usr/local/bin/broker" || cmd[1] != "drain" {
				t.Fatalf("preStop %v, want /usr/local/bin/broker drain ...", cmd)
			}
			if a, _ := flagValue(cmd, "admin"); a != "127.0.0.1:7880" {
				t.Errorf("preStop drains %q, want the node's own admin port 127.0.0.1:7880", a)
			}
			// A pod that stops comes back with its volume: it hands its
			// leaderships over but keeps its replicas.
			if r, _ := flagValue(cmd, "replicas"); r != "keep" {
				t.Errorf("preStop drain -replicas=%q, want keep", r)
			}
			to, _ := flagValue(cmd, "timeout")
			drain, err := time.ParseDuration(to)
			grace, _ := flagValue(c.Args, "shutdown-grace")
			shutdown, err2 := time.ParseDuration(grace)
			if err != nil || err2 != nil || drain <= 0 {
				t.Fatalf("preStop -timeout %q, -shutdown-grace %q", to, grace)
			}
			tgps := time.Duration(*sts.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
			if tgps < drain+shutdown {
				t.Errorf("terminationGracePeriodSeconds %v < drain %v + shutdown %v", tgps, drain, shutdown)
			}
			for _, a := range cmd {
				if strings.Contains(a, "token") {
					t.Errorf("preStop passes a token on the command line: %v", cmd)
				}
			}
			if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
				return e.Name == "BERTH_NODE_TOKEN" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil
			}) {
				t.Error("the drain's BERTH_NODE_TOKEN is not in the container's environment from its Secret")
			}
			// Peers reach each other only on the peer port (TestPolicyNetwork
			// checks that no one else does).
			np := find[*networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", "berth-node")
			peerRule := false
			for _, r := range np.Spec.Ingress {
				for _, p := range r.Ports {
					if p.Port.String() == "peer" {
						peerRule = len(r.Ports) == 1 && len(r.From) == 1 && r.From[0].PodSelector != nil &&
							r.From[0].PodSelector.MatchLabels["app.kubernetes.io/component"] == "node"
					}
				}
			}
			if !peerRule {
				t.Errorf("no NetworkPolicy rule opening the peer port (alone) to the nodes: %+v", np.Spec.Ingress)
			}
		})
	}
}
