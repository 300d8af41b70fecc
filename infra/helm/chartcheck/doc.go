// Package chartcheck validates Berth's Helm chart (infra/helm/berth)
// offline: it runs the pinned helm (infra/dev/helm.sh installs it) to lint
// and render the chart, and strictly decodes every rendered object into its
// k8s.io/api (or Prometheus Operator) type, so an unknown or misspelled
// field fails instead of being dropped by the API server. The tests beside
// it hold the chart's policies: pinned images, resources and probes,
// non-root, read-only root filesystems, disruption budgets, network
// policies, and no secret in clear.
//
// It is its own module so that k8s.io/api never enters the service modules.
package chartcheck
