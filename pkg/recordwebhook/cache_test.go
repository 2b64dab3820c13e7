package recordwebhook

import (
	"context"
	"errors"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/fake"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// cachedWorld is the world's Lookup as the webhook's cache holds it: its claims, registries,
// runtimes and classes through the informers (and their transform) from a clientset that holds
// them, its Jobs, pods and Services from live.
func cachedWorld(t *testing.T, w *world, live Lookup) *CachedLookup {
	t.Helper()
	var objs []runtime.Object
	for _, o := range w.look.claims {
		objs = append(objs, withManagedFields(o.DeepCopy()))
	}
	for _, o := range w.look.registries {
		objs = append(objs, o.DeepCopy())
	}
	for _, o := range w.look.runtimes {
		objs = append(objs, o.DeepCopy())
	}
	for _, o := range w.look.classes {
		objs = append(objs, o.DeepCopy())
	}
	factory := NewCacheInformerFactory(fake.NewSimpleClientset(objs...))
	c := NewCachedLookup(factory, live)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("the cache of %v did not sync", typ)
		}
	}
	return c
}

func withManagedFields(c *airlockv1alpha1.SandboxClaim) *airlockv1alpha1.SandboxClaim {
	c.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "airlock", Operation: metav1.ManagedFieldsOperationUpdate}}
	return c
}

// checkCached judges req over the cache of the world w (live: w's own lookup) and wants what
// Review over w decided: the cache keeps all that Review reads. A world whose reads fail has
// no cache to compare.
func checkCached(t *testing.T, w *world, req *admissionv1.AdmissionRequest, want string) {
	t.Helper()
	if w.look.err != nil {
		return
	}
	checkVerdict(t, Review(context.Background(), req, cachedWorld(t, w, w.look), Config{SyncImage: testSyncImage}), want)
}

// countingLookup counts the reads of a Lookup.
type countingLookup struct {
	Lookup
	reads int
}

func (c *countingLookup) Claim(ctx context.Context, ns, name string) (*airlockv1alpha1.SandboxClaim, error) {
	c.reads++
	return c.Lookup.Claim(ctx, ns, name)
}

// TestJudge: an allow over the cache is the answer, with no read of the API server; a refusal
// over the cache (a cache a moment behind the record the operator just wrote, or an object it
// never held) is judged again over live, whose verdict is the answer.
func TestJudge(t *testing.T) {
	cfg := Config{SyncImage: testSyncImage}
	tests := map[string]struct {
		cache     func(w *world) // the cache's world, changed from the API server's
		live      func(w *world)
		want      string
		fromCache bool
		liveReads int
	}{
		"the cache holds the claim and its record": {fromCache: true},
		"the cache has not seen the record yet":    {cache: func(w *world) { w.claim.Status.Frozen = nil }, liveReads: 1},
		"the cache has not seen the claim yet":     {cache: func(w *world) { w.look.claims = nil }, liveReads: 1},
		"a claim of another UID, in the cache and live": {
			cache: func(w *world) { w.claim.UID = "uid-again" }, live: func(w *world) { w.claim.UID = "uid-again" },
			want: "does not exist", liveReads: 1,
		},
		"no claim, in the cache or live": {
			cache: func(w *world) { w.look.claims = nil }, live: func(w *world) { w.look.claims = nil },
			want: "does not exist", liveReads: 1,
		},
		"live cannot be read": {cache: func(w *world) { w.look.claims = nil }, live: func(w *world) { w.look.err = errors.New("etcd is down") },
			want: "etcd is down", liveReads: 1},
		// The cache is behind, never ahead: a claim it still holds existed a moment ago with
		// that UID and record, and its pod is the garbage collector's once it is gone.
		"the claim deleted a moment ago, still in the cache": {live: func(w *world) { w.look.claims = nil }, fromCache: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cw, lw := newWorld(), newWorld()
			pod := sandboxpod.ClaimPod(lw.claim, lw.claim.Status.Frozen)
			if tc.cache != nil {
				tc.cache(cw)
			}
			if tc.live != nil {
				tc.live(lw)
			}
			live := &countingLookup{Lookup: lw.look}
			v, fromCache := Judge(context.Background(), request(admissionv1.Create, "Pod", pod, nil), cachedWorld(t, cw, live), live, cfg)
			checkVerdict(t, v, tc.want)
			if fromCache != tc.fromCache || live.reads != tc.liveReads {
				t.Errorf("decided by the cache %v with %d reads of live, want %v with %d", fromCache, live.reads, tc.fromCache, tc.liveReads)
			}
		})
	}
}

// TestCachedLookup: the cache keeps of a claim what Review reads and no managed fields; the
// kinds it does not cache are read live.
func TestCachedLookup(t *testing.T) {
	w := newWorld()
	w.claim.Annotations = map[string]string{"big": "anything"}
	c := cachedWorld(t, w, w.look)
	ctx := context.Background()
	got, err := c.Claim(ctx, w.claim.Namespace, w.claim.Name)
	if err != nil || got == nil {
		t.Fatalf("Claim: %v, %v", got, err)
	}
	if got.UID != w.claim.UID || got.Status.Frozen == nil || got.ManagedFields != nil || got.Annotations != nil || got.Spec.Sandbox != "" {
		t.Errorf("cached claim %+v, want its identity and record only", got.ObjectMeta)
	}
	if got, err := c.Claim(ctx, w.claim.Namespace, "nobody"); got != nil || err != nil {
		t.Errorf("a claim that does not exist: %v, %v", got, err)
	}
	if ok, err := c.Served(ctx, w.claim.Namespace); !ok || err != nil {
		t.Errorf("Served(%s) = %v, %v", w.claim.Namespace, ok, err)
	}
	if ok, err := c.Served(ctx, "elsewhere"); ok || err != nil {
		t.Errorf("Served(elsewhere) = %v, %v", ok, err)
	}
	if job, err := c.Job(ctx, w.kept.Namespace, w.kept.Name); job == nil || err != nil {
		t.Errorf("Job, read live: %v, %v", job, err)
	}
}

var _ Lookup = (*CachedLookup)(nil)
