package chartcheck

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"sigs.k8s.io/yaml"
)

// TestPlainReplicationRules: docs/alerts/replication.rules.yml (for a
// Prometheus without the Operator) holds the same alerts as the chart's
// berth-replication group with its default thresholds: the same names,
// severities, for-durations, and expressions but for the chart's
// namespace selector.
func TestPlainReplicationRules(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "alerts", "replication.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var plain monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(b, &plain); err != nil {
		t.Fatalf("docs/alerts/replication.rules.yml: %v", err)
	}
	objs := render(t, newHelm(t), "-f", prodValues, "--api-versions", "monitoring.coreos.com/v1")
	pr := find[*monitoringv1.PrometheusRule](t, objs, "PrometheusRule", "berth-alerts")
	chart := map[string]monitoringv1.Rule{}
	for _, g := range pr.Spec.Groups {
		if g.Name == "berth-replication" {
			for _, r := range g.Rules {
				chart[r.Alert] = r
			}
		}
	}
	namespace := regexp.MustCompile(`\{namespace="[^"]*"\}`)
	var n int
	for _, g := range plain.Groups {
		for _, r := range g.Rules {
			n++
			c, ok := chart[r.Alert]
			if !ok {
				t.Errorf("%s: in the plain rules file, not in the chart's berth-replication group", r.Alert)
				continue
			}
			if got, want := r.Expr.String(), namespace.ReplaceAllString(c.Expr.String(), ""); got != want {
				t.Errorf("%s: expression\n%s\nthe chart's (namespace selector left out):\n%s", r.Alert, got, want)
			}
			if r.For == nil || c.For == nil || *r.For != *c.For || r.Labels["severity"] != c.Labels["severity"] {
				t.Errorf("%s: for %v severity %q, the chart's for %v severity %q", r.Alert, r.For, r.Labels["severity"], c.For, c.Labels["severity"])
			}
		}
	}
	if n != len(chart) || n < 3 {
		t.Errorf("%d alerts in the plain rules file, %d in the chart's berth-replication group", n, len(chart))
	}
}
