package chartcheck

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestGatewayRedis: each redis.mode reaches the gateway as its flags (the
// topology) and environment (secrets, each from its Secret): url as
// REDIS_URL, sentinel and cluster as -redis-addrs with the master name or
// -redis-cluster and the passwords in BERTH_REDIS_PASSWORD and
// BERTH_REDIS_SENTINEL_PASSWORD.
func TestGatewayRedis(t *testing.T) {
	h := newHelm(t)
	type secret struct{ env, name, key string }
	for _, tc := range []struct {
		name      string
		args      []string
		flags     map[string]string // flag -> value ("" for a bare switch)
		noFlags   []string
		secrets   []secret
		noSecrets []string
	}{
		{
			name:      "url",
			args:      []string{"-f", prodValues},
			noFlags:   []string{"redis-addrs", "redis-sentinel-master", "redis-cluster", "redis-tls"},
			secrets:   []secret{{"REDIS_URL", "berth-redis", "url"}},
			noSecrets: []string{"BERTH_REDIS_PASSWORD", "BERTH_REDIS_SENTINEL_PASSWORD"},
		},
		{
			name: "sentinel",
			args: []string{"-f", prodValues, "-f", sentinelValues},
			flags: map[string]string{
				"redis-sentinel-master": "berth",
				"redis-addrs":           "redis-sentinel-0.redis-sentinel.redis:26379,redis-sentinel-1.redis-sentinel.redis:26379,redis-sentinel-2.redis-sentinel.redis:26379",
			},
			noFlags: []string{"redis-cluster", "redis-tls", "redis-url"},
			secrets: []secret{
				{"BERTH_REDIS_PASSWORD", "berth-redis", "password"},
				{"BERTH_REDIS_SENTINEL_PASSWORD", "berth-redis", "sentinel-password"},
			},
			noSecrets: []string{"REDIS_URL"},
		},
		{
			name: "cluster",
			args: []string{"-f", prodValues, "-f", clusterValues},
			flags: map[string]string{
				"redis-cluster":  "",
				"redis-tls":      "",
				"redis-username": "berth-gateway",
				"redis-addrs":    "redis-cluster-0.redis-cluster.redis:6379,redis-cluster-1.redis-cluster.redis:6379,redis-cluster-2.redis-cluster.redis:6379",
			},
			noFlags:   []string{"redis-sentinel-master", "redis-url"},
			secrets:   []secret{{"BERTH_REDIS_PASSWORD", "berth-redis", "password"}},
			noSecrets: []string{"REDIS_URL", "BERTH_REDIS_SENTINEL_PASSWORD"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, h, tc.args...)
			c := find[*appsv1.Deployment](t, objs, "Deployment", "berth-gateway").Spec.Template.Spec.Containers[0]
			for f, want := range tc.flags {
				got, ok := flagValue(c.Args, f)
				if want == "" {
					ok, got = slices.Contains(c.Args, "-"+f), ""
				}
				if !ok || got != want {
					t.Errorf("-%s = %q (present %v), want %q", f, got, ok, want)
				}
			}
			for _, f := range tc.noFlags {
				if _, ok := flagValue(c.Args, f); ok || slices.Contains(c.Args, "-"+f) {
					t.Errorf("-%s rendered in %s mode", f, tc.name)
				}
			}
			env := map[string]corev1.EnvVar{}
			for _, e := range c.Env {
				env[e.Name] = e
			}
			for _, s := range tc.secrets {
				e, ok := env[s.env]
				if !ok || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
					e.ValueFrom.SecretKeyRef.Name != s.name || e.ValueFrom.SecretKeyRef.Key != s.key {
					t.Errorf("env %s = %+v, want from Secret %s key %s", s.env, e, s.name, s.key)
				}
			}
			for _, n := range tc.noSecrets {
				if _, ok := env[n]; ok {
					t.Errorf("env %s rendered in %s mode", n, tc.name)
				}
			}
		})
	}
}
