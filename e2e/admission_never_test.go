//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// What issue 39 found the operator's admission policy admitted although airlock never writes it
// (docs/security.md, "The operator writes only what airlock builds"): each case here was admitted
// by the policy before it, and is refused by the policies of manifests/rbac.

// keepFinalizer holds the test's claim while an operator (the real node's) might reap it.
const keepFinalizer = "e2e.airlock.dev/keep"

// servePolicyClaim makes the namespace of claim one airlock serves, as the policies ask: an
// AgentRuntime, a ToolRegistry and the claim itself with its frozen record (status.frozen). It
// returns the claim with its UID, once the API server's policies see it (a dry run of its pod
// is admitted: the policies read runtimes and claims from the API server's own informers).
func servePolicyClaim(t *testing.T, ctx context.Context, claim *airlockv1alpha1.SandboxClaim) *airlockv1alpha1.SandboxClaim {
	t.Helper()
	ns := claim.Namespace
	if _, err := airlockClient.AirlockV1alpha1().AgentRuntimes(ns).Create(ctx, validRuntime(ns), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the runtime: %v", err)
	}
	if _, err := airlockClient.AirlockV1alpha1().ToolRegistries(ns).Create(ctx, validRegistry(ns), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the registry: %v", err)
	}
	frozen := claim.Status.Frozen
	c := claim.DeepCopy()
	c.UID, c.Status, c.Finalizers = "", airlockv1alpha1.SandboxClaimStatus{}, []string{keepFinalizer}
	created, err := airlockClient.AirlockV1alpha1().SandboxClaims(ns).Create(ctx, c, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the claim: %v", err)
	}
	name := created.Name
	t.Cleanup(func() {
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		_, err := airlockClient.AirlockV1alpha1().SandboxClaims(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("releasing the claim: %v", err)
		}
	})
	// On the real node the in-cluster operator writes the claim's status too: the record is
	// written on the latest claim, again after a conflict.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		latest, err := airlockClient.AirlockV1alpha1().SandboxClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		latest.Status.Frozen = frozen
		created, err = airlockClient.AirlockV1alpha1().SandboxClaims(ns).UpdateStatus(ctx, latest, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("freezing the claim's record: %v", err)
	}
	// A RuntimeClass and a PriorityClass that exist, so that Kubernetes' own admission lets the
	// pods that name them through and the policy is what refuses them.
	adminObject(t, ctx, func(ctx context.Context) (*nodev1.RuntimeClass, error) {
		return kubeClient.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "e2e-other"}, Handler: "other"}, metav1.CreateOptions{})
	}, func(ctx context.Context) error {
		return kubeClient.NodeV1().RuntimeClasses().Delete(ctx, "e2e-other", metav1.DeleteOptions{})
	})
	adminObject(t, ctx, func(ctx context.Context) (*schedulingv1.PriorityClass, error) {
		return kubeClient.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "e2e-high"}, Value: 100000}, metav1.CreateOptions{})
	}, func(ctx context.Context) error {
		return kubeClient.SchedulingV1().PriorityClasses().Delete(ctx, "e2e-high", metav1.DeleteOptions{})
	})
	waitParamPolicies(t, ctx, created)
	return created
}

// waitParamPolicies returns once the API server enforces the param policies (each loaded, its
// params' informer synced) and sees the claim: a dry run that one of them refuses is refused,
// and the claim's pod is admitted. Against a policy set without them, it returns at once.
func waitParamPolicies(t *testing.T, ctx context.Context, claim *airlockv1alpha1.SandboxClaim) {
	t.Helper()
	op := asOperator(t)
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	pod := policyClaimPod(claim)
	probes := map[string]func(p *corev1.Pod){
		"airlock-operator-claim-record": func(p *corev1.Pod) { p.Spec.Containers[0].Image = "example.com/probe:v1" },
		"airlock-operator-pull-secrets": func(p *corev1.Pod) { p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "probe"}} },
		"airlock-operator-priority":     func(p *corev1.Pod) { p.Spec.PriorityClassName = "e2e-high" },
	}
	for name := range probes {
		if _, err := kubeClient.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			delete(probes, name) // not installed: nothing to wait for
		}
	}
	eventually(t, time.Minute, "the param policies in force", func(ctx context.Context) (bool, error) {
		for name, mutate := range probes {
			p := pod.DeepCopy()
			mutate(p)
			if _, err := op.CoreV1().Pods(p.Namespace).Create(ctx, p, dryRun); err == nil || !strings.Contains(err.Error(), "'"+name+"'") {
				return false, nil
			}
		}
		_, err := op.CoreV1().Pods(pod.Namespace).Create(ctx, pod, dryRun)
		return err == nil, nil
	})
}

// adminObject creates a cluster-scoped object as the suite's administrator, gone with the test.
func adminObject[T any](t *testing.T, ctx context.Context, create func(context.Context) (T, error), remove func(context.Context) error) {
	t.Helper()
	if _, err := create(ctx); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := remove(context.Background()); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("cleanup: %v", err)
		}
	})
}

// neverCase is a write airlock never makes, and the words of the rule that must refuse it; when
// two policies refuse it, the API server names one of them, either.
type neverCase struct {
	write func() error
	want  string
	or    string
}

// refusedAs says whether err is a refusal that says want, or or.
func refusedAs(err error, c neverCase) bool {
	return err != nil && (strings.Contains(err.Error(), c.want) || c.or != "" && strings.Contains(err.Error(), c.or))
}

// paramsNotFound is how the API server refuses for a policy whose binding finds no param.
const paramsNotFound = "no params found for policy binding"

// checkPolicyRefusesWhatAirlockNeverWrites: issue 39's fifteen writes, each refused by the
// policy rule named, through the API server as the operator's ServiceAccount (dry runs).
func checkPolicyRefusesWhatAirlockNeverWrites(t *testing.T, ctx context.Context, op kubernetes.Interface, claim *airlockv1alpha1.SandboxClaim, pod *corev1.Pod) {
	t.Helper()
	cases := map[string]neverCase{}
	for name, c := range neverPods(t, ctx, op, pod) {
		cases[name] = c
	}
	for name, c := range neverElsewhere(t, ctx, op, claim, pod) {
		cases[name] = c
	}
	for name, c := range neverOutOfShard(t, ctx, op, claim, pod) {
		cases[name] = c
	}
	for name, c := range neverJobs(t, ctx, op, claim) {
		cases[name] = c
	}
	for name, c := range neverRecordRewrite(t, ctx, claim) {
		cases[name] = c
	}
	for name, tc := range cases {
		if err := tc.write(); !refusedAs(err, tc) {
			t.Errorf("the operator's %s: %v; want refused: %s", name, err, tc.want)
		}
	}
	checkNoImageChange(t, ctx, op, pod)
}

// neverOutOfShard are a claim and a claim's pod out of the claim's shard (the label the
// claim-record policy's bindings select by): each would be weighed against no record.
func neverOutOfShard(t *testing.T, ctx context.Context, op kubernetes.Interface, claim *airlockv1alpha1.SandboxClaim, pod *corev1.Pod) map[string]neverCase {
	t.Helper()
	opAirlock, err := airlockclientset.NewForConfig(operatorConfig())
	if err != nil {
		t.Fatal(err)
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	const want = "carries airlock.dev/claim-shard, the last character of the claim's name"
	podIn := func(shard string) func() error {
		p := pod.DeepCopy()
		if shard == "" {
			delete(p.Labels, airlockv1alpha1.LabelClaimShard)
		} else {
			p.Labels[airlockv1alpha1.LabelClaimShard] = shard
		}
		return func() error { _, err := op.CoreV1().Pods(p.Namespace).Create(ctx, p, dryRun); return err }
	}
	return map[string]neverCase{
		"pod without its claim's shard": {write: podIn(""), want: want},
		"pod in another shard":          {write: podIn("x"), want: want},
		"claim without its shard": {write: func() error {
			c := claim.DeepCopy()
			c.Name, c.UID, c.ResourceVersion, c.Status = "agent-99999999ab", "", "", airlockv1alpha1.SandboxClaimStatus{}
			c.Labels = map[string]string{airlockv1alpha1.LabelClaimShard: "a"}
			_, err := opAirlock.AirlockV1alpha1().SandboxClaims(c.Namespace).Create(ctx, c, dryRun)
			return err
		}, want: want},
	}
}

// neverPods are the claim's pod with one thing airlock never builds.
func neverPods(t *testing.T, ctx context.Context, op kubernetes.Interface, pod *corev1.Pod) map[string]neverCase {
	t.Helper()
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	podWith := func(mutate func(p *corev1.Pod, s *corev1.PodSpec, c *corev1.Container)) func() error {
		p := pod.DeepCopy()
		mutate(p, &p.Spec, &p.Spec.Containers[0])
		return func() error { _, err := op.CoreV1().Pods(p.Namespace).Create(ctx, p, dryRun); return err }
	}
	workspace := func(s *corev1.PodSpec) *corev1.PersistentVolumeClaimVolumeSource {
		for i := range s.Volumes {
			if s.Volumes[i].PersistentVolumeClaim != nil {
				return s.Volumes[i].PersistentVolumeClaim
			}
		}
		t.Fatal("the claim's pod has no workspace volume")
		return nil
	}
	return map[string]neverCase{
		"pod mounting another workload's PVC": {write: podWith(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) {
			workspace(s).ClaimName = "database-data"
		}), want: "its record's runtime class, workspace PVC"},
		"pod mounting a ConfigMap airlock does not write": {write: podWith(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: sandboxpod.EgressCAVolumeName, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}})
		}), want: "egress CA bundle ConfigMap, and no other"},
		"pod mounting a ConfigMap as a volume of its own": {write: podWith(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "settings", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}})
		}), want: "mounts no ConfigMap but a claim's egress CA bundle", or: "egress CA bundle ConfigMap, and no other"},
		"pod running another image": {write: podWith(func(_ *corev1.Pod, _ *corev1.PodSpec, c *corev1.Container) { c.Image = "example.com/other:v1" }),
			want: "runs its claim's record"},
		"pod running another command": {write: podWith(func(_ *corev1.Pod, _ *corev1.PodSpec, c *corev1.Container) {
			c.Command = []string{"/bin/sh", "-c", "cat /workspace/* > /dev/termination-log", "--"}
		}), want: "runs one container with its image's entrypoint"},
		"pod with fsGroup and runAsUser 999": {write: podWith(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) {
			s.SecurityContext.FSGroup, s.SecurityContext.RunAsUser = ptr.To[int64](999), ptr.To[int64](999)
		}), want: "airlock's security context exactly"},
		"pod with AppArmor Unconfined": {write: podWith(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) {
			s.SecurityContext.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		}), want: "airlock's security context exactly"},
		"pod with an AppArmor annotation": {write: podWith(func(p *corev1.Pod, _ *corev1.PodSpec, _ *corev1.Container) {
			p.Annotations["container.apparmor.security.beta.kubernetes.io/"+sandboxpod.ContainerName] = "unconfined"
		}), want: "AppArmor"},
		"pod with SELinux type spc_t": {write: podWith(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) {
			s.SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"}
		}), want: "airlock's security context exactly"},
		"pod pulling with another Secret": {write: podWith(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) {
			s.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry-credentials"}}
		}), want: "pulls with no Secret but those its namespace's default ServiceAccount gives"},
		"pod of another RuntimeClass": {write: podWith(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) { s.RuntimeClassName = ptr.To("e2e-other") }),
			want: "its record's runtime class"},
		"pod of another priority": {write: podWith(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) { s.PriorityClassName = "e2e-high" }),
			want: "no priority class but the cluster's default"},
	}
}

// neverElsewhere are Secrets, pods, NetworkPolicies and Events airlock never writes.
func neverElsewhere(t *testing.T, ctx context.Context, op kubernetes.Interface, claim *airlockv1alpha1.SandboxClaim, pod *corev1.Pod) map[string]neverCase {
	t.Helper()
	ns := claim.Namespace
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	unserved := newNamespaceAt(t, "airlock-unserved", "privileged")
	token := sandboxpod.TokenSecret(claim, claimtoken.ClaimSecretName(claim.Name, "token"), "token")
	token.OwnerReferences = nil
	np := sandboxpod.ClaimNetworkPolicy(claim, claim.Status.Frozen, nil)
	if _, err := kubeClient.NetworkingV1().NetworkPolicies(ns).Create(ctx, sandboxpod.DefaultDenyPolicy(ns), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("the namespace's deny-all: %v", err)
	}
	claimEvent := func(namespace string) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: claim.Name + "."},
			InvolvedObject: corev1.ObjectReference{APIVersion: airlockv1alpha1.SchemeGroupVersion.String(), Kind: "SandboxClaim", Namespace: namespace, Name: claim.Name, UID: claim.UID},
			Reason:         "Bound", Message: "bound", Type: corev1.EventTypeNormal, Source: corev1.EventSource{Component: "airlock-operator"}}
	}
	return map[string]neverCase{
		"Event about a Pod": {write: func() error {
			e := claimEvent(ns)
			e.InvolvedObject = corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: "web"}
			_, err := op.CoreV1().Events(ns).Create(ctx, e, dryRun)
			return err
		}, want: "an Event the airlock operator writes is about a SandboxClaim"},
		"sandbox pod in a namespace with no runtime or registry": {write: func() error {
			p := pod.DeepCopy()
			p.Namespace = unserved
			_, err := op.CoreV1().Pods(unserved).Create(ctx, p, dryRun)
			return err
		}, want: "only in a namespace that holds an AgentRuntime", or: paramsNotFound},
		"claim-token-shaped Secret in a namespace with no runtime or registry": {write: func() error {
			s := token.DeepCopy()
			s.Namespace = unserved
			_, err := op.CoreV1().Secrets(unserved).Create(ctx, s, dryRun)
			return err
		}, want: "only in a namespace that holds an AgentRuntime", or: paramsNotFound},
		"Event in kube-system": {write: func() error {
			_, err := op.CoreV1().Events(metav1.NamespaceSystem).Create(ctx, claimEvent(metav1.NamespaceSystem), dryRun)
			return err
		}, want: "writes nothing in kube-system"},
		"deletion of the namespace's standing deny-all": {write: func() error {
			return op.NetworkingV1().NetworkPolicies(ns).Delete(ctx, sandboxpod.DefaultDenyPolicyName, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		}, want: "never deletes a namespace's standing deny-all"},
		"NetworkPolicy opening a sandbox to labelled pods of any namespace": {write: func() error {
			n := np.DeepCopy()
			n.Spec.Egress = append(n.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "payments"}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			}}})
			_, err := op.NetworkingV1().NetworkPolicies(ns).Create(ctx, n, dryRun)
			return err
		}, want: "lets out only to the namespaces of the Services its record allows"},
	}
}

// checkNoImageChange: the operator may not change the image of a pod it created (a patch of a
// running pod's image).
func checkNoImageChange(t *testing.T, ctx context.Context, op kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	p := pod.DeepCopy()
	p.Name = pod.Name + "-image"
	created, err := kubeClient.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the administrator's copy of the claim's pod: %v", err)
	}
	defer func() {
		_ = kubeClient.CoreV1().Pods(p.Namespace).Delete(context.Background(), created.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}()
	b, err := json.Marshal(map[string]any{"spec": map[string]any{"containers": []map[string]any{{"name": sandboxpod.ContainerName, "image": "example.com/other:v1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = op.CoreV1().Pods(p.Namespace).Patch(ctx, created.Name, types.StrategicMergePatchType, b, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	if want := "never changes the spec of a pod"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("the operator's patch of a running pod's image: %v; want refused: %s", err, want)
	}
}
