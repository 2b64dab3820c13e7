package sandboxpod

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/isolation"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
)

// TestNodeAddressForTheIsolationProbe: a claim's pod and a warm member's both hold the node's
// address (the downward API's status.hostIP) in isolation.NodeIPEnv, last and once, for
// sandboxd's node probe; a class's variable of that name never reaches the pod, and the class is
// refused.
func TestNodeAddressForTheIsolationProbe(t *testing.T) {
	want := corev1.EnvVar{Name: isolation.NodeIPEnv, ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.hostIP"},
	}}
	class := sandboxpodtest.Class("codegen")
	class.Spec.Env = append(class.Spec.Env, corev1.EnvVar{Name: "GOFLAGS", Value: "-mod=mod"}, corev1.EnvVar{Name: isolation.NodeIPEnv, Value: "127.0.0.1"})
	entry := &sandboxpodtest.Registry("tools", "").Spec.Sandboxes[0]
	record := Freeze(class, entry)
	reg := sandboxpodtest.Registry("tools", "")
	for name, pod := range map[string]*corev1.Pod{
		"claim":       ClaimPod(sandboxpodtest.Claim("c1", "s1", airlockv1alpha1.ClaimBinding, sandboxpodtest.T0), record),
		"warm member": MemberPod(reg, entry.Name, PoolKey(reg.UID, entry.Name, record), "tools-codegen-abcdefabcdef", record),
		"egress":      ClaimPod(bound("c2"), egressRecord(t)),
	} {
		t.Run(name, func(t *testing.T) {
			env := envOf(pod)
			if diff := cmp.Diff([]corev1.EnvVar{want}, env[isolation.NodeIPEnv]); diff != "" {
				t.Errorf("%s (-want +got):\n%s", isolation.NodeIPEnv, diff)
			}
			all := pod.Spec.Containers[0].Env
			if all[len(all)-1].Name != isolation.NodeIPEnv || name != "egress" && (len(env["GOFLAGS"]) != 1 || all[0].Name != "HOME") {
				t.Errorf("env %+v: want the class's first, the node's address last", all)
			}
		})
	}
	if why := ClassConflict(class); !strings.Contains(why, "env AIRLOCK_NODE_IP is the operator's") {
		t.Errorf("ClassConflict = %q, want the class's %s refused", why, isolation.NodeIPEnv)
	}
}
