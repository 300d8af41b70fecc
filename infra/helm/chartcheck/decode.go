package chartcheck

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// ErrUnknownKind is returned for an object whose apiVersion and kind have
// no type here: the chart renders nothing that cannot be checked.
var ErrUnknownKind = errors.New("chartcheck: unknown apiVersion/kind")

// Object is one rendered object, decoded into its typed value (a pointer,
// e.g. *appsv1.StatefulSet).
type Object struct {
	APIVersion string
	Kind       string
	Name       string
	Source     string // the template it came from (helm's "# Source:" line)
	Value      any
}

// kinds holds a constructor per apiVersion and kind the chart may render.
var kinds = map[string]func() any{
	"v1/Service":                               func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                        func() any { return &corev1.ServiceAccount{} },
	"v1/ConfigMap":                             func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                                func() any { return &corev1.Secret{} },
	"v1/PersistentVolumeClaim":                 func() any { return &corev1.PersistentVolumeClaim{} },
	"apps/v1/Deployment":                       func() any { return &appsv1.Deployment{} },
	"apps/v1/StatefulSet":                      func() any { return &appsv1.StatefulSet{} },
	"batch/v1/Job":                             func() any { return &batchv1.Job{} },
	"policy/v1/PodDisruptionBudget":            func() any { return &policyv1.PodDisruptionBudget{} },
	"autoscaling/v2/HorizontalPodAutoscaler":   func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
	"networking.k8s.io/v1/NetworkPolicy":       func() any { return &networkingv1.NetworkPolicy{} },
	"networking.k8s.io/v1/Ingress":             func() any { return &networkingv1.Ingress{} },
	"rbac.authorization.k8s.io/v1/Role":        func() any { return &rbacv1.Role{} },
	"rbac.authorization.k8s.io/v1/RoleBinding": func() any { return &rbacv1.RoleBinding{} },
	"monitoring.coreos.com/v1/ServiceMonitor":  func() any { return &monitoringv1.ServiceMonitor{} },
	"monitoring.coreos.com/v1/PrometheusRule":  func() any { return &monitoringv1.PrometheusRule{} },
}

// Decode splits a multi-document manifest (helm template's output) and
// strictly decodes each object into its type: an unknown or duplicated
// field, or an unknown kind, is an error naming the object's source.
func Decode(manifest []byte) ([]Object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifest)))
	var objs []Object
	for {
		doc, err := r.Read()
		if err == io.EOF {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("chartcheck: split manifest: %w", err)
		}
		src := sourceOf(doc)
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, fmt.Errorf("chartcheck: %s: %w", src, err)
		}
		if meta.APIVersion == "" && meta.Kind == "" {
			continue // an empty document (a template that rendered nothing)
		}
		newValue, ok := kinds[meta.APIVersion+"/"+meta.Kind]
		if !ok {
			return nil, fmt.Errorf("%w: %s %s in %s", ErrUnknownKind, meta.APIVersion, meta.Kind, src)
		}
		v := newValue()
		if err := yaml.UnmarshalStrict(doc, v); err != nil {
			return nil, fmt.Errorf("chartcheck: %s %s/%s in %s: %w", meta.APIVersion, meta.Kind, meta.Metadata.Name, src, err)
		}
		objs = append(objs, Object{APIVersion: meta.APIVersion, Kind: meta.Kind, Name: meta.Metadata.Name, Source: src, Value: v})
	}
}

// sourceOf returns the template path of helm's "# Source: " comment.
func sourceOf(doc []byte) string {
	const prefix = "# Source: "
	for line := range bytes.Lines(doc) {
		if rest, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte(prefix)); ok {
			return string(rest)
		}
	}
	return "(unknown template)"
}
