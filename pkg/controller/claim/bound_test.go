package claim

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/google/go-cmp/cmp"

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

func TestSyncBoundIdle(t *testing.T) {
	tests := map[string]struct {
		lastUsed    *time.Time
		runtimeGone bool
		pods        bool
		targetPath  string
		wantRequeue *time.Duration
		wantActions []string
		wantPhase   airlockv1alpha1.ClaimPhase
	}{
		"not idle yet": {
			lastUsed:    ptr.To(t0.Add(-10 * time.Minute)),
			pods:        true,
			wantRequeue: ptr.To(20 * time.Minute),
		},
		"idle since boundAt": {
			wantRequeue: nil,
			pods:        true,
			wantActions: []string{"get sandboxclaims c1", "update sandboxclaims/status c1", "update deployments c1"},
			wantPhase:   airlockv1alpha1.ClaimReaping,
		},
		"idle, pods gone, no targetPath: cleanup Job": {
			wantActions: []string{"get sandboxclaims c1", "update sandboxclaims/status c1", "update deployments c1", "create jobs c1-sync"},
			wantPhase:   airlockv1alpha1.ClaimReaping,
		},
		"idle, pods gone, targetPath: sync-back Job": {
			targetPath:  "projects/demo",
			wantActions: []string{"get sandboxclaims c1", "update sandboxclaims/status c1", "update deployments c1", "create jobs c1-sync"},
			wantPhase:   airlockv1alpha1.ClaimReaping,
		},
		"runtime gone: garbage collection's, no reaping": {
			runtimeGone: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			if tc.runtimeGone {
				f.runtimes = nil
			}
			claim := bound("c1", t0.Add(-31*time.Minute))
			claim.Spec.TargetPath = tc.targetPath
			if tc.lastUsed != nil {
				claim.Status.LastUsedAt = ptr.To(metav1.NewTime(*tc.lastUsed))
			}
			f.claims = append(f.claims, claim)
			f.withChildren(claim, 1)
			if tc.pods {
				f.pods = append(f.pods, newPod(claim, readyPod))
			}
			c := f.newController(ctx)
			requeue, err := c.sync(ctx, keyOf(claim))
			if err != nil {
				t.Fatal(err)
			}
			checkRequeue(t, requeue, tc.wantRequeue)
			checkActions(t, f, tc.wantActions)
			if tc.wantPhase != "" {
				if got := f.writtenClaim(); got.Status.Phase != tc.wantPhase || got.Status.Reason != ReasonIdleTimeout {
					t.Errorf("status %s/%s, want %s/%s", got.Status.Phase, got.Status.Reason, tc.wantPhase, ReasonIdleTimeout)
				}
			}
			if tc.targetPath != "" {
				job := f.written("jobs", "").(*batchv1.Job)
				wantArgs := []string{"sync", "--content-root=/content", "--from=" + claim.Spec.WorkspaceDir, "--to=projects/demo",
					"--remove-source", "--sandboxes-dir=team-a/sandboxes"}
				if diff := cmp.Diff(wantArgs, job.Spec.Template.Spec.Containers[0].Args); diff != "" {
					t.Errorf("sync Job args (-want +got):\n%s", diff)
				}
				if job.Annotations[AnnotationSyncAttempt] != "1" || job.Spec.Template.Spec.Containers[0].Image != testSyncImage {
					t.Errorf("sync Job attempt %q image %q", job.Annotations[AnnotationSyncAttempt], job.Spec.Template.Spec.Containers[0].Image)
				}
			}
		})
	}
}

func TestSyncBoundRecheckFindsRenewal(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := bound("c1", t0.Add(-31*time.Minute))
	f.claims = append(f.claims, claim)
	f.withChildren(claim, 1)
	c := f.newController(ctx)
	// The API server has a renewal the cache has not seen.
	fresh := claim.DeepCopy()
	fresh.Status.LastUsedAt = ptr.To(metav1.NewTime(t0.Add(-time.Minute)))
	if _, err := f.airlockClient.AirlockV1alpha1().SandboxClaims(testNamespace).UpdateStatus(ctx, fresh, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.log = nil
	requeue, err := c.sync(ctx, keyOf(claim))
	if err != nil {
		t.Fatal(err)
	}
	checkRequeue(t, requeue, ptr.To(29*time.Minute))
	checkActions(t, f, []string{"get sandboxclaims c1"})
}

// TestSyncBoundPodRecoveredOnAPIServer: the cache says the pod has not been ready for the
// startupTimeout, but the claim on the API server is Ready again (a write the cache has not
// seen): it is not reaped.
func TestSyncBoundPodRecoveredOnAPIServer(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := bound("c1", t0.Add(-10*time.Minute))
	setCondition(&claim.Status, ConditionReady, metav1.ConditionFalse, ReasonPodNotReady, messagePodNotReady, t0.Add(-5*time.Minute))
	f.claims = append(f.claims, claim)
	f.withChildren(claim, 1)
	c := f.newController(ctx)
	recovered := claim.DeepCopy()
	setCondition(&recovered.Status, ConditionReady, metav1.ConditionTrue, ReasonPodReady, MessageBound, t0.Add(-time.Second))
	if err := f.airlockClient.Tracker().Update(airlockv1alpha1.SchemeGroupVersion.WithResource("sandboxclaims"), recovered, testNamespace); err != nil {
		t.Fatal(err)
	}
	f.log = nil
	requeue, err := c.sync(ctx, keyOf(claim))
	if err != nil {
		t.Fatal(err)
	}
	checkRequeue(t, requeue, ptr.To(5*time.Minute))
	checkActions(t, f, []string{"get sandboxclaims c1"})
}
