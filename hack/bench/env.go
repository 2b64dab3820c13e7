package main

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
)

const (
	// className is the bench's SandboxClass (cluster-scoped, created once).
	className = "bench"
	// runtimeName, serviceAccount, registryName and sandboxName are each namespace's runtime.
	runtimeName    = "agent"
	serviceAccount = "agent"
	registryName   = "tools"
	sandboxName    = "codegen"
	// limit is every runtime and registry limit: high enough that admission never queues or
	// refuses a bench claim, so that what is measured is admission and binding.
	limit = 1_000_000
	// image is never pulled: kwok plays the pods.
	image = "ghcr.io/airlock-dev/airlock:v0.1.0"
	// tokenAudience is the audience the operator requires by default (--token-audiences).
	tokenAudience = "airlock"
)

// kube bundles the clients of the admin user.
type kube struct {
	core    kubernetes.Interface
	airlock airlockclientset.Interface
	// dynamic reaches the peer's objects (peer.go).
	dynamic dynamic.Interface
}

// ensureClass creates the bench's SandboxClass: one port, a workspace and a scratch volume, as the
// sample class has.
func (k kube) ensureClass(ctx context.Context) error {
	class := &airlockv1alpha1.SandboxClass{
		ObjectMeta: metav1.ObjectMeta{Name: className},
		Spec: airlockv1alpha1.SandboxClassSpec{
			Image: image,
			Ports: []airlockv1alpha1.SandboxPort{{Name: "mcp", Port: 8080}},
			Volumes: []airlockv1alpha1.SandboxVolume{
				{Name: "workspace", MountPath: "/workspace", Workspace: &airlockv1alpha1.WorkspaceVolumeSource{}},
				{Name: "cache", MountPath: "/cache", Scratch: &airlockv1alpha1.ScratchVolumeSource{SizeLimit: ptr.To(resource.MustParse("1Gi"))}},
			},
		},
	}
	_, err := k.airlock.AirlockV1alpha1().SandboxClasses().Create(ctx, class, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// setupNamespace creates namespace ns (restricted Pod Security) with what claims need: the
// workspace-content PVC pre-bound to a PV (kwok never mounts it), a registry (with warm static
// members, or a warmPolicy), a runtime with
// limits that never bind, and the runtime's ServiceAccount. It returns a token of that
// ServiceAccount for the airlock audience, from the TokenRequest API, once the operator reports
// the runtime Ready (so that the Sandbox API's cache has it too).
func (k kube) setupNamespace(ctx context.Context, ns string, warm int32, policy *warmPolicy) (string, error) {
	_, err := k.core.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   ns,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "airlock.dev/bench": "true"},
	}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "content-" + ns, Labels: map[string]string{"airlock.dev/bench": "true"}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/airlock-bench/" + ns}},
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: "workspace-content"},
		},
	}
	if _, err := k.core.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating PV %s: %w", pv.Name, err)
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "workspace-content", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			StorageClassName: ptr.To(""),
			VolumeName:       pv.Name,
		},
	}
	if _, err := k.core.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating PVC %s/%s: %w", ns, pvc.Name, err)
	}
	registry := &airlockv1alpha1.ToolRegistry{
		ObjectMeta: metav1.ObjectMeta{Name: registryName, Namespace: ns},
		Spec: airlockv1alpha1.ToolRegistrySpec{Sandboxes: []airlockv1alpha1.RegistrySandbox{{
			Name: sandboxName, Class: className, MaxInstances: limit, Warm: warm,
			AllowedTools: []airlockv1alpha1.ToolName{"Read", "Bash"},
		}}},
	}
	if policy != nil {
		registry.Spec.Sandboxes[0].WarmPolicy = &airlockv1alpha1.WarmPolicy{Min: policy.Min, Max: policy.Max}
	}
	if _, err := k.airlock.AirlockV1alpha1().ToolRegistries(ns).Create(ctx, registry, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating registry in %s: %w", ns, err)
	}
	if _, err := k.core.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: serviceAccount}}, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating ServiceAccount %s/%s: %w", ns, serviceAccount, err)
	}
	rt := &airlockv1alpha1.AgentRuntime{
		ObjectMeta: metav1.ObjectMeta{Name: runtimeName, Namespace: ns},
		Spec: airlockv1alpha1.AgentRuntimeSpec{
			ServiceAccountName: serviceAccount,
			ToolRegistryRef:    airlockv1alpha1.LocalObjectReference{Name: registryName},
			Sandbox:            airlockv1alpha1.SandboxPolicy{Enabled: true, MaxConcurrent: limit, MaxPerSession: 3},
		},
	}
	if _, err := k.airlock.AirlockV1alpha1().AgentRuntimes(ns).Create(ctx, rt, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating runtime in %s: %w", ns, err)
	}
	if err := k.waitPVCBound(ctx, ns, pvc.Name); err != nil {
		return "", err
	}
	if err := k.waitRuntimeReady(ctx, ns); err != nil {
		return "", err
	}
	tr, err := k.core.CoreV1().ServiceAccounts(ns).CreateToken(ctx, serviceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](4 * 3600), Audiences: []string{tokenAudience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token for %s/%s: %w", ns, serviceAccount, err)
	}
	return tr.Status.Token, nil
}

// until watches the objects lw lists until cond holds.
func until(ctx context.Context, lw cache.ListerWatcher, obj runtime.Object, cond watchtools.ConditionFunc) error {
	_, err := watchtools.UntilWithSync(ctx, lw, obj, nil, cond)
	return err
}

// untilGone watches the object named name that lw lists until it is deleted, or not there at the
// first list.
func untilGone(ctx context.Context, lw cache.ListerWatcher, obj runtime.Object, key string) error {
	gone := func(store cache.Store) (bool, error) {
		_, exists, err := store.GetByKey(key)
		return err == nil && !exists, err
	}
	_, err := watchtools.UntilWithSync(ctx, lw, obj, gone, func(ev watch.Event) (bool, error) {
		return ev.Type == watch.Deleted, nil
	})
	return err
}

func nameSelector(name string) func(*metav1.ListOptions) {
	return func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	}
}

func (k kube) waitPVCBound(ctx context.Context, ns, name string) error {
	lw := cache.NewFilteredListWatchFromClient(k.core.CoreV1().RESTClient(), "persistentvolumeclaims", ns, nameSelector(name))
	err := until(ctx, lw, &corev1.PersistentVolumeClaim{}, func(ev watch.Event) (bool, error) {
		pvc, ok := ev.Object.(*corev1.PersistentVolumeClaim)
		return ok && pvc.Status.Phase == corev1.ClaimBound, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for PVC %s/%s to be Bound: %w", ns, name, err)
	}
	return nil
}

func (k kube) waitRuntimeReady(ctx context.Context, ns string) error {
	lw := cache.NewFilteredListWatchFromClient(k.airlock.AirlockV1alpha1().RESTClient(), "agentruntimes", ns, nameSelector(runtimeName))
	err := until(ctx, lw, &airlockv1alpha1.AgentRuntime{}, func(ev watch.Event) (bool, error) {
		rt, ok := ev.Object.(*airlockv1alpha1.AgentRuntime)
		return ok && meta.IsStatusConditionTrue(rt.Status.Conditions, "Ready"), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for runtime %s/%s to be Ready: %w", ns, runtimeName, err)
	}
	return nil
}

// waitClaimsSettled watches the claims of namespaces until want of them are done: Bound, or in a
// phase they do not leave by themselves (Refused, Failed). progress is called at every tenth. It
// gives up when no claim has become done for stall: the operator is not making progress.
func (k kube) waitClaimsSettled(ctx context.Context, clk clock.Clock, stall time.Duration, namespaces []string, want int, progress func(bound, failed int)) (bound, failed int, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	progressed := make(chan struct{}, 1)
	go func() {
		t := clk.NewTimer(stall)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-progressed:
				t.Stop()
				t.Reset(stall)
			case <-t.C():
				cancel(fmt.Errorf("no claim became Bound, Refused or Failed for %v: the operator made no progress", stall))
				return
			}
		}
	}()
	done := 0
	in := map[string]bool{}
	for _, ns := range namespaces {
		in[ns] = true
	}
	claims := k.airlock.AirlockV1alpha1().SandboxClaims(metav1.NamespaceAll)
	// (A fake clientset in tests does not stream a watch list's initial events; the wrapper
	// says so to the reflector, as generated informers do.)
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return claims.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return claims.Watch(ctx, o)
		},
	}, k.airlock)
	phases := map[cache.ObjectName]airlockv1alpha1.ClaimPhase{}
	step := max(want/10, 1)
	next := step
	err = until(ctx, lw, &airlockv1alpha1.SandboxClaim{}, func(ev watch.Event) (bool, error) {
		c, ok := ev.Object.(*airlockv1alpha1.SandboxClaim)
		if !ok || !in[c.Namespace] {
			return false, nil
		}
		if ev.Type == watch.Deleted {
			delete(phases, cache.MetaObjectToName(c))
		} else {
			phases[cache.MetaObjectToName(c)] = c.Status.Phase
		}
		bound, failed = 0, 0
		for _, p := range phases {
			switch p {
			case airlockv1alpha1.ClaimBound:
				bound++
			case airlockv1alpha1.ClaimRefused, airlockv1alpha1.ClaimFailed:
				failed++
			}
		}
		if bound+failed > done {
			done = bound + failed
			select {
			case progressed <- struct{}{}:
			default:
			}
		}
		if progress != nil && done >= next {
			next = done + step
			progress(bound, failed)
		}
		return done >= want, nil
	})
	if err != nil && ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	return bound, failed, err
}

// deleteNamespace deletes ns and its PV and waits until the namespace is gone (its claims, their
// children and pods deleted), so that the next scenario's window does not count that work.
func (k kube) deleteNamespace(ctx context.Context, ns string) error {
	err := k.core.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting namespace %s: %w", ns, err)
	}
	lw := cache.NewFilteredListWatchFromClient(k.core.CoreV1().RESTClient(), "namespaces", "", nameSelector(ns))
	if err := untilGone(ctx, lw, &corev1.Namespace{}, ns); err != nil {
		return fmt.Errorf("waiting for namespace %s to be deleted: %w", ns, err)
	}
	err = k.core.CoreV1().PersistentVolumes().Delete(ctx, "content-"+ns, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting PV content-%s: %w", ns, err)
	}
	return nil
}

// waitWarmReady watches the namespace's registry until its status says want warm members are
// Ready, for its current generation.
func (k kube) waitWarmReady(ctx context.Context, ns string, want int32) error {
	lw := cache.NewFilteredListWatchFromClient(k.airlock.AirlockV1alpha1().RESTClient(), "toolregistries", ns, nameSelector(registryName))
	err := until(ctx, lw, &airlockv1alpha1.ToolRegistry{}, func(ev watch.Event) (bool, error) {
		r, ok := ev.Object.(*airlockv1alpha1.ToolRegistry)
		return ok && r.Status.ObservedGeneration == r.Generation && r.Status.WarmReady >= want, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d warm members in %s: %w", want, ns, err)
	}
	return nil
}

// warmBound counts the claims of namespaces that adopted a warm member.
func (k kube) warmBound(ctx context.Context, namespaces []string) (int, error) {
	n := 0
	for _, ns := range namespaces {
		list, err := k.airlock.AirlockV1alpha1().SandboxClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, fmt.Errorf("listing the claims of %s: %w", ns, err)
		}
		for _, c := range list.Items {
			if c.Status.Warm != nil {
				n++
			}
		}
	}
	return n, nil
}
