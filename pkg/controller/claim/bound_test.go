package claim

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// TestSyncBoundPodNotReady: a Bound claim whose pod stops being ready (a crash loop, a pod gone
// that cannot come back) is reaped with sync-back, reason PodFailed, once it has not been ready
// for the record's startupTimeout; before, it stayed Bound, holding its slot, until idle reaping.
func TestSyncBoundPodNotReady(t *testing.T) {
	crashLooping := func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 5m0s restarting failed container"},
		}}}
	}
	notReadySince := func(since time.Time) func(*airlockv1alpha1.SandboxClaim) {
		return func(c *airlockv1alpha1.SandboxClaim) {
			setCondition(&c.Status, ConditionReady, metav1.ConditionFalse, "CrashLoopBackOff", "back-off", since)
		}
	}
	tests := map[string]struct {
		claim         func(*airlockv1alpha1.SandboxClaim)
		pod           func(*corev1.Pod) // nil: no pod
		wantRequeue   *time.Duration
		wantActions   []string
		wantPhase     airlockv1alpha1.ClaimPhase
		wantReason    string
		wantCondition metav1.ConditionStatus
		wantEvent     string
	}{
		"ready: nothing to do": {
			pod:         readyPod,
			wantRequeue: ptr.To(29 * time.Minute),
		},
		"crash loop first seen: Ready False, and the startupTimeout starts": {
			pod:           crashLooping,
			wantRequeue:   ptr.To(5 * time.Minute),
			wantActions:   []string{"update sandboxclaims/status c1"},
			wantPhase:     airlockv1alpha1.ClaimBound,
			wantReason:    "CrashLoopBackOff",
			wantCondition: metav1.ConditionFalse,
			wantEvent:     "Warning CrashLoopBackOff",
		},
		"pod gone first seen: PodNotReady": {
			wantRequeue:   ptr.To(5 * time.Minute),
			wantActions:   []string{"update sandboxclaims/status c1"},
			wantPhase:     airlockv1alpha1.ClaimBound,
			wantReason:    ReasonPodNotReady,
			wantCondition: metav1.ConditionFalse,
			wantEvent:     "Warning " + ReasonPodNotReady,
		},
		"not ready for less than the startupTimeout: waits": {
			claim:       notReadySince(t0.Add(-2 * time.Minute)),
			pod:         crashLooping,
			wantRequeue: ptr.To(3 * time.Minute),
		},
		"not ready for the startupTimeout: reaped with sync-back": {
			claim:       notReadySince(t0.Add(-5 * time.Minute)),
			pod:         crashLooping,
			wantActions: []string{"get sandboxclaims c1", "update sandboxclaims/status c1", "update deployments c1"},
			wantPhase:   airlockv1alpha1.ClaimReaping,
			wantReason:  ReasonPodFailed,
		},
		"ready again before the startupTimeout: Ready True": {
			claim:         notReadySince(t0.Add(-2 * time.Minute)),
			pod:           readyPod,
			wantRequeue:   ptr.To(29 * time.Minute),
			wantActions:   []string{"update sandboxclaims/status c1"},
			wantPhase:     airlockv1alpha1.ClaimBound,
			wantReason:    ReasonPodReady,
			wantCondition: metav1.ConditionTrue,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			claim := bound("c1", t0.Add(-time.Minute))
			claim.Spec.TargetPath = "projects/demo"
			if tc.claim != nil {
				tc.claim(claim)
			}
			f.claims = append(f.claims, claim)
			f.withChildren(claim, 1)
			if tc.pod != nil {
				f.pods = append(f.pods, newPod(claim, tc.pod))
			}
			c := f.newController(ctx)
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
			if got.Status.Phase != tc.wantPhase {
				t.Errorf("phase %s, want %s", got.Status.Phase, tc.wantPhase)
			}
			cond := findCondition(got, ConditionReady)
			switch tc.wantPhase {
			case airlockv1alpha1.ClaimReaping:
				if got.Status.Reason != tc.wantReason || !strings.Contains(got.Status.Message, "CrashLoopBackOff") {
					t.Errorf("reason %s message %q, want %s naming the pod's reason", got.Status.Reason, got.Status.Message, tc.wantReason)
				}
			default:
				if cond == nil || cond.Status != tc.wantCondition || cond.Reason != tc.wantReason || !cond.LastTransitionTime.Time.Equal(t0) {
					t.Errorf("Ready condition %+v, want %s/%s at t0", cond, tc.wantCondition, tc.wantReason)
				}
			}
			events := f.events()
			if tc.wantEvent != "" && (len(events) != 1 || !strings.HasPrefix(events[0], tc.wantEvent)) {
				t.Errorf("events %v, want one %q", events, tc.wantEvent)
			}
		})
	}
}
