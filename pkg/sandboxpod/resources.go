package sandboxpod

// Bounded sandboxes (docs/decisions.md, "Bounded sandboxes"): every sandbox container has a
// request and a limit of CPU, memory and ephemeral storage. A class sets any of them; what it
// leaves out comes from sandboxDefaults. The ephemeral-storage limit bounds the container's
// writable layer and logs (with its emptyDir volumes, which have their own sizeLimit), so that a
// runaway build is evicted alone instead of filling the node's disk and evicting its neighbours.
// The result is part of the claim's frozen record: a class edit never changes a running sandbox.

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// sandboxDefaults are the requests and limits a sandbox container gets for each resource its
// class does not set.
var sandboxDefaults = corev1.ResourceRequirements{
	Requests: corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("100m"),
		corev1.ResourceMemory:           resource.MustParse("256Mi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("512Mi"),
	},
	Limits: corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("2"),
		corev1.ResourceMemory:           resource.MustParse("4Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("10Gi"),
	},
}

// boundedResources returns the class's resources with a request and a limit for each of CPU,
// memory and ephemeral storage: what the class sets is kept; a missing limit is the default's,
// raised to the class's request if that is higher; a missing request is the default's, lowered
// to the limit if that is lower (a request above its limit is refused by the API server). A
// limit without a request requests the limit, as the API server would default it.
func boundedResources(class corev1.ResourceRequirements) corev1.ResourceRequirements {
	out := *class.DeepCopy()
	if out.Requests == nil {
		out.Requests = corev1.ResourceList{}
	}
	if out.Limits == nil {
		out.Limits = corev1.ResourceList{}
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		request, hasRequest := out.Requests[name]
		limit, hasLimit := out.Limits[name]
		switch {
		case hasRequest && hasLimit:
		case hasLimit: // the API server's own default
			out.Requests[name] = limit.DeepCopy()
		case hasRequest:
			limit = sandboxDefaults.Limits[name]
			if request.Cmp(limit) > 0 {
				limit = request
			}
			out.Limits[name] = limit.DeepCopy()
		default:
			request, limit = sandboxDefaults.Requests[name], sandboxDefaults.Limits[name]
			out.Requests[name] = request.DeepCopy()
			out.Limits[name] = limit.DeepCopy()
		}
	}
	return out
}
