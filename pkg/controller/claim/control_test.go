package claim

import (
	"context"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/objectcontrol"
)

// fakeObjectControl is an objectControl that records the calls it gets and answers them with
// the error set for their verb, or passes them on to next (the fixture's fake clientset) when
// there is none.
type fakeObjectControl[T metav1.Object] struct {
	next                            objectcontrol.Interface[T]
	createErr, updateErr, deleteErr error

	mu    sync.Mutex
	calls []string // "verb namespace/name" ("delete namespace/name uid")
}

func (f *fakeObjectControl[T]) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeObjectControl[T]) Create(ctx context.Context, obj T) error {
	f.record("create " + obj.GetNamespace() + "/" + obj.GetName())
	if f.createErr != nil {
		return f.createErr
	}
	return f.next.Create(ctx, obj)
}

func (f *fakeObjectControl[T]) Update(ctx context.Context, obj T) error {
	f.record("update " + obj.GetNamespace() + "/" + obj.GetName())
	if f.updateErr != nil {
		return f.updateErr
	}
	return f.next.Update(ctx, obj)
}

func (f *fakeObjectControl[T]) PatchLabels(ctx context.Context, namespace, name string, uid types.UID, labels map[string]string) error {
	f.record("patch " + namespace + "/" + name + " " + string(uid))
	if f.updateErr != nil {
		return f.updateErr
	}
	return f.next.PatchLabels(ctx, namespace, name, uid, labels)
}

func (f *fakeObjectControl[T]) Delete(ctx context.Context, namespace, name string, uid types.UID) error {
	f.record("delete " + namespace + "/" + name + " " + string(uid))
	if f.deleteErr != nil {
		return f.deleteErr
	}
	return f.next.Delete(ctx, namespace, name, uid)
}

func (f *fakeObjectControl[T]) DeleteUnchanged(ctx context.Context, obj T) error {
	f.record("delete " + obj.GetNamespace() + "/" + obj.GetName() + " " + string(obj.GetUID()) + " rv " + obj.GetResourceVersion())
	if f.deleteErr != nil {
		return f.deleteErr
	}
	return f.next.DeleteUnchanged(ctx, obj)
}

// fakeClaimControl is a claimControl that records deletions with their preconditions and
// answers writes with the errors set, or passes the calls on to next.
type fakeClaimControl struct {
	next                       claimControl
	updateStatusErr, deleteErr error
	// list, if set, is what List answers.
	list *airlockv1alpha1.SandboxClaimList
	// afterList, if set, runs after List has read its answer, before it returns.
	afterList func()

	mu      sync.Mutex
	deletes []metav1.Preconditions
	statues []*airlockv1alpha1.SandboxClaim
}

func (f *fakeClaimControl) Get(ctx context.Context, namespace, name string) (*airlockv1alpha1.SandboxClaim, error) {
	return f.next.Get(ctx, namespace, name)
}

func (f *fakeClaimControl) List(ctx context.Context, namespace string) (*airlockv1alpha1.SandboxClaimList, error) {
	var (
		list *airlockv1alpha1.SandboxClaimList
		err  error
	)
	if f.list != nil {
		list = f.list.DeepCopy()
	} else {
		list, err = f.next.List(ctx, namespace)
	}
	if f.afterList != nil {
		f.afterList()
	}
	return list, err
}

func (f *fakeClaimControl) Update(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) (*airlockv1alpha1.SandboxClaim, error) {
	return f.next.Update(ctx, claim)
}

func (f *fakeClaimControl) UpdateStatus(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) (*airlockv1alpha1.SandboxClaim, error) {
	f.mu.Lock()
	f.statues = append(f.statues, claim.DeepCopy())
	f.mu.Unlock()
	if f.updateStatusErr != nil {
		return nil, f.updateStatusErr
	}
	return f.next.UpdateStatus(ctx, claim)
}

func (f *fakeClaimControl) Delete(ctx context.Context, namespace, name string, preconditions *metav1.Preconditions) error {
	f.mu.Lock()
	f.deletes = append(f.deletes, *preconditions)
	f.mu.Unlock()
	if f.deleteErr != nil {
		return f.deleteErr
	}
	return f.next.Delete(ctx, namespace, name, preconditions)
}

// TestRemoveExpiredClaimPreconditions: an expired Refused claim is deleted only as the object the
// API server just returned (its UID and resourceVersion as preconditions): a claim changed since
// (renewed, re-decided) is not deleted. A conflict is not an error and records no event.
func TestRemoveExpiredClaimPreconditions(t *testing.T) {
	for name, tc := range map[string]struct {
		deleteErr error
		wantEvent bool
	}{
		"deleted":    {wantEvent: true},
		"changed":    {deleteErr: apierrors.NewConflict(schema.GroupResource{Group: "airlock.dev", Resource: "sandboxclaims"}, "c1", nil)},
		"gone since": {deleteErr: apierrors.NewNotFound(schema.GroupResource{Group: "airlock.dev", Resource: "sandboxclaims"}, "c1")},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			claim := newClaim("c1", "s1", airlockv1alpha1.ClaimRefused, t0)
			claim.UID, claim.ResourceVersion = "uid-c1", "41"
			setCondition(&claim.Status, ConditionAdmitted, metav1.ConditionFalse, "MaxPerSession", messageRefusedDetail, t0)
			f.claims = append(f.claims, claim)
			c := f.newController(ctx)
			claims := &fakeClaimControl{next: c.claims, deleteErr: tc.deleteErr}
			c.claims = claims
			f.clock.Step(refusedTTL)

			requeue, err := c.sync(ctx, keyOf(claim))
			if err != nil || requeue != nil {
				t.Fatalf("sync = %v, %v; want nil, nil", requeue, err)
			}
			if len(claims.deletes) != 1 {
				t.Fatalf("%d deletes, want 1", len(claims.deletes))
			}
			p := claims.deletes[0]
			if ptr.Deref(p.UID, "") != "uid-c1" || ptr.Deref(p.ResourceVersion, "") != "41" {
				t.Errorf("preconditions UID %q resourceVersion %q, want uid-c1 and 41", ptr.Deref(p.UID, ""), ptr.Deref(p.ResourceVersion, ""))
			}
			events := f.events()
			if got := len(events) == 1 && strings.Contains(events[0], ReasonRefusedExpired); got != tc.wantEvent {
				t.Errorf("events %q; want a %s event: %v", events, ReasonRefusedExpired, tc.wantEvent)
			}
		})
	}
}

// TestStatusWriteRefused: when the API server refuses a phase change (a conflict with a write
// the cache has not seen), sync returns the error, to be retried with backoff, and neither the
// phase's event nor a child is written: nothing acts on a phase that was not stored.
func TestStatusWriteRefused(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := newClaim("c1", "s1", airlockv1alpha1.ClaimPending, t0)
	f.claims = append(f.claims, claim)
	c := f.newController(ctx)
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "airlock.dev", Resource: "sandboxclaims"}, "c1", nil)
	claims := &fakeClaimControl{next: c.claims, updateStatusErr: conflict}
	c.claims = claims
	pods := &fakeObjectControl[*corev1.Pod]{next: c.children.pods}
	c.children.pods = pods

	if err := admitAndBuild(ctx, c); !apierrors.IsConflict(err) {
		t.Fatalf("sync error %v, want the conflict", err)
	}
	if len(claims.statues) == 0 || claims.statues[0].Status.Phase != airlockv1alpha1.ClaimBinding {
		t.Fatalf("status writes %d; want the Binding write first", len(claims.statues))
	}
	if events := f.events(); len(events) != 0 {
		t.Errorf("events %q for a phase that was not stored", events)
	}
	if len(pods.calls) != 0 {
		t.Errorf("pod writes %q for a claim whose Binding was not stored", pods.calls)
	}
}

// TestPredecessorChildDeletedByItsUID: a child left by an earlier claim of the same name is
// deleted with its own UID as precondition (never by name alone: a child created for the new
// claim in the meantime must survive), and the claim waits for it to go.
func TestPredecessorChildDeletedByItsUID(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := binding("c1", t0)
	claim.UID = "uid-new"
	f.claims = append(f.claims, claim)
	old := claim.DeepCopy()
	old.UID = "uid-old"
	f.withChildren(claim)
	pod := newPod(old, nil)
	pod.UID = "uid-old-pod"
	f.pods = append(f.pods, pod)
	c := f.newController(ctx)
	pods := &fakeObjectControl[*corev1.Pod]{next: c.children.pods}
	c.children.pods = pods

	requeue, err := c.sync(ctx, keyOf(claim))
	if err != nil {
		t.Fatal(err)
	}
	if requeue == nil || *requeue != defaultStartupTimeout {
		t.Errorf("requeue %v, want the startupTimeout (the deletions enqueue the claim before)", requeue)
	}
	want := "delete " + testNamespace + "/c1 uid-old-pod"
	if len(pods.calls) != 1 || pods.calls[0] != want {
		t.Errorf("pod calls %q, want [%q]", pods.calls, want)
	}
}
