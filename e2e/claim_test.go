//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimname"
	"github.com/airlock-dev/airlock/pkg/controller/claim"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// claimEnv is one namespace set up for claims: a content PVC bound to a PV, a class, a registry
// and a runtime.
type claimEnv struct {
	ns      string
	class   string
	runtime *airlockv1alpha1.AgentRuntime
}

type claimEnvOptions struct {
	maxConcurrent, maxPerSession, maxInstances int32
	idleTimeout                                time.Duration
	targetPath                                 string
	// workspaceRetention, when set, is the runtime's spec.sandbox.workspaceRetention.
	workspaceRetention *time.Duration
}

// newClaimEnv creates a restricted namespace with everything a claim needs.
func newClaimEnv(t *testing.T, prefix string, o claimEnvOptions) *claimEnv {
	t.Helper()
	ctx := context.Background()
	ns := newNamespace(t, prefix)
	e := &claimEnv{ns: ns, class: "e2e-" + ns}

	// The content PVC, pre-bound to a PV so that the scheduler places the pods. Where the node is
	// this machine (a real kubelet), the directory is made world-writable first, so that the
	// subPath directories the kubelet creates in it are writable by the sandbox's uid; kwok never
	// mounts it.
	hostDir := filepath.Join(os.TempDir(), "airlock-e2e", ns)
	if err := os.MkdirAll(hostDir, 0o777); err == nil {
		_ = os.Chmod(hostDir, 0o777)
		t.Cleanup(func() { _ = os.RemoveAll(hostDir) })
	}
	createContentVolume(t, ns, hostDir, nil)

	class := validClass(e.class)
	class.Spec.Image = e2eImage()
	class.Spec.Ports = []airlockv1alpha1.SandboxPort{{Name: "mcp", Port: 8080}}
	if _, err := airlockClient.AirlockV1alpha1().SandboxClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating class: %v", err)
	}
	t.Cleanup(func() {
		_ = airlockClient.AirlockV1alpha1().SandboxClasses().Delete(context.Background(), e.class, metav1.DeleteOptions{})
	})
	registry := validRegistry(ns)
	registry.Spec.Sandboxes[0].Class = e.class
	registry.Spec.Sandboxes[0].TargetPath = o.targetPath
	registry.Spec.Sandboxes[0].MaxInstances = o.maxInstances
	if _, err := airlockClient.AirlockV1alpha1().ToolRegistries(ns).Create(ctx, registry, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating registry: %v", err)
	}
	rt := &airlockv1alpha1.AgentRuntime{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
		Spec: airlockv1alpha1.AgentRuntimeSpec{
			ServiceAccountName: "agent",
			ToolRegistryRef:    airlockv1alpha1.LocalObjectReference{Name: registry.Name},
			Sandbox: airlockv1alpha1.SandboxPolicy{
				Enabled:       true,
				MaxConcurrent: o.maxConcurrent,
				MaxPerSession: o.maxPerSession,
			},
		},
	}
	if o.idleTimeout > 0 {
		rt.Spec.Sandbox.IdleTimeout = &metav1.Duration{Duration: o.idleTimeout}
	}
	if o.workspaceRetention != nil {
		rt.Spec.Sandbox.WorkspaceRetention = &metav1.Duration{Duration: *o.workspaceRetention}
	}
	created, err := airlockClient.AirlockV1alpha1().AgentRuntimes(ns).Create(ctx, rt, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating runtime: %v", err)
	}
	e.runtime = created
	return e
}

// createClaim creates the claim the Sandbox API would create for session and handle.
func (e *claimEnv) createClaim(t *testing.T, session, handle, targetPath string) *airlockv1alpha1.SandboxClaim {
	t.Helper()
	name := claimname.For(e.runtime.Name, session, handle)
	return e.createClaimIn(t, session, handle, targetPath, e.ns+"/sandboxes/"+workspace.ClaimDirName(name, e.runtime.UID))
}

// createTracedClaim creates the claim the Sandbox API would create for session and handle when
// its acquire was traced: with the acquire span's traceparent in its airlock.dev/traceparent.
func (e *claimEnv) createTracedClaim(t *testing.T, session, handle, targetPath, traceparent string) *airlockv1alpha1.SandboxClaim {
	t.Helper()
	name := claimname.For(e.runtime.Name, session, handle)
	return e.createClaimWith(t, session, handle, targetPath, e.ns+"/sandboxes/"+workspace.ClaimDirName(name, e.runtime.UID),
		map[string]string{airlockv1alpha1.AnnotationTraceparent: traceparent})
}

// createClaimIn creates the claim the Sandbox API would create for session and handle, with the
// workspace directory dir.
func (e *claimEnv) createClaimIn(t *testing.T, session, handle, targetPath, dir string) *airlockv1alpha1.SandboxClaim {
	t.Helper()
	return e.createClaimWith(t, session, handle, targetPath, dir, nil)
}

// createClaimWith creates the claim the Sandbox API would create for session and handle, with the
// workspace directory dir and the given annotations.
func (e *claimEnv) createClaimWith(t *testing.T, session, handle, targetPath, dir string, annotations map[string]string) *airlockv1alpha1.SandboxClaim {
	t.Helper()
	name := claimname.For(e.runtime.Name, session, handle)
	sandbox := strings.SplitN(handle, "/", 2)[0]
	c := &airlockv1alpha1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   e.ns,
			Annotations: annotations,
			Labels: map[string]string{
				airlockv1alpha1.LabelRuntime:     e.runtime.Name,
				airlockv1alpha1.LabelSandbox:     sandbox,
				airlockv1alpha1.LabelSessionHash: claimname.SessionHash(session),
			},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(e.runtime, airlockv1alpha1.SchemeGroupVersion.WithKind("AgentRuntime"))},
		},
		Spec: airlockv1alpha1.SandboxClaimSpec{
			RuntimeName:  e.runtime.Name,
			Session:      session,
			Handle:       handle,
			Sandbox:      sandbox,
			ClassName:    e.class,
			TargetPath:   targetPath,
			WorkspaceDir: dir,
		},
	}
	created, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Create(context.Background(), c, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating claim %s: %v", name, err)
	}
	return created
}

func (e *claimEnv) getClaim(ctx context.Context, name string) (*airlockv1alpha1.SandboxClaim, error) {
	return airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Get(ctx, name, metav1.GetOptions{})
}

func (e *claimEnv) waitPhase(t *testing.T, name string, phase airlockv1alpha1.ClaimPhase, timeout time.Duration) *airlockv1alpha1.SandboxClaim {
	t.Helper()
	var got *airlockv1alpha1.SandboxClaim
	eventually(t, timeout, fmt.Sprintf("claim %s to be %s", name, phase), func(ctx context.Context) (bool, error) {
		c, err := e.getClaim(ctx, name)
		if err != nil {
			return false, err
		}
		got = c
		return c.Status.Phase == phase, nil
	})
	return got
}

func (e *claimEnv) waitGone(t *testing.T, name string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("claim %s to be deleted", name), func(ctx context.Context) (bool, error) {
		_, err := e.getClaim(ctx, name)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// phases counts the namespace's claims by phase.
func (e *claimEnv) phases(ctx context.Context) (map[airlockv1alpha1.ClaimPhase]int, []airlockv1alpha1.SandboxClaim, error) {
	list, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	out := map[airlockv1alpha1.ClaimPhase]int{}
	for _, c := range list.Items {
		out[c.Status.Phase]++
	}
	return out, list.Items, nil
}

// e2eImage is the image of the test's sandboxes and sync-back Jobs: the operator image, which has
// `airlock sandboxd` and `airlock sync` (hack/e2e-kind.sh loads this tag into kind; kwok never
// pulls it). AIRLOCK_E2E_IMAGE overrides it.
func e2eImage() string {
	if image := os.Getenv("AIRLOCK_E2E_IMAGE"); image != "" {
		return image
	}
	return "ghcr.io/airlock-dev/airlock:v0.1.0"
}

// startClaimOperator runs an operator whose lease lives in the test's namespace.
func startClaimOperator(t *testing.T, ns string) *operatorProcess {
	t.Helper()
	return startClaimOperatorWithArgs(t, ns)
}

// startClaimOperatorWithArgs runs an operator like startOperator does, with --sync-image set to
// e2eImage() and more flags.
func startClaimOperatorWithArgs(t *testing.T, ns string, extra ...string) *operatorProcess {
	t.Helper()
	p := startOperator(t, ns, "airlock-operator-e2e", append([]string{"--sync-image=" + e2eImage()}, extra...)...)
	p.waitReady(t)
	return p
}

// TestClaimBinds: a claim goes Pending → Binding → Bound with its children as SPEC section 5 says
// (a pod of its own instead of a Deployment and a Service: docs/decisions.md, "Children: a pod,
// no Service"), at its pod's IP, and its pod is admitted under the namespace's restricted Pod
// Security level.
func TestClaimBinds(t *testing.T) {
	e := newClaimEnv(t, "airlock-claim-bind", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3})
	op := startClaimOperator(t, e.ns)
	c := e.createClaim(t, "session-1", "codegen/default", "")
	bound := e.waitPhase(t, c.Name, airlockv1alpha1.ClaimBound, 60*time.Second)

	if bound.Status.BoundAt == nil {
		t.Error("Bound claim has no boundAt")
	}
	ctx := context.Background()
	p, err := kubeClient.CoreV1().Pods(e.ns).Get(ctx, c.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the claim's pod: %v", err)
	}
	wantURL := fmt.Sprintf("http://%s:8080", p.Status.PodIP) // its pod's IP: docs/decisions.md
	if p.Status.PodIP == "" || len(bound.Status.Addresses) != 1 || bound.Status.Addresses[0].URL != wantURL || bound.Status.Addresses[0].Name != "mcp" {
		t.Errorf("addresses %+v, want [{mcp %s}]", bound.Status.Addresses, wantURL)
	}
	checkOwned(t, "Pod", p.ObjectMeta, c)
	// The class says it can be built (pkg/controller/sandboxclass), and kubectl shows it.
	eventually(t, 30*time.Second, "the class's Valid condition", func(ctx context.Context) (bool, error) {
		class, err := airlockClient.AirlockV1alpha1().SandboxClasses().Get(ctx, e.class, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		cond := meta.FindStatusCondition(class.Status.Conditions, "Valid")
		return cond != nil && cond.Status == metav1.ConditionTrue && cond.ObservedGeneration == class.Generation, nil
	})
	if out, err := kubectl(ctx, "get", "sbc", e.class); err != nil || !strings.Contains(strings.SplitN(out, "\n", 2)[0], "VALID") || !strings.Contains(out, "True") {
		t.Errorf("kubectl get sbc %s: %v\n%s", e.class, err, out)
	}
	pod := p.Spec
	if pod.RestartPolicy != corev1.RestartPolicyAlways {
		t.Errorf("restartPolicy %s, want Always", pod.RestartPolicy)
	}
	if !ptr.Deref(pod.SecurityContext.RunAsNonRoot, false) || ptr.Deref(pod.AutomountServiceAccountToken, true) || ptr.Deref(pod.EnableServiceLinks, true) {
		t.Errorf("pod security: %+v automount %v serviceLinks %v", pod.SecurityContext, pod.AutomountServiceAccountToken, pod.EnableServiceLinks)
	}
	args := strings.Join(pod.Containers[0].Args, " ")
	for _, want := range []string{"--allowed-tools=Read,Bash", "--auth-token-file=" + sandboxpod.TokenFile} {
		if !strings.Contains(args, want) {
			t.Errorf("sandbox args %q lack %q", args, want)
		}
	}
	for _, get := range []func() error{
		func() error {
			_, err := kubeClient.CoreV1().Services(e.ns).Get(ctx, c.Name, metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := kubeClient.AppsV1().Deployments(e.ns).Get(ctx, c.Name, metav1.GetOptions{})
			return err
		},
	} {
		if err := get(); !apierrors.IsNotFound(err) {
			t.Errorf("a Service or Deployment of the claim: %v, want none", err)
		}
	}
	np, err := kubeClient.NetworkingV1().NetworkPolicies(e.ns).Get(ctx, c.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("networkpolicy: %v", err)
	}
	checkOwned(t, "NetworkPolicy", np.ObjectMeta, c)
	if len(np.Spec.PolicyTypes) != 2 || len(np.Spec.Egress) != 0 || len(np.Spec.Ingress) != 1 {
		t.Errorf("networkpolicy spec %+v", np.Spec)
	}
	secret := claimSecret(t, ctx, e.ns, c.Name)
	checkOwned(t, "Secret", secret.ObjectMeta, c)
	if mounted := tokenVolumeSecret(p); mounted != secret.Name {
		t.Errorf("the pod mounts Secret %q, want the claim's %q", mounted, secret.Name)
	}
	if len(secret.Data[sandboxpod.TokenKey]) < 40 {
		t.Errorf("token of %d bytes", len(secret.Data[sandboxpod.TokenKey]))
	}
	pods, err := kubeClient.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: claim.LabelClaim + "=" + c.Name})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("sandbox pods: %d, %v", len(pods.Items), err)
	}

	// Events for the phase changes, from the controller.
	eventually(t, 30*time.Second, "the claim's Admitted and Bound events", func(ctx context.Context) (bool, error) {
		events, err := kubeClient.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + c.Name})
		if err != nil {
			return false, err
		}
		seen := map[string]bool{}
		for _, ev := range events.Items {
			if ev.Source.Component == claim.ControllerName {
				seen[ev.Reason] = true
			}
		}
		return seen[claim.ReasonAdmitted] && seen[claim.ReasonBound], nil
	})

	// The runtime's status: Ready, and the claim counted.
	eventually(t, 30*time.Second, "the runtime's status", func(ctx context.Context) (bool, error) {
		rt, err := airlockClient.AirlockV1alpha1().AgentRuntimes(e.ns).Get(ctx, e.runtime.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ready := false
		for _, c := range rt.Status.Conditions {
			ready = ready || c.Type == "Ready" && c.Status == metav1.ConditionTrue
		}
		return ready && rt.Status.Claims.Bound == 1 && rt.Status.ObservedGeneration == rt.Generation, nil
	})

	// Idempotent: the syncs so far (the claim's own updates, the pod's status updates) repaired
	// nothing, since nothing drifted.
	if log, err := os.ReadFile(op.log); err != nil || strings.Contains(string(log), "does not run what its record says") || strings.Contains(string(log), "Repairing the claim's pod") {
		t.Errorf("the operator rewrote a pod that had not drifted (%v)", err)
	}
	// Drift: a pod made to run another image is deleted and created again from the record, and
	// the claim is Bound at the new pod; the token is not rotated.
	recordImage := p.Spec.Containers[0].Image
	p.Spec.Containers[0].Image = "example.com/evil:v1"
	if _, err := kubeClient.CoreV1().Pods(e.ns).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the drifted pod to be replaced from the record, and the claim Bound at it", func(ctx context.Context) (bool, error) {
		np, err := kubeClient.CoreV1().Pods(e.ns).Get(ctx, c.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil || np.UID == p.UID || np.Spec.Containers[0].Image != recordImage || np.Status.PodIP == "" {
			return false, err
		}
		got, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Get(ctx, c.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return got.Status.Phase == airlockv1alpha1.ClaimBound && len(got.Status.Addresses) == 1 &&
			got.Status.Addresses[0].URL == fmt.Sprintf("http://%s:8080", np.Status.PodIP), nil
	})
	secret2 := claimSecret(t, ctx, e.ns, c.Name)
	if secret2.Name != secret.Name || string(secret2.Data[sandboxpod.TokenKey]) != string(secret.Data[sandboxpod.TokenKey]) {
		t.Errorf("token changed")
	}
}

// claimSecret returns the claim's one token Secret (named <claim>-token-<hash of the token>),
// found by its label.
func claimSecret(t *testing.T, ctx context.Context, ns, claimName string) *corev1.Secret {
	t.Helper()
	list, err := kubeClient.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: claim.LabelClaim + "=" + claimName})
	if err != nil {
		t.Fatalf("the claim's Secret: %v", err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("%d Secrets labelled %s=%s, want 1", len(list.Items), claim.LabelClaim, claimName)
	}
	return &list.Items[0]
}

// tokenVolumeSecret returns the Secret that a claim's pod mounts at sandboxpod.TokenMountPath.
func tokenVolumeSecret(p *corev1.Pod) string {
	pod := p.Spec
	for _, m := range pod.Containers[0].VolumeMounts {
		if m.MountPath != sandboxpod.TokenMountPath {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				return v.Secret.SecretName
			}
		}
	}
	return ""
}

func checkOwned(t *testing.T, kind string, meta metav1.ObjectMeta, c *airlockv1alpha1.SandboxClaim) {
	t.Helper()
	ref := metav1.GetControllerOfNoCopy(&meta)
	if ref == nil || ref.UID != c.UID || ref.Kind != "SandboxClaim" {
		t.Errorf("%s %s is not controlled by the claim: %+v", kind, meta.Name, meta.OwnerReferences)
	}
	if meta.Labels[claim.LabelClaim] != c.Name {
		t.Errorf("%s %s lacks the %s label", kind, meta.Name, claim.LabelClaim)
	}
}

// TestClaimQueueAndPromote: maxConcurrent+2 claims leave exactly 2 Queued; deleting a Bound
// claim promotes the oldest Queued one.
func TestClaimQueueAndPromote(t *testing.T) {
	const maxConcurrent = 3
	e := newClaimEnv(t, "airlock-claim-queue", claimEnvOptions{maxConcurrent: maxConcurrent, maxPerSession: 3})
	var names []string
	for i := range maxConcurrent + 2 {
		c := e.createClaim(t, fmt.Sprintf("session-%d", i), "codegen/default", "")
		names = append(names, c.Name)
	}
	// The operator starts once every claim exists, so that its first decision sees them all. With
	// the claims arriving one by one instead, a claim admitted first keeps its place (decisions are
	// sticky) even when one that arrives after it sorts before it: creation timestamps have whole
	// seconds, and claims of the same second are ordered by name.
	startClaimOperator(t, e.ns)
	eventually(t, 60*time.Second, "3 Bound and 2 Queued", func(ctx context.Context) (bool, error) {
		p, _, err := e.phases(ctx)
		return err == nil && p[airlockv1alpha1.ClaimBound] == maxConcurrent && p[airlockv1alpha1.ClaimQueued] == 2, err
	})
	_, claims, err := e.phases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The Queued ones are the youngest by (creationTimestamp, name).
	sort.Slice(claims, func(i, j int) bool {
		a, b := claims[i], claims[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
	for i, c := range claims {
		want := airlockv1alpha1.ClaimBound
		if i >= maxConcurrent {
			want = airlockv1alpha1.ClaimQueued
		}
		if c.Status.Phase != want {
			t.Errorf("claim %d (%s) is %s, want %s", i, c.Name, c.Status.Phase, want)
		}
	}
	oldestQueued := claims[maxConcurrent].Name
	if err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Delete(context.Background(), claims[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitPhase(t, oldestQueued, airlockv1alpha1.ClaimBound, 60*time.Second)
	p, _, err := e.phases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p[airlockv1alpha1.ClaimQueued] != 1 || p[airlockv1alpha1.ClaimBound] != maxConcurrent {
		t.Errorf("after promotion: %v, want %d Bound and 1 Queued", p, maxConcurrent)
	}
}

// TestClaimFailsUnschedulable: a claim whose pod cannot be scheduled is Failed with reason
// Unschedulable when the class's startupTimeout passes, and its pod is deleted;
// closing its session deletes it.
func TestClaimFailsUnschedulable(t *testing.T) {
	e := newClaimEnv(t, "airlock-claim-fail", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3})
	class, err := airlockClient.AirlockV1alpha1().SandboxClasses().Get(context.Background(), e.class, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	class.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1000")}
	class.Spec.StartupTimeout = &metav1.Duration{Duration: 3 * time.Second}
	if _, err := airlockClient.AirlockV1alpha1().SandboxClasses().Update(context.Background(), class, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	startClaimOperator(t, e.ns)
	c := e.createClaim(t, "session-1", "codegen/default", "")
	failed := e.waitPhase(t, c.Name, airlockv1alpha1.ClaimFailed, 60*time.Second)
	if failed.Status.Reason != "Unschedulable" || !strings.Contains(failed.Status.Message, "Insufficient cpu") {
		t.Errorf("failed with %s: %q, want Unschedulable: ...Insufficient cpu...", failed.Status.Reason, failed.Status.Message)
	}
	eventually(t, 30*time.Second, "the failed claim's pod deleted", func(ctx context.Context) (bool, error) {
		_, err := kubeClient.CoreV1().Pods(e.ns).Get(ctx, c.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})

	// sessions/close marks it (as the Sandbox API does): a Failed claim is deleted, so that a
	// re-acquire of its handle does not wait on it until it expires.
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, airlockv1alpha1.AnnotationReapRequested, time.Now().UTC().Format(time.RFC3339))
	if _, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Patch(context.Background(), c.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitGone(t, c.Name, 30*time.Second)
}

// TestClaimRefusedMaxPerSession: one claim more than maxPerSession is Refused, then deleted.
func TestClaimRefusedMaxPerSession(t *testing.T) {
	e := newClaimEnv(t, "airlock-claim-refuse", claimEnvOptions{maxConcurrent: 5, maxPerSession: 1})
	startClaimOperator(t, e.ns)
	first := e.createClaim(t, "session-1", "codegen/default", "")
	e.waitPhase(t, first.Name, airlockv1alpha1.ClaimBound, 60*time.Second)
	second := e.createClaim(t, "session-1", "codegen/other", "")
	refused := e.waitPhase(t, second.Name, airlockv1alpha1.ClaimRefused, 30*time.Second)
	if refused.Status.Reason != "MaxPerSession" {
		t.Errorf("refusal reason %q, want MaxPerSession", refused.Status.Reason)
	}
	e.waitGone(t, second.Name, 30*time.Second)
	if c, err := e.getClaim(context.Background(), first.Name); err != nil || c.Status.Phase != airlockv1alpha1.ClaimBound {
		t.Errorf("the first claim is no longer Bound: %v", err)
	}
}

// TestClaimIdleReaped: a claim idle past a short idleTimeout is Reaping, its pod is deleted and
// waited for, its sync-back Job runs `airlock sync` (which copies; the workspace is kept for the
// runtime's workspaceRetention: e2e/keptworkspace_test.go), and the claim is deleted when the Job
// succeeds (kwok completes Job pods).
func TestClaimIdleReaped(t *testing.T) {
	e := newClaimEnv(t, "airlock-claim-reap", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3, idleTimeout: 5 * time.Second, targetPath: "projects/demo"})
	startClaimOperator(t, e.ns)
	c := e.createClaim(t, "session-1", "codegen/default", "projects/demo")
	e.waitPhase(t, c.Name, airlockv1alpha1.ClaimBound, 60*time.Second)

	var jobSeen bool
	eventually(t, 90*time.Second, "the sync-back Job and the claim's deletion", func(ctx context.Context) (bool, error) {
		job, err := kubeClient.BatchV1().Jobs(e.ns).Get(ctx, c.Name+"-sync", metav1.GetOptions{})
		if err == nil && !jobSeen {
			jobSeen = true
			args := job.Spec.Template.Spec.Containers[0].Args
			want := []string{"sync", "--content-root=/content", "--from=" + c.Spec.WorkspaceDir, "--to=projects/demo"}
			if !slices.Equal(args, want) {
				t.Errorf("sync Job args %q, want %q", args, want)
			}
			if image := job.Spec.Template.Spec.Containers[0].Image; image != e2eImage() {
				t.Errorf("sync Job image %q, want --sync-image %q", image, e2eImage())
			}
		}
		_, err = e.getClaim(ctx, c.Name)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if !jobSeen {
		t.Error("the claim was deleted without a sync-back Job being seen")
	}
}

// TestClaimCleanupWithoutTargetPath: a reaped claim with nothing to save is deleted with no Job
// to wait for (issue 24: a re-acquire no longer waits for a cleanup Job); its workspace is kept,
// its record the suspended cleanup Job (`airlock sync --remove-only`) that collects it later.
func TestClaimCleanupWithoutTargetPath(t *testing.T) {
	e := newClaimEnv(t, "airlock-claim-cleanup", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3, idleTimeout: 5 * time.Second})
	startClaimOperator(t, e.ns)
	c := e.createClaim(t, "session-1", "codegen/default", "")
	e.waitPhase(t, c.Name, airlockv1alpha1.ClaimBound, 60*time.Second)
	e.waitGone(t, c.Name, 90*time.Second)
	if _, err := kubeClient.BatchV1().Jobs(e.ns).Get(context.Background(), c.Name+"-sync", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the claim's -sync Job: %v, want none", err)
	}
	record := waitKeptRecord(t, e.ns, c.Spec.WorkspaceDir, 30*time.Second)
	want := []string{"sync", "--content-root=/content", "--from=" + c.Spec.WorkspaceDir, "--remove-only", "--sandboxes-dir=" + e.ns + "/sandboxes"}
	if args := record.Spec.Template.Spec.Containers[0].Args; !slices.Equal(args, want) || !ptr.Deref(record.Spec.Suspend, false) {
		t.Errorf("record Job args %q suspend %v, want %q, suspended", args, record.Spec.Suspend, want)
	}
}

// TestClaimSyncBackOneAtATime: claims reaped together that sync back into one targetPath run
// their sync-back Jobs one at a time (a watch on the namespace's Jobs never sees two unfinished
// at once), and every one of them is saved and deleted: nothing waits forever.
func TestClaimSyncBackOneAtATime(t *testing.T) {
	const claims = 3
	e := newClaimEnv(t, "airlock-claim-serial", claimEnvOptions{maxConcurrent: claims, maxPerSession: 3, maxInstances: claims, idleTimeout: 5 * time.Second, targetPath: "projects/shared"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w, err := kubeClient.BatchV1().Jobs(e.ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	type result struct {
		maxUnfinished int
		started       []string
	}
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() { done <- r }()
		unfinished := map[string]bool{}
		for ev := range w.ResultChan() {
			job, ok := ev.Object.(*batchv1.Job)
			if !ok || job.Labels[airlockv1alpha1.LabelKeptWorkspace] != "" {
				continue // a kept workspace's record (suspended, then its collection): no sync-back
			}
			finished := false
			for _, c := range job.Status.Conditions {
				if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
					finished = true
				}
			}
			if ev.Type == watch.Added {
				r.started = append(r.started, job.Name)
			}
			if ev.Type == watch.Deleted || finished {
				delete(unfinished, job.Name)
			} else {
				unfinished[job.Name] = true
			}
			r.maxUnfinished = max(r.maxUnfinished, len(unfinished))
		}
	}()

	startClaimOperator(t, e.ns)
	var names []string
	for i := range claims {
		c := e.createClaim(t, fmt.Sprintf("session-%d", i), "codegen/default", "projects/shared")
		names = append(names, c.Name)
	}
	for _, n := range names {
		e.waitGone(t, n, 120*time.Second)
	}
	cancel()
	r := <-done
	t.Logf("sync-back Jobs in the order they started: %v", r.started)
	if r.maxUnfinished != 1 {
		t.Errorf("at most %d sync-back Jobs into one target were unfinished at once, want 1", r.maxUnfinished)
	}
	if len(r.started) < claims {
		t.Errorf("%d sync-back Jobs seen, want at least %d (one per claim)", len(r.started), claims)
	}
}

// TestClaimRuntimeDeletion: deleting the AgentRuntime removes its claims and their children
// through garbage collection, and the workspace of its Bound claim is collected (issue 24: a
// runtime created again under the name inherits nothing); no Job is left.
func TestClaimRuntimeDeletion(t *testing.T) {
	e := newClaimEnv(t, "airlock-claim-gc", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3})
	startClaimOperator(t, e.ns)
	c := e.createClaim(t, "session-1", "codegen/default", "")
	e.waitPhase(t, c.Name, airlockv1alpha1.ClaimBound, 60*time.Second)
	if err := airlockClient.AirlockV1alpha1().AgentRuntimes(e.ns).Delete(context.Background(), e.runtime.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitGone(t, c.Name, 60*time.Second)
	eventually(t, 60*time.Second, "the claim's children to be collected", func(ctx context.Context) (bool, error) {
		d, err := kubeClient.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: claim.LabelClaim})
		if err != nil {
			return false, err
		}
		s, err := kubeClient.CoreV1().Secrets(e.ns).List(ctx, metav1.ListOptions{LabelSelector: claim.LabelClaim})
		if err != nil {
			return false, err
		}
		return len(d.Items) == 0 && len(s.Items) == 0, nil
	})
	waitRecordCollected(t, e.ns, c.Spec.WorkspaceDir, 90*time.Second)
	if jobs, err := kubeClient.BatchV1().Jobs(e.ns).List(context.Background(), metav1.ListOptions{}); err != nil || len(jobs.Items) != 0 {
		t.Errorf("Jobs after the runtime's deletion and the collection of its workspace: %v (%v)", jobs, err)
	}
}

// TestClaimLeaderFailover: with two operators, killing the leader in the middle of a burst of
// claims leaves the invariants intact at every change a watch sees (the new leader decides only
// once its cache has caught up with what the old one wrote: the fence), and the other operator
// finishes the work.
func TestClaimLeaderFailover(t *testing.T) {
	const maxConcurrent, claims = 4, 12
	e := newClaimEnv(t, "airlock-claim-failover", claimEnvOptions{maxConcurrent: maxConcurrent, maxPerSession: 1, maxInstances: 100})
	a := startClaimOperator(t, e.ns)
	var first string
	eventually(t, 30*time.Second, "a lease holder", func(ctx context.Context) (bool, error) {
		h, err := leaseHolder(ctx, e.ns, "airlock-operator-e2e")
		first = h
		return h != "", err
	})
	b := startClaimOperator(t, e.ns)

	// Watch the invariants throughout, on every change the API server reports (a watch sees every
	// state a poll could miss): never more Binding+Bound than maxConcurrent, never more admitted
	// live claims of a session than maxPerSession.
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	w, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Watch(watchCtx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu         sync.Mutex
		violations []string
		events     int
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		current := map[string]*airlockv1alpha1.SandboxClaim{}
		for ev := range w.ResultChan() {
			c, ok := ev.Object.(*airlockv1alpha1.SandboxClaim)
			if !ok {
				continue
			}
			if ev.Type == watch.Deleted {
				delete(current, c.Name)
			} else {
				current[c.Name] = c
			}
			running, perSession := 0, map[string]int{}
			for _, c := range current {
				switch c.Status.Phase {
				case airlockv1alpha1.ClaimBinding, airlockv1alpha1.ClaimBound:
					running++
				}
				switch c.Status.Phase { // admitted and live (Pending claims are the runtimes' asks)
				case airlockv1alpha1.ClaimQueued, airlockv1alpha1.ClaimBinding, airlockv1alpha1.ClaimBound, airlockv1alpha1.ClaimReaping:
					perSession[c.Spec.Session]++
				}
			}
			mu.Lock()
			events++
			if running > maxConcurrent {
				violations = append(violations, fmt.Sprintf("%d Binding+Bound > %d after %s %s", running, maxConcurrent, ev.Type, c.Name))
			}
			for s, n := range perSession {
				if n > 1 {
					violations = append(violations, fmt.Sprintf("session %s has %d live claims > maxPerSession 1 after %s %s", s, n, ev.Type, c.Name))
				}
			}
			mu.Unlock()
		}
	}()

	for i := range claims {
		// Two handles of one session each time: the second is over maxPerSession.
		e.createClaim(t, fmt.Sprintf("session-%d", i), "codegen/default", "")
		e.createClaim(t, fmt.Sprintf("session-%d", i), "codegen/second", "")
		if i == claims/2 {
			leader := a
			if h, _ := leaseHolder(context.Background(), e.ns, "airlock-operator-e2e"); h != first {
				leader = b
			}
			if err := leader.stop(t, syscall.SIGKILL); err == nil {
				t.Log("leader killed")
			}
		}
	}
	eventually(t, 60*time.Second, "the standby to take the lease", func(ctx context.Context) (bool, error) {
		h, err := leaseHolder(ctx, e.ns, "airlock-operator-e2e")
		return h != "" && h != first, err
	})
	var last map[airlockv1alpha1.ClaimPhase]int
	defer func() {
		if t.Failed() {
			t.Logf("last phases: %v", last)
		}
	}()
	eventually(t, 90*time.Second, "every claim decided", func(ctx context.Context) (bool, error) {
		p, items, err := e.phases(ctx)
		if err != nil {
			return false, err
		}
		last = p
		live := 0
		for _, c := range items {
			if c.Status.Phase != airlockv1alpha1.ClaimRefused {
				live++
			}
		}
		return p[""]+p[airlockv1alpha1.ClaimPending]+p[airlockv1alpha1.ClaimBinding] == 0 &&
			p[airlockv1alpha1.ClaimBound] == maxConcurrent && live == claims, nil
	})
	stopWatch()
	<-done
	_, items, err := e.phases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	perSession := map[string]int{}
	for _, c := range items {
		if c.Status.Phase != airlockv1alpha1.ClaimRefused {
			perSession[c.Spec.Session]++
		}
	}
	for s, n := range perSession {
		if n > 1 {
			t.Errorf("session %s has %d live claims, maxPerSession is 1", s, n)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("watched %d claim events", events)
	for _, v := range violations {
		t.Error(v)
	}
}

// TestClaimBindLatency measures the time from a claim's creation to Bound over many claims, as
// the client sees it (create call to the watch event that shows Bound), with the operator's
// default client rate limit (--kube-api-qps=200) and the previous default (50). It logs p50 and p99 and asserts
// nothing about wall-clock time.
func TestClaimBindLatency(t *testing.T) {
	n := 60
	if s := os.Getenv("AIRLOCK_E2E_LATENCY_CLAIMS"); s != "" {
		fmt.Sscan(s, &n)
	}
	for _, tc := range []struct {
		name       string
		args       []string
		sequential bool
	}{
		{name: "burst-default-qps"},
		{name: "burst-qps-50", args: []string{"--kube-api-qps=50", "--kube-api-burst=100"}},
		{name: "sequential", sequential: true},
	} {
		t.Run(tc.name, func(t *testing.T) { measureBindLatency(t, n, tc.args, tc.sequential) })
	}
}

// measureBindLatency creates n claims, in a burst (as fast as the client can) or one after the
// other (each once the previous one is Bound), and logs the creation-to-Bound percentiles.
func measureBindLatency(t *testing.T, n int, args []string, sequential bool) {
	e := newClaimEnv(t, "airlock-claim-latency", claimEnvOptions{maxConcurrent: int32(n), maxPerSession: 3, maxInstances: int32(n)})
	op := startClaimOperatorWithArgs(t, e.ns, args...)
	defer func() {
		// AIRLOCK_E2E_KEEP_LOGS=<dir> keeps the operator's log for a look at the timeline.
		if dir := os.Getenv("AIRLOCK_E2E_KEEP_LOGS"); dir != "" {
			if b, err := os.ReadFile(op.log); err == nil {
				_ = os.WriteFile(filepath.Join(dir, "latency-"+strings.ReplaceAll(t.Name(), "/", "_")+".log"), b, 0o644)
			}
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var (
		mu      sync.Mutex
		created = map[string]time.Time{}
		boundAt = map[string]time.Time{}
	)
	allBound := make(chan struct{})
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type != watch.Modified && ev.Type != watch.Added {
				continue
			}
			c, ok := ev.Object.(*airlockv1alpha1.SandboxClaim)
			if !ok || c.Status.Phase != airlockv1alpha1.ClaimBound {
				continue
			}
			now := time.Now()
			mu.Lock()
			if _, seen := boundAt[c.Name]; !seen {
				boundAt[c.Name] = now
			}
			if len(boundAt) == n {
				close(allBound)
				mu.Unlock()
				return
			}
			mu.Unlock()
		}
	}()
	start := time.Now()
	for i := range n {
		name := claimname.For(e.runtime.Name, fmt.Sprintf("latency-%d", i), "codegen/default")
		mu.Lock()
		created[name] = time.Now()
		mu.Unlock()
		e.createClaim(t, fmt.Sprintf("latency-%d", i), "codegen/default", "")
		if sequential {
			eventually(t, 30*time.Second, "claim "+name+" Bound", func(ctx context.Context) (bool, error) {
				mu.Lock()
				defer mu.Unlock()
				_, ok := boundAt[name]
				return ok, nil
			})
		}
	}
	t.Logf("created %d claims in %s", n, time.Since(start).Round(time.Millisecond))
	select {
	case <-allBound:
	case <-time.After(3 * time.Minute):
		mu.Lock()
		t.Fatalf("only %d of %d claims Bound", len(boundAt), n)
	}
	mu.Lock()
	defer mu.Unlock()
	var d []time.Duration
	for name, b := range boundAt {
		d = append(d, b.Sub(created[name]))
	}
	slices.Sort(d)
	pct := func(p float64) time.Duration {
		i := int(p*float64(len(d))+0.5) - 1
		return d[min(max(i, 0), len(d)-1)]
	}
	t.Logf("creation to Bound over %d claims: p50 %s, p99 %s, max %s", len(d), pct(0.50).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), d[len(d)-1].Round(time.Millisecond))
}
