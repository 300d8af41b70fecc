package chartcheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
)

// repoRoot is the repository, from this package's directory.
const repoRoot = "../../.."

// metricName is a Berth metric name in PromQL or Go source.
var metricName = regexp.MustCompile(`berth_[a-z0-9_]+`)

// registeredMetrics returns the metric names the Go source of the
// processes registers: every "berth_..." string literal in a non-test Go
// file of broker, gateway, services and billing. A histogram's series
// (_bucket, _sum, _count) count as its name.
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	lit := regexp.MustCompile(`"(berth_[a-z0-9_]+)"`)
	names := map[string]bool{}
	for _, mod := range []string{"broker", "gateway", "services", "billing"} {
		err := filepath.WalkDir(filepath.Join(repoRoot, mod), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range lit.FindAllSubmatch(b, -1) {
				names[string(m[1])] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return names
}

// TestAlerts: the PrometheusRule renders only where the monitoring API
// exists; every alert has a severity, a summary and a description, a
// for-duration, and an expression whose every Berth metric is one the Go
// source registers (so a renamed metric fails here, not silently in
// Prometheus); each alert is explained in docs/operations.md.
func TestAlerts(t *testing.T) {
	h := newHelm(t)
	if n := countKinds(render(t, h, "-f", prodValues))["PrometheusRule"]; n != 0 {
		t.Errorf("%d PrometheusRules without the monitoring API", n)
	}
	if n := countKinds(render(t, h, "-f", prodValues, "--api-versions", "monitoring.coreos.com/v1",
		"--set", "prometheusRule.enabled=false"))["PrometheusRule"]; n != 0 {
		t.Errorf("%d PrometheusRules with prometheusRule.enabled=false", n)
	}
	objs := render(t, h, "-f", prodValues, "--api-versions", "monitoring.coreos.com/v1")
	pr := find[*monitoringv1.PrometheusRule](t, objs, "PrometheusRule", "berth-alerts")
	registered := registeredMetrics(t)
	ops, err := os.ReadFile(filepath.Join(repoRoot, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	var alerts int
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			expr := r.Expr.String()
			if r.Labels["severity"] != "critical" && r.Labels["severity"] != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", r.Alert, r.Labels["severity"])
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: summary or description missing", r.Alert)
			}
			if r.For == nil || *r.For == "" {
				t.Errorf("%s: no for-duration (one bad scrape would page)", r.Alert)
			}
			used := metricName.FindAllString(expr, -1)
			if len(used) == 0 && !strings.HasPrefix(expr, "up{") {
				t.Errorf("%s: expression %q uses no Berth metric", r.Alert, expr)
			}
			for _, m := range used {
				base := m
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(m, suffix); ok && registered[b] {
						base = b
					}
				}
				if !registered[base] {
					t.Errorf("%s: metric %s is registered by no process (expr %q)", r.Alert, m, expr)
				}
			}
			if !strings.Contains(string(ops), "`"+r.Alert+"`") {
				t.Errorf("%s is not explained in docs/operations.md", r.Alert)
			}
		}
	}
	if alerts < 5 {
		t.Errorf("%d alerts, want at least 5", alerts)
	}
	t.Logf("%d alerts over %d registered metric names", alerts, len(registered))
}
