package sandboxpod

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// quantityEqual compares quantities by value.
var quantityEqual = cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })

// list builds a ResourceList from name/quantity pairs.
func list(pairs ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i+1 < len(pairs); i += 2 {
		out[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
	}
	return out
}

// TestBoundedResources: every sandbox container gets a request and a limit of CPU, memory and
// ephemeral storage; what the class sets wins, and the result is always valid (request ≤ limit).
func TestBoundedResources(t *testing.T) {
	tests := map[string]struct {
		class, want corev1.ResourceRequirements
	}{
		"nothing set: the defaults": {
			want: corev1.ResourceRequirements{
				Requests: list("cpu", "100m", "memory", "256Mi", "ephemeral-storage", "512Mi"),
				Limits:   list("cpu", "2", "memory", "4Gi", "ephemeral-storage", "10Gi"),
			},
		},
		"the sample class: its requests and memory limit kept, the rest defaulted": {
			class: corev1.ResourceRequirements{Requests: list("cpu", "250m", "memory", "512Mi"), Limits: list("memory", "4Gi")},
			want: corev1.ResourceRequirements{
				Requests: list("cpu", "250m", "memory", "512Mi", "ephemeral-storage", "512Mi"),
				Limits:   list("cpu", "2", "memory", "4Gi", "ephemeral-storage", "10Gi"),
			},
		},
		"a request above the default limit raises the limit": {
			class: corev1.ResourceRequirements{Requests: list("memory", "8Gi", "ephemeral-storage", "20Gi")},
			want: corev1.ResourceRequirements{
				Requests: list("cpu", "100m", "memory", "8Gi", "ephemeral-storage", "20Gi"),
				Limits:   list("cpu", "2", "memory", "8Gi", "ephemeral-storage", "20Gi"),
			},
		},
		"a limit without a request requests the limit, even below the default request": {
			class: corev1.ResourceRequirements{Limits: list("cpu", "50m", "ephemeral-storage", "64Mi")},
			want: corev1.ResourceRequirements{
				Requests: list("cpu", "50m", "memory", "256Mi", "ephemeral-storage", "64Mi"),
				Limits:   list("cpu", "50m", "memory", "4Gi", "ephemeral-storage", "64Mi"),
			},
		},
		"both set: kept as they are, other resources kept too": {
			class: corev1.ResourceRequirements{
				Requests: list("cpu", "1", "memory", "1Gi", "ephemeral-storage", "1Gi", "nvidia.com/gpu", "1"),
				Limits:   list("cpu", "4", "memory", "16Gi", "ephemeral-storage", "50Gi", "nvidia.com/gpu", "1"),
			},
			want: corev1.ResourceRequirements{
				Requests: list("cpu", "1", "memory", "1Gi", "ephemeral-storage", "1Gi", "nvidia.com/gpu", "1"),
				Limits:   list("cpu", "4", "memory", "16Gi", "ephemeral-storage", "50Gi", "nvidia.com/gpu", "1"),
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			classBefore := tc.class.DeepCopy()
			got := boundedResources(tc.class)
			if diff := cmp.Diff(tc.want, got, quantityEqual); diff != "" {
				t.Errorf("resources (-want +got):\n%s", diff)
			}
			for name, limit := range got.Limits {
				if request, ok := got.Requests[name]; !ok || request.Cmp(limit) > 0 {
					t.Errorf("%s: request %v above limit %v (or missing)", name, request.String(), limit.String())
				}
			}
			if diff := cmp.Diff(*classBefore, tc.class, quantityEqual); diff != "" {
				t.Errorf("the class's resources were changed (-before +after):\n%s", diff)
			}
		})
	}
}
