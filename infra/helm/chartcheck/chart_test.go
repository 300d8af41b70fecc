package chartcheck

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

const (
	chartDir   = "../berth"
	prodValues = "../berth/ci/prod-values.yaml"
	// The production-like file with Redis behind Sentinel, or a Redis Cluster.
	sentinelValues = "../berth/ci/redis-sentinel-values.yaml"
	clusterValues  = "../berth/ci/redis-cluster-values.yaml"
	release        = "berth"
	namespace      = "berth"
	helmPinned     = "v3.22.0" // infra/dev/helm.sh

	// Over the production-like file: a gateway in each node pod.
	colocatedValues = "../berth/ci/colocated-values.yaml"

	// kubeVersion is the cluster version rendered for: helm template
	// otherwise assumes v1.20, below the chart's kubeVersion (>= 1.30, for
	// the preStop sleep action).
	kubeVersion = "1.34.0"
)

// renderCase is one values set the chart must render and pass policy with.
type renderCase struct {
	name string
	args []string
	// bundled: the trial mode, with Postgres and Redis in the release.
	bundled bool
	// colocated: the gateways run in the node pods (gateway.colocated).
	colocated bool
}

// renderCases: the default values (with the one required value), the
// production-like file, that file where the Prometheus Operator's API
// exists, that file with Redis Sentinel and with Redis Cluster, the trial
// mode, one node (which does not replicate), the gateway with the kernel
// SYN filter, the production file behind an NLB sending PROXY headers, and
// that file with a gateway in each node pod.
func renderCases() []renderCase {
	return []renderCase{
		{name: "default", args: []string{"--set", "image.tag=0.1.0"}},
		{name: "prod", args: []string{"-f", prodValues}},
		{name: "prod-monitoring", args: []string{"-f", prodValues, "--api-versions", "monitoring.coreos.com/v1"}},
		{name: "redis-sentinel", args: []string{"-f", prodValues, "-f", sentinelValues}},
		{name: "redis-cluster", args: []string{"-f", prodValues, "-f", clusterValues}},
		{name: "trial", bundled: true, args: []string{"--set", "image.tag=0.1.0",
			"--set", "database.bundled.enabled=true", "--set", "redis.bundled.enabled=true"}},
		{name: "one-node", args: []string{"--set", "image.tag=0.1.0", "--set", "node.replicas=1"}},
		{name: "syn-filter", args: []string{"--set", "image.tag=0.1.0", "--set", "gateway.synFilter.enabled=true"}},
		{name: "proxy-protocol", args: []string{"-f", prodValues, "--set", "gateway.proxyProtocolFrom=10.0.0.0/8",
			"--set-string", `gateway.service.annotations.service\.beta\.kubernetes\.io/aws-load-balancer-proxy-protocol=*`}},
		{name: "colocated", colocated: true, args: []string{"-f", prodValues, "-f", colocatedValues}},
	}
}

// newHelm finds the pinned helm (installed by infra/dev/helm.sh, which
// `make test` runs through infra/dev/tools.sh) with a private home.
func newHelm(t *testing.T) Helm {
	t.Helper()
	h, err := FindHelm(os.Getenv)
	if errors.Is(err, ErrNoHelm) {
		t.Fatalf("%v: `make test` installs it through infra/dev/tools.sh", err)
	}
	h.Home = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := h.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v != helmPinned {
		t.Fatalf("helm at %s is %s, want %s (run infra/dev/helm.sh)", h.Bin, v, helmPinned)
	}
	return h
}

func render(t *testing.T, h Helm, args ...string) []Object {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	objs, err := h.Template(ctx, chartDir, release, namespace, append([]string{"--kube-version", kubeVersion}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// renderErr renders args and returns helm's error, failing if it rendered.
func renderErr(t *testing.T, h Helm, args ...string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := h.Template(ctx, chartDir, release, namespace, append([]string{"--kube-version", kubeVersion}, args...)...)
	if err == nil {
		t.Fatalf("helm template %s rendered; want an error", strings.Join(args, " "))
	}
	return err
}

// workload is one pod template of a Deployment, StatefulSet or Job.
type workload struct {
	kind, name string
	pod        corev1.PodTemplateSpec
}

func workloads(objs []Object) []workload {
	var ws []workload
	for _, o := range objs {
		if pod := PodTemplate(o.Value); pod != nil {
			ws = append(ws, workload{kind: o.Kind, name: o.Name, pod: *pod})
		}
	}
	return ws
}

func find[T any](t *testing.T, objs []Object, kind, name string) T {
	t.Helper()
	for _, o := range objs {
		if o.Kind == kind && o.Name == name {
			v, ok := o.Value.(T)
			if !ok {
				t.Fatalf("%s %s is a %T", kind, name, o.Value)
			}
			return v
		}
	}
	t.Fatalf("no %s %s rendered", kind, name)
	var zero T
	return zero
}

func countKinds(objs []Object) map[string]int {
	n := map[string]int{}
	for _, o := range objs {
		n[o.Kind]++
	}
	return n
}
