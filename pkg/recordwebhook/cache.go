package recordwebhook

import (
	"context"

	admissionv1 "k8s.io/api/admission/v1"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions"
	airlocklisters "github.com/airlock-dev/airlock/pkg/generated/listers/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// The webhook's cache (docs/security.md, "The records webhook"). A write of the operator is
// judged first over informer caches of airlock's own resources, and judged again from the API
// server only when that first judgement refuses it:
//
//   - an allow over the cache rests on objects that existed as the cache holds them a watch's
//     delay ago (a cache is behind, never ahead: it holds no object, UID or record that did not
//     exist); the operator's own decisions rest on caches of the same objects;
//   - a refusal is never the cache's: the operator writes a claim's record the instant before
//     the objects that name it, and a cache a moment behind would refuse them, so a refusal is
//     the API server's answer, read then.
//
// Without the cache, each claim cost six GETs on the path of its writes (its class, runtime and
// registry for its record; its claim for its Secret, NetworkPolicy and pod).

// CachedLookup is the Lookup of the caches: claims, registries, runtimes and classes from
// informers; Jobs, pods and Services from live.
type CachedLookup struct {
	claims     airlocklisters.SandboxClaimLister
	registries airlocklisters.ToolRegistryLister
	runtimes   airlocklisters.AgentRuntimeLister
	classes    airlocklisters.SandboxClassLister
	live       Lookup
}

// NewCachedLookup registers the informers of the caches with factory (start it after) and
// returns their Lookup. Reads before the caches have synced find nothing, and so refuse over
// the cache and are judged by live.
func NewCachedLookup(factory airlockinformers.SharedInformerFactory, live Lookup) *CachedLookup {
	a := factory.Airlock().V1alpha1()
	return &CachedLookup{
		claims:     a.SandboxClaims().Lister(),
		registries: a.ToolRegistries().Lister(),
		runtimes:   a.AgentRuntimes().Lister(),
		classes:    a.SandboxClasses().Lister(),
		live:       live,
	}
}

// NewCacheInformerFactory returns the informer factory of the caches, with claims kept only as
// far as Review reads them (the webhook's memory is that of its cache).
func NewCacheInformerFactory(client airlockclientset.Interface) airlockinformers.SharedInformerFactory {
	return airlockinformers.NewSharedInformerFactoryWithOptions(client, 0, airlockinformers.WithTransform(stripForReview))
}

// stripForReview keeps of a claim what Review reads (its identity, its record and its
// workspace directory) and drops every object's managed fields.
func stripForReview(obj any) (any, error) {
	if claim, ok := obj.(*airlockv1alpha1.SandboxClaim); ok {
		out := &airlockv1alpha1.SandboxClaim{
			ObjectMeta: metav1.ObjectMeta{Name: claim.Name, Namespace: claim.Namespace, UID: claim.UID, ResourceVersion: claim.ResourceVersion},
			Spec:       airlockv1alpha1.SandboxClaimSpec{WorkspaceDir: claim.Spec.WorkspaceDir},
			Status:     airlockv1alpha1.SandboxClaimStatus{Frozen: claim.Status.Frozen, WorkspaceDir: claim.Status.WorkspaceDir},
		}
		if w := claim.Status.Warm; w != nil {
			out.Status.Warm = &airlockv1alpha1.WarmAdoption{WorkspaceDir: w.WorkspaceDir}
		}
		return out, nil
	}
	return sandboxpod.StripManagedFields(obj)
}

func (c *CachedLookup) Claim(_ context.Context, namespace, name string) (*airlockv1alpha1.SandboxClaim, error) {
	return absent(c.claims.SandboxClaims(namespace).Get(name))
}

func (c *CachedLookup) Registry(_ context.Context, namespace, name string) (*airlockv1alpha1.ToolRegistry, error) {
	return absent(c.registries.ToolRegistries(namespace).Get(name))
}

func (c *CachedLookup) Runtime(_ context.Context, namespace, name string) (*airlockv1alpha1.AgentRuntime, error) {
	return absent(c.runtimes.AgentRuntimes(namespace).Get(name))
}

func (c *CachedLookup) Class(_ context.Context, name string) (*airlockv1alpha1.SandboxClass, error) {
	return absent(c.classes.Get(name))
}

func (c *CachedLookup) Served(_ context.Context, namespace string) (bool, error) {
	runtimes, err := c.runtimes.AgentRuntimes(namespace).List(labels.Everything())
	if err != nil || len(runtimes) > 0 {
		return len(runtimes) > 0, err
	}
	registries, err := c.registries.ToolRegistries(namespace).List(labels.Everything())
	return len(registries) > 0, err
}

func (c *CachedLookup) Job(ctx context.Context, namespace, name string) (*batchv1.Job, error) {
	return c.live.Job(ctx, namespace, name)
}

func (c *CachedLookup) Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return c.live.Pod(ctx, namespace, name)
}

func (c *CachedLookup) Service(ctx context.Context, namespace, name string) (*corev1.Service, error) {
	return c.live.Service(ctx, namespace, name)
}

// Judge is Review over the cache, and, when that refuses, over live: the verdict, and whether
// the cache decided it. A nil cache judges over live alone.
func Judge(ctx context.Context, req *admissionv1.AdmissionRequest, cache, live Lookup, cfg Config) (Verdict, bool) {
	if cache != nil {
		if v := Review(ctx, req, cache, cfg); v.Allowed {
			return v, true
		}
	}
	return Review(ctx, req, live, cfg), false
}
