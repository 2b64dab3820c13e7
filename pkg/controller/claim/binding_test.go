package claim

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// TestSyncChildNotControlled: a NetworkPolicy or a pod of the claim's name that nobody owns is
// foreign: the sync fails with an event. Without its own policy the claim gets no pod at all
// (a pod never runs a moment unconfined); a foreign pod is never taken for the claim's. (The token
// Secret cannot be met this way: its name is a hash of the claim's token.)
func TestSyncChildNotControlled(t *testing.T) {
	tests := map[string]struct {
		foreign     func(f *fixture)
		wantActions []string
	}{
		"policy": {
			foreign: func(f *fixture) {
				f.netpols = append(f.netpols, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: testNamespace}})
			},
			wantActions: []string{"create secrets " + claimtoken.ClaimSecretName("c1", testToken)},
		},
		"pod": {
			foreign: func(f *fixture) {
				f.pods = append(f.pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: testNamespace, Labels: map[string]string{LabelClaim: "c1"}},
					Status: corev1.PodStatus{PodIP: testPodIP, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}})
			},
			wantActions: []string{"create secrets " + claimtoken.ClaimSecretName("c1", testToken), "create networkpolicies c1"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			claim := binding("c1", t0)
			f.claims = append(f.claims, claim)
			tc.foreign(f)
			c := f.newController(ctx)
			if _, err := c.sync(ctx, keyOf(claim)); err == nil {
				t.Fatal("sync succeeded over a child the claim does not control")
			}
			checkActions(t, f, tc.wantActions)
			if events := f.events(); len(events) != 1 || !strings.Contains(events[0], ReasonErrResourceExists) {
				t.Errorf("events %v, want one %s", events, ReasonErrResourceExists)
			}
		})
	}
}

func TestSyncBinding(t *testing.T) {
	began := t0.Add(-time.Minute)
	waiting := func(reason string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: sandboxpod.ContainerName, State: corev1.ContainerState{
				Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "the detail"},
			}}}
		}
	}
	unschedulable := func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/2 nodes are available"}}
	}
	tests := map[string]struct {
		pod         func(*corev1.Pod) // nil: no pod
		step        time.Duration
		wantPhase   airlockv1alpha1.ClaimPhase // "" : no status write
		wantReason  string
		wantMessage string
		wantRequeue *time.Duration
		wantActions []string
	}{
		"ready pod binds": {
			pod:         markReady,
			wantPhase:   airlockv1alpha1.ClaimBound,
			wantRequeue: ptr.To(30 * time.Minute),
			wantActions: []string{"update sandboxclaims/status c1"},
		},
		"pod not ready yet waits for the startup timeout": {
			pod:         func(*corev1.Pod) {},
			wantRequeue: ptr.To(4 * time.Minute),
		},
		"image pull back-off fails at once": {
			pod:         waiting("ImagePullBackOff"),
			wantPhase:   airlockv1alpha1.ClaimFailed,
			wantReason:  "ImagePullBackOff",
			wantMessage: "the detail",
			wantRequeue: ptr.To(30 * time.Minute),
			wantActions: []string{"delete pods c1", "update sandboxclaims/status c1"},
		},
		"crash loop fails at once": {
			pod:         waiting("CrashLoopBackOff"),
			wantPhase:   airlockv1alpha1.ClaimFailed,
			wantReason:  "CrashLoopBackOff",
			wantMessage: "the detail",
			wantRequeue: ptr.To(30 * time.Minute),
			wantActions: []string{"delete pods c1", "update sandboxclaims/status c1"},
		},
		"container creating is not a failure": {
			pod:         waiting("ContainerCreating"),
			wantRequeue: ptr.To(4 * time.Minute),
		},
		"unschedulable before the timeout waits": {
			pod:         unschedulable,
			step:        3 * time.Minute,
			wantRequeue: ptr.To(time.Minute),
		},
		"unschedulable at the timeout fails": {
			pod:         unschedulable,
			step:        4 * time.Minute,
			wantPhase:   airlockv1alpha1.ClaimFailed,
			wantReason:  ReasonUnschedulable,
			wantMessage: "0/2 nodes are available",
			wantRequeue: ptr.To(30 * time.Minute),
			wantActions: []string{"delete pods c1", "update sandboxclaims/status c1"},
		},
		"no pod at the timeout fails": {
			step:        4*time.Minute + time.Second,
			wantPhase:   airlockv1alpha1.ClaimFailed,
			wantReason:  ReasonStartupTimeout,
			wantMessage: "the sandbox pod was not ready within the class's startupTimeout 5m0s",
			wantRequeue: ptr.To(30 * time.Minute),
			// The pod the sync creates is deleted by the Failed claim's sync its add brings on.
			wantActions: []string{"create secrets " + claimtoken.ClaimSecretName("c1", testToken), "create pods c1", "update sandboxclaims/status c1"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			claim := binding("c1", began)
			f.claims = append(f.claims, claim)
			f.withChildren(claim)
			if tc.pod != nil {
				f.pods = append(f.pods, newPod(claim, tc.pod))
			}
			c := f.newController(ctx)
			f.clock.Step(tc.step)
			requeue, err := c.sync(ctx, keyOf(claim))
			if err != nil {
				t.Fatal(err)
			}
			checkRequeue(t, requeue, tc.wantRequeue)
			checkActions(t, f, tc.wantActions)
			if tc.wantPhase == "" {
				return
			}
			got := f.writtenClaim()
			if got.Status.Phase != tc.wantPhase || got.Status.Reason != tc.wantReason || (tc.wantMessage != "" && got.Status.Message != tc.wantMessage) {
				t.Errorf("status %s/%s/%q, want %s/%s/%q", got.Status.Phase, got.Status.Reason, got.Status.Message, tc.wantPhase, tc.wantReason, tc.wantMessage)
			}
			switch tc.wantPhase {
			case airlockv1alpha1.ClaimBound:
				wantAddresses := []airlockv1alpha1.ClaimAddress{{Name: "mcp", URL: "http://" + testPodIP + ":8080"}}
				if diff := cmp.Diff(wantAddresses, got.Status.Addresses); diff != "" {
					t.Errorf("addresses (-want +got):\n%s", diff)
				}
				if got.Status.BoundAt == nil || !got.Status.BoundAt.Time.Equal(f.clock.Now()) {
					t.Errorf("boundAt %v, want %v", got.Status.BoundAt, f.clock.Now())
				}
			case airlockv1alpha1.ClaimFailed:
				if events := f.events(); len(events) != 1 || !strings.HasPrefix(events[0], "Warning Failed") {
					t.Errorf("events %v, want one Warning Failed", events)
				}
			}
		})
	}
}

// TestSyncBindsOnlyWithAPodIP: a claim is Bound with its pod's IP as its address, so it waits,
// with its pod Ready, until the pod in the cache has one (its update event enqueues the claim).
func TestSyncBindsOnlyWithAPodIP(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := binding("c1", t0.Add(-time.Minute))
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	f.pods = append(f.pods, newPod(claim, func(p *corev1.Pod) { markReady(p); p.Status.PodIP = "" }))
	c := f.newController(ctx)
	requeue, err := c.sync(ctx, keyOf(claim))
	if err != nil {
		t.Fatal(err)
	}
	checkRequeue(t, requeue, ptr.To(4*time.Minute))
	checkActions(t, f, nil) // no Bound without an address ("ready pod binds" in TestSyncBinding: with it)
}
