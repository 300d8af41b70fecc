package chartcheck

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestRenderStrict renders every values set and decodes each object
// strictly into its k8s.io/api type (Decode); the counts are logged for the
// release notes.
func TestRenderStrict(t *testing.T) {
	h := newHelm(t)
	for _, rc := range renderCases() {
		t.Run(rc.name, func(t *testing.T) {
			objs := render(t, h, rc.args...)
			n := countKinds(objs)
			t.Logf("%s: %d objects: %v", rc.name, len(objs), n)
			want := map[string]int{
				"StatefulSet": 1, "Deployment": 3, "Job": 1, "PodDisruptionBudget": 3,
				"NetworkPolicy": 4, "HorizontalPodAutoscaler": 1, "Service": 4, "ServiceMonitor": 0, "PrometheusRule": 0,
			}
			if rc.name == "prod-monitoring" {
				want["ServiceMonitor"], want["PrometheusRule"] = 3, 1
			}
			if rc.bundled {
				want["StatefulSet"], want["Deployment"], want["NetworkPolicy"], want["Service"] = 2, 4, 6, 6
			}
			if rc.colocated {
				// No gateway Deployment, HPA or PDB; a Service per node pod
				// (5) and the DNS Service.
				want["Deployment"], want["HorizontalPodAutoscaler"], want["PodDisruptionBudget"], want["Service"] = 2, 0, 2, 10
			}
			for kind, w := range want {
				if n[kind] != w {
					t.Errorf("%d %s objects, want %d", n[kind], kind, w)
				}
			}
		})
	}
}

// TestLint runs helm lint --strict on the default values (with the one
// required value), on the production-like file, and on that file with
// Redis Sentinel, with Redis Cluster and with co-located gateways.
func TestLint(t *testing.T) {
	h := newHelm(t)
	for _, args := range [][]string{{"--set", "image.tag=0.1.0"}, {"-f", prodValues},
		{"-f", prodValues, "-f", sentinelValues}, {"-f", prodValues, "-f", clusterValues}, {"-f", prodValues, "-f", colocatedValues}} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := h.Run(ctx, append([]string{"lint", "--strict", chartDir}, args...)...)
		cancel()
		if err != nil {
			t.Errorf("lint %v: %v", args, err)
		}
		t.Logf("lint %v: %s", args, strings.TrimSpace(string(out)))
	}
}

// TestRefusals: values the chart must refuse at install time, with a
// message that says why.
func TestRefusals(t *testing.T) {
	h := newHelm(t)
	tag := []string{"--set", "image.tag=0.1.0"}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no image tag", nil, "image.tag is required"},
		{"latest tag", []string{"--set", "image.tag=latest"}, "image.tag"},
		{"secret in clear", append(tag, "--set", "secrets.proxySecret.value=0123456789abcdef"), "additional properties 'value' not allowed"},
		{"database URL in clear", append(tag, "--set", "database.url=postgres://u:p@db/berth"), "additional properties 'url' not allowed"},
		{"secret ref without a name", append(tag, "--set", "secrets.nodeToken.name="), "secrets/nodeToken/name"},
		{"peer secret in clear", append(tag, "--set", "secrets.peerSecret.value=0123456789abcdef"), "additional properties 'value' not allowed"},
		{"drain longer than the node allows", append(tag, "--set", "node.replication.drainTimeoutSeconds=601"), "node/replication/drainTimeoutSeconds"},
		{"root allowed", append(tag, "--set", "podSecurityContext.runAsNonRoot=false"), "runAsNonRoot"},
		{"writable root fs", append(tag, "--set", "securityContext.readOnlyRootFilesystem=false"), "readOnlyRootFilesystem"},
		{"TLS without its Secret", append(tag, "--set", "gateway.tls.enabled=true"), "gateway.tls.secretName is required"},
		{"SYN filter behind an SNAT balancer", append(tag, "--set", "gateway.synFilter.enabled=true", "--set", "gateway.service.externalTrafficPolicy=Cluster"), "gateway.synFilter.enabled needs the devices' own addresses"},
		{"SYN filter behind a proxy", append(tag, "--set", "gateway.synFilter.enabled=true", "--set", "gateway.service.type=ClusterIP"), "gateway.synFilter.enabled needs the devices' own addresses"},
		{"SYN filter with PROXY headers", append(tag, "--set", "gateway.synFilter.enabled=true", "--set", "gateway.proxyProtocolFrom=10.0.0.0/8"), "gateway.synFilter.enabled needs the devices' own addresses"},
		{"PROXY balancer by name", append(tag, "--set", "gateway.proxyProtocolFrom=lb.internal"), "gateway/proxyProtocolFrom"},
		{"unknown value", append(tag, "--set", "gatway.replicas=3"), "additional properties 'gatway' not allowed"},
		{"unknown Redis mode", append(tag, "--set", "redis.mode=replicated"), "redis/mode"},
		{"Redis password in clear", append(tag, "--set", "redis.mode=cluster", "--set", "redis.addrs={r:6379}", "--set", "redis.password=hunter2"), "additional properties 'password' not allowed"},
		{"Redis password Secret without a key", append(tag, "--set", "redis.mode=cluster", "--set", "redis.addrs={r:6379}", "--set", "redis.passwordSecret.name=berth-redis"), "redis/passwordSecret"},
		{"sentinel without a master name", append(tag, "--set", "redis.mode=sentinel", "--set", "redis.addrs={s:26379}"), "redis.masterName is required"},
		{"cluster without addrs", append(tag, "--set", "redis.mode=cluster"), "redis.addrs is required with redis.mode=cluster"},
		{"Redis address without a port", append(tag, "--set", "redis.mode=cluster", "--set", "redis.addrs={r}"), "redis/addrs/0"},
		{"addrs in url mode", append(tag, "--set", "redis.addrs={r:6379}"), "for redis.mode=sentinel or cluster"},
		{"bundled Redis behind Sentinel", append(tag, "--set", "redis.bundled.enabled=true", "--set", "redis.mode=sentinel", "--set", "redis.masterName=m", "--set", "redis.addrs={s:26379}"), "redis.bundled.enabled needs redis.mode=url"},
		{"co-located with the SYN filter", append(tag, "--set", "gateway.colocated.enabled=true", "--set", "gateway.colocated.publicDomain=n.example.com", "--set", "gateway.synFilter.enabled=true"), "gateway.synFilter.enabled and gateway.colocated.enabled exclude each other"},
		{"per-pod Services without a domain", append(tag, "--set", "gateway.colocated.enabled=true"), "gateway.colocated.publicDomain is required"},
		{"public domain not a DNS name", append(tag, "--set", "gateway.colocated.enabled=true", "--set", "gateway.colocated.publicDomain=Nodes_1.example.com"), "gateway/colocated/publicDomain"},
		{"colocated as a boolean", append(tag, "--set", "gateway.colocated=true"), "gateway/colocated"},
		{"unknown colocated value", append(tag, "--set", "gateway.colocated.perPodService.enabled=false"), "additional properties 'perPodService' not allowed"},
		{"per-pod Service type", append(tag, "--set", "gateway.colocated.perPodServices.type=ExternalName"), "gateway/colocated/perPodServices/type"},
		{"per-pod annotation not a string", append(tag, "--set", "gateway.colocated.perPodServices.annotations.x=1"), "gateway/colocated/perPodServices/annotations/x"},
		{"bundled image latest", append(tag, "--set", "database.bundled.enabled=true", "--set", "database.bundled.image.tag=latest"), "database/bundled/image/tag"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := renderErr(t, h, c.args...)
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
		})
	}
}

// TestDecodeStrict proves the decoding is strict: an unknown field, a
// duplicated field or an unknown kind fails.
func TestDecodeStrict(t *testing.T) {
	good := "# Source: berth/templates/x.yaml\napiVersion: v1\nkind: Service\nmetadata:\n  name: x\nspec:\n  clusterIP: None\n"
	objs, err := Decode([]byte("---\n" + good + "---\n# empty\n"))
	if err != nil || len(objs) != 1 || objs[0].Source != "berth/templates/x.yaml" {
		t.Fatalf("good manifest: %v, %+v", err, objs)
	}
	for name, doc := range map[string]string{
		"unknown field":    strings.Replace(good, "clusterIP: None", "clusterIP: None\n  clusterIPz: None", 1),
		"misplaced field":  strings.Replace(good, "spec:\n", "spec:\n  replicas: 3\n", 1),
		"duplicated field": strings.Replace(good, "clusterIP: None", "clusterIP: None\n  clusterIP: 10.0.0.1", 1),
		"wrong type":       strings.Replace(good, "clusterIP: None", "clusterIP: [None]", 1),
	} {
		if _, err := Decode([]byte(doc)); err == nil {
			t.Errorf("%s: decoded without error", name)
		} else if !strings.Contains(err.Error(), "berth/templates/x.yaml") {
			t.Errorf("%s: error %q does not name the template", name, err)
		}
	}
	_, err = Decode([]byte("apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n"))
	if !errors.Is(err, ErrUnknownKind) {
		t.Errorf("unknown kind: %v, want ErrUnknownKind", err)
	}
}
