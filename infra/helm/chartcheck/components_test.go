package chartcheck

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// flagValue returns the value of -name=value in args.
func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "-"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// TestNodeStatefulSet: a volume per pod for the WAL, stable per-pod
// addresses through the headless Service, zone spread, startup and
// liveness probes on the admin port's /healthz, readiness on /readyz, and
// a grace period longer than the node's own.
func TestNodeStatefulSet(t *testing.T) {
	h := newHelm(t)
	objs := render(t, h, "-f", prodValues)
	sts := find[*appsv1.StatefulSet](t, objs, "StatefulSet", "berth-node")
	svc := find[*corev1.Service](t, objs, "Service", "berth-node")
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || sts.Spec.ServiceName != svc.Name {
		t.Errorf("headless Service %q (clusterIP %q), StatefulSet serviceName %q", svc.Name, svc.Spec.ClusterIP, sts.Spec.ServiceName)
	}
	if len(sts.Spec.VolumeClaimTemplates) != 1 || sts.Spec.VolumeClaimTemplates[0].Name != "data" {
		t.Fatalf("volumeClaimTemplates: %+v", sts.Spec.VolumeClaimTemplates)
	}
	if got := sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().String(); got != "200Gi" {
		t.Errorf("WAL volume %s, want prod-values' 200Gi", got)
	}
	c := sts.Spec.Template.Spec.Containers[0]
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "data" && m.MountPath == "/data" }) {
		t.Errorf("data volume not mounted at /data: %+v", c.VolumeMounts)
	}
	want := map[string]string{
		"data": "/data", "node-id": "$(POD_NAME)", "fsync": "always", "internal-listen": ":7883", "admin-listen": ":7880",
		"advertise-mqtt":  "$(POD_NAME).berth-node.berth.svc.cluster.local:7883",
		"advertise-admin": "$(POD_NAME).berth-node.berth.svc.cluster.local:7880",
		"jwks-url":        "http://berth-api.berth.svc.cluster.local:8080/v1/.well-known/jwks.json",
	}
	for name, w := range want {
		if got, _ := flagValue(c.Args, name); got != w {
			t.Errorf("-%s=%q, want %q", name, got, w)
		}
	}
	if i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_NAME" }); i < 0 ||
		c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.FieldRef == nil || c.Env[i].ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Error("POD_NAME does not come from metadata.name")
	}
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		path := "/healthz"
		if name == "readiness" {
			path = "/readyz" // caught up, not only up
		}
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.String() != "admin" {
			t.Errorf("%s probe %+v, want GET %s on the admin port", name, p, path)
		}
	}
	grace, _ := flagValue(c.Args, "shutdown-grace")
	d, err := time.ParseDuration(grace)
	if err != nil || sts.Spec.Template.Spec.TerminationGracePeriodSeconds == nil ||
		time.Duration(*sts.Spec.Template.Spec.TerminationGracePeriodSeconds)*time.Second <= d {
		t.Errorf("terminationGracePeriodSeconds %v not above -shutdown-grace %q", sts.Spec.Template.Spec.TerminationGracePeriodSeconds, grace)
	}
	zone := false
	for _, tsc := range sts.Spec.Template.Spec.TopologySpreadConstraints {
		if tsc.TopologyKey == "topology.kubernetes.io/zone" {
			zone = tsc.WhenUnsatisfiable == corev1.DoNotSchedule
		}
	}
	if !zone {
		t.Error("prod-values: nodes not spread over zones with DoNotSchedule")
	}
}

// TestGateway: the devices' LoadBalancer with 1883, 8883 and 443 (wss),
// TLS from a Secret, an HPA on the Deployment, and a grace period that
// covers the preStop pause and the drain.
func TestGateway(t *testing.T) {
	h := newHelm(t)
	objs := render(t, h, "-f", prodValues)
	svc := find[*corev1.Service](t, objs, "Service", "berth-gateway")
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		t.Errorf("gateway Service type %s", svc.Spec.Type)
	}
	ports := map[int32]string{}
	for _, p := range svc.Spec.Ports {
		ports[p.Port] = p.TargetPort.String()
	}
	if want := map[int32]string{1883: "mqtt", 8883: "mqtts", 443: "wss"}; !maps.Equal(ports, want) {
		t.Errorf("gateway Service ports %v, want %v", ports, want)
	}
	dep := find[*appsv1.Deployment](t, objs, "Deployment", "berth-gateway")
	if dep.Spec.Replicas != nil {
		t.Errorf("replicas %d set beside the HPA", *dep.Spec.Replicas)
	}
	ps := dep.Spec.Template.Spec
	c := ps.Containers[0]
	if cert, _ := flagValue(c.Args, "tls-cert"); cert != "/etc/berth/tls/tls.crt" {
		t.Errorf("-tls-cert=%q", cert)
	}
	if !slices.ContainsFunc(ps.Volumes, func(v corev1.Volume) bool {
		return v.Secret != nil && v.Secret.SecretName == "mqtt-example-com-tls"
	}) {
		t.Error("TLS Secret not mounted")
	}
	drain, _ := flagValue(c.Args, "drain-grace")
	d, err := time.ParseDuration(drain)
	if err != nil || c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Fatalf("-drain-grace %q, preStop %+v", drain, c.Lifecycle)
	}
	total := d + time.Duration(c.Lifecycle.PreStop.Sleep.Seconds)*time.Second
	if time.Duration(*ps.TerminationGracePeriodSeconds)*time.Second <= total {
		t.Errorf("terminationGracePeriodSeconds %d does not cover preStop + drain (%v)", *ps.TerminationGracePeriodSeconds, total)
	}
	hpa := find[*autoscalingv2.HorizontalPodAutoscaler](t, objs, "HorizontalPodAutoscaler", "berth-gateway")
	if hpa.Spec.ScaleTargetRef.Kind != "Deployment" || hpa.Spec.ScaleTargetRef.Name != dep.Name {
		t.Errorf("HPA targets %+v", hpa.Spec.ScaleTargetRef)
	}
}

// TestMigrationHook: the migrations run as a hook before install and
// upgrade; with the bundled Postgres, after install (there is no Postgres
// before it).
func TestMigrationHook(t *testing.T) {
	h := newHelm(t)
	for _, rc := range renderCases() {
		t.Run(rc.name, func(t *testing.T) {
			job := find[*batchv1.Job](t, render(t, h, rc.args...), "Job", "berth-migrate")
			want := "pre-install,pre-upgrade"
			if rc.bundled {
				want = "post-install,pre-upgrade"
			}
			if got := job.Annotations["helm.sh/hook"]; got != want {
				t.Errorf("helm.sh/hook %q, want %q", got, want)
			}
			if job.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever || job.Spec.ActiveDeadlineSeconds == nil {
				t.Errorf("restartPolicy %s, activeDeadlineSeconds %v", job.Spec.Template.Spec.RestartPolicy, job.Spec.ActiveDeadlineSeconds)
			}
		})
	}
}

// TestServiceMonitors: rendered only where monitoring.coreos.com/v1
// exists; the nodes' scrape carries the node token from its Secret.
func TestServiceMonitors(t *testing.T) {
	h := newHelm(t)
	if n := countKinds(render(t, h, "-f", prodValues))["ServiceMonitor"]; n != 0 {
		t.Errorf("%d ServiceMonitors without the monitoring API", n)
	}
	objs := render(t, h, "-f", prodValues, "--api-versions", "monitoring.coreos.com/v1")
	sm := find[*monitoringv1.ServiceMonitor](t, objs, "ServiceMonitor", "berth-node")
	ep := sm.Spec.Endpoints
	if len(ep) != 1 || ep[0].Port != "admin" || ep[0].Authorization == nil || ep[0].Authorization.Credentials == nil ||
		ep[0].Authorization.Credentials.Name != "berth-internal" || ep[0].Authorization.Credentials.Key != "node-token" {
		t.Errorf("node ServiceMonitor endpoints %+v", ep)
	}
	for _, name := range []string{"berth-gateway", "berth-api"} {
		sm := find[*monitoringv1.ServiceMonitor](t, objs, "ServiceMonitor", name)
		var svc *corev1.Service
		for _, o := range objs {
			if s, ok := o.Value.(*corev1.Service); ok && mustSelector(t, sm.Spec.Selector.MatchLabels).Matches(labels.Set(s.Labels)) {
				if svc != nil {
					t.Errorf("ServiceMonitor %s selects two Services", name)
				}
				svc = s
			}
		}
		if svc == nil || !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "metrics" }) {
			t.Errorf("ServiceMonitor %s selects no Service with a metrics port", name)
		}
	}
}

// TestGatewayBehindLoadBalancer: the gateway's per-source SYN filter is
// off when its Service hides the devices' addresses
// (externalTrafficPolicy Cluster, or a ClusterIP Service behind a proxy),
// on with the default LoadBalancer and externalTrafficPolicy Local.
func TestGatewayBehindLoadBalancer(t *testing.T) {
	h := newHelm(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "false"},
		{[]string{"--set", "gateway.service.externalTrafficPolicy=Cluster"}, "true"},
		{[]string{"--set", "gateway.service.type=ClusterIP"}, "true"},
	} {
		objs := render(t, h, append([]string{"--set", "image.tag=0.1.0"}, tc.args...)...)
		dep := find[*appsv1.Deployment](t, objs, "Deployment", "berth-gateway")
		if got, _ := flagValue(dep.Spec.Template.Spec.Containers[0].Args, "behind-load-balancer"); got != tc.want {
			t.Errorf("%v: -behind-load-balancer=%q, want %q", tc.args, got, tc.want)
		}
	}
}
