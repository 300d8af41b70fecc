package chartcheck

import (
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// PodTemplate returns the pod template of a workload object (Deployment,
// StatefulSet, Job), or nil for any other object.
func PodTemplate(v any) *corev1.PodTemplateSpec {
	switch w := v.(type) {
	case *appsv1.Deployment:
		return &w.Spec.Template
	case *appsv1.StatefulSet:
		return &w.Spec.Template
	case *batchv1.Job:
		return &w.Spec.Template
	}
	return nil
}
