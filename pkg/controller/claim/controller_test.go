package claim

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

func TestSyncGoneOrDeleting(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	deleting := bound("c1", t0.Add(-time.Hour))
	deleting.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
	f.claims = append(f.claims, deleting)
	c := f.newController(ctx)
	for _, key := range []cache.ObjectName{keyOf(deleting), {Namespace: testNamespace, Name: "gone"}} {
		requeue, err := c.sync(ctx, key)
		if err != nil || requeue != nil {
			t.Errorf("sync(%s) = %v, %v; want nil, nil", key, requeue, err)
		}
	}
	checkActions(t, f, nil)
}

func TestHandlers(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	waiting := newClaim("waiting", "s1", airlockv1alpha1.ClaimQueued, t0)
	boundClaim := bound("c1", t0)
	f.claims = append(f.claims, waiting, boundClaim)
	c := f.newController(ctx)
	logger, _ := ktesting.NewTestContext(t)

	// A claim leaving Bound frees a slot: the claim is enqueued, and its namespace for an
	// admission pass.
	failed := boundClaim.DeepCopy()
	failed.ResourceVersion = "2"
	failed.Status.Phase = airlockv1alpha1.ClaimFailed
	c.updateClaim(logger, boundClaim, failed)
	if got, want := c.queue.Len(), 1; got != want {
		t.Errorf("queue length %d after a claim left Bound, want %d", got, want)
	}
	if got, want := c.admitQueue.Len(), 1; got != want {
		t.Errorf("admission queue length %d after a claim left Bound, want %d", got, want)
	}
	// A resync (same resourceVersion) enqueues nothing.
	for c.queue.Len() > 0 {
		key, _ := c.queue.Get()
		c.queue.Done(key)
		c.queue.Forget(key)
	}
	c.updateClaim(logger, failed, failed)
	if c.queue.Len() != 0 {
		t.Errorf("a resync enqueued %d keys", c.queue.Len())
	}
	// A sandbox pod enqueues its claim by label; a Job its controller.
	c.handleObject(newPod(boundClaim, nil))
	c.handleObject(cache.DeletedFinalStateUnknown{Key: "x", Obj: buildSyncJob(waiting, "workspace-content", testSyncImage, 1, false, 3)})
	var keys []string
	for c.queue.Len() > 0 {
		key, _ := c.queue.Get()
		keys = append(keys, key.String())
		c.queue.Done(key)
	}
	if diff := cmp.Diff([]string{"team-a/c1", "team-a/waiting"}, keys); diff != "" {
		t.Errorf("enqueued keys (-want +got):\n%s", diff)
	}
}

// afterRecordingQueue records the delays of AddAfter.
type afterRecordingQueue struct {
	workqueue.TypedRateLimitingInterface[cache.ObjectName]
	after []time.Duration
}

func (q *afterRecordingQueue) AddAfter(key cache.ObjectName, d time.Duration) {
	q.after = append(q.after, d)
	q.TypedRateLimitingInterface.AddAfter(key, d)
}

func TestProcessNextWorkItem(t *testing.T) {
	tests := map[string]struct {
		requeue      *time.Duration
		err          error
		wantRequeues int
		wantAfter    []time.Duration
	}{
		"success forgets":               {},
		"requeueAfter forgets":          {requeue: ptr.To(time.Minute), wantAfter: []time.Duration{time.Minute}},
		"error is retried rate-limited": {err: fmt.Errorf("boom"), wantRequeues: 1},
		"conflict is retried rate-limited": {
			err:          apierrors.NewConflict(schema.GroupResource{Group: "airlock.dev", Resource: "sandboxclaims"}, "c1", fmt.Errorf("modified")),
			wantRequeues: 1,
		},
		// Its namespace is being deleted: nothing it writes can be created any more, and the
		// namespace controller deletes the claim: not retried (its deletion brings it back).
		"a namespace being deleted is not retried": {
			err: &apierrors.StatusError{ErrStatus: metav1.Status{
				Status: metav1.StatusFailure, Code: 403, Reason: metav1.StatusReasonForbidden,
				Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}},
			}},
		},
		"another refusal is retried rate-limited": {
			err:          apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "c1-token", fmt.Errorf("no")),
			wantRequeues: 1,
		},
		// A Binding claim whose children cannot be written: retried with backoff, and looked at
		// again at its startupTimeout however long the backoff has grown.
		"error with requeueAfter is retried and kept for the deadline": {
			err: fmt.Errorf("boom"), requeue: ptr.To(4 * time.Minute), wantRequeues: 1, wantAfter: []time.Duration{4 * time.Minute},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			c := f.newController(ctx)
			q := &afterRecordingQueue{TypedRateLimitingInterface: c.queue}
			c.queue = q
			defer c.queue.ShutDown()
			key := cache.ObjectName{Namespace: testNamespace, Name: "c1"}
			c.syncHandler = func(ctx context.Context, k cache.ObjectName) (*time.Duration, error) {
				return tc.requeue, tc.err
			}
			c.queue.Add(key)
			if !c.processNextWorkItem(ctx) {
				t.Fatal("processNextWorkItem returned false")
			}
			if got := c.queue.NumRequeues(key); got != tc.wantRequeues {
				t.Errorf("NumRequeues = %d, want %d", got, tc.wantRequeues)
			}
			if c.queue.Len() != 0 {
				t.Errorf("key requeued at once")
			}
			if diff := cmp.Diff(tc.wantAfter, q.after); diff != "" {
				t.Errorf("AddAfter delays (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNewControllerLeavesGlobalSchemeAlone: building the controller (which happens once the lease
// is held, while lease renewals decode with client-go's global scheme) does not write to that
// scheme: a write there raced with the renewals and crashed the operator.
func TestNewControllerLeavesGlobalSchemeAlone(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	newFixture(t).withDefaults().newController(ctx)
	if kubescheme.Scheme.Recognizes(airlockv1alpha1.SchemeGroupVersion.WithKind("SandboxClaim")) {
		t.Error("client-go's global scheme knows SandboxClaim: something added the airlock kinds to it")
	}
}
