package sandboxpod

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// StripPod is the transform of the sandbox pod informer: it keeps of a pod only what the claim
// controller reads (whose pod it is, what it runs, the token Secret it mounts, its Node, whether
// it is ready, at which IP, and why it is not; a warm member's evidence record and, for a resume member, the kept directory it mounts), so that 2,000 cached sandbox pods cost little memory.
// A stripped pod is never written back: its labels are repaired with a patch
// (objectControl.PatchLabels). Anything else (a tombstone) passes through.
func StripPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:              pod.Name,
			Namespace:         pod.Namespace,
			UID:               pod.UID,
			ResourceVersion:   pod.ResourceVersion,
			CreationTimestamp: pod.CreationTimestamp,
			DeletionTimestamp: pod.DeletionTimestamp,
			Labels:            pod.Labels,
			OwnerReferences:   pod.OwnerReferences,
		},
		Status: corev1.PodStatus{
			Phase:   pod.Status.Phase,
			Reason:  pod.Status.Reason,
			Message: pod.Status.Message,
			PodIP:   pod.Status.PodIP,
		},
	}
	// A warm member's evidence record (AnnotationIsolationEvidence), which the claim controller
	// judges at adoption, and a resume member's directory (AnnotationResumesDir), which a claim
	// that adopts it works in (a member keeps both once adopted); no other annotation, and none
	// of a claim's own pod.
	if pod.Labels[airlockv1alpha1.LabelWarmMember] != "" {
		for _, k := range []string{airlockv1alpha1.AnnotationIsolationEvidence, airlockv1alpha1.AnnotationResumesDir} {
			if v, ok := pod.Annotations[k]; ok {
				if out.Annotations == nil {
					out.Annotations = map[string]string{}
				}
				out.Annotations[k] = v
			}
		}
	}
	// Its Node: a pod that is not ready or is stuck terminating is looked at on it (issue 24,
	// the claim controller's nodeloss.go).
	out.Spec.NodeName = pod.Spec.NodeName
	for _, c := range pod.Spec.Containers {
		out.Spec.Containers = append(out.Spec.Containers, corev1.Container{Name: c.Name, Image: c.Image, Args: c.Args})
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == TokenVolumeName && v.Secret != nil {
			out.Spec.Volumes = append(out.Spec.Volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{
				Secret: &corev1.SecretVolumeSource{SecretName: v.Secret.SecretName},
			}})
		}
	}
	for _, c := range pod.Status.Conditions {
		out.Status.Conditions = append(out.Status.Conditions, corev1.PodCondition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message})
	}
	out.Status.InitContainerStatuses = stripContainerStatuses(pod.Status.InitContainerStatuses)
	out.Status.ContainerStatuses = stripContainerStatuses(pod.Status.ContainerStatuses)
	return out, nil
}

// stripContainerStatuses keeps a container's name and why it is waiting.
func stripContainerStatuses(in []corev1.ContainerStatus) []corev1.ContainerStatus {
	var out []corev1.ContainerStatus
	for _, s := range in {
		stripped := corev1.ContainerStatus{Name: s.Name}
		if w := s.State.Waiting; w != nil {
			stripped.State.Waiting = &corev1.ContainerStateWaiting{Reason: w.Reason, Message: w.Message}
		}
		out = append(out, stripped)
	}
	return out
}

// StripService is the transform of the allowed-Service informer: it keeps of a Service only what
// a NetworkPolicy is built from (namespace, name, selector, ports), the cluster IP (the egress
// gateway's address, FreezeGateway) and what a cache needs (uid,
// resourceVersion), so that caching every Service of a large cluster costs little memory.
// Anything else (a tombstone) passes through.
func StripService(obj any) (any, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return obj, nil
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:              svc.Name,
			Namespace:         svc.Namespace,
			UID:               svc.UID,
			ResourceVersion:   svc.ResourceVersion,
			DeletionTimestamp: svc.DeletionTimestamp,
		},
		Spec: corev1.ServiceSpec{Selector: svc.Spec.Selector, Ports: svc.Spec.Ports, ClusterIP: svc.Spec.ClusterIP},
	}, nil
}

// StripManagedFields is the transform of caches that read no managed fields: they are a large
// part of an object that several managers write (a claim's status, a pod's). What is not an
// object (a tombstone) passes through.
func StripManagedFields(obj any) (any, error) {
	if accessor, err := meta.Accessor(obj); err == nil && accessor.GetManagedFields() != nil {
		accessor.SetManagedFields(nil)
	}
	return obj, nil
}
