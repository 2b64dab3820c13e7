package claim

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// TestSyncBoundPodNotReady: a Bound claim whose pod stops being ready (a crash loop, a pod gone
// that cannot come back) is reaped with sync-back, reason PodFailed, once it has not been ready
// for the record's startupTimeout; before, it stayed Bound, holding its slot, until idle reaping.
func TestSyncBoundPodNotReady(t *testing.T) {
	crashLooping := func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: sandboxpod.ContainerName, State: corev1.ContainerState{
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
			pod:         markReady,
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
		"pod gone first seen: created again, and PodNotReady": {
			wantRequeue:   ptr.To(5 * time.Minute),
			wantActions:   []string{"create secrets " + tokenSecretName(bound("c1", t0)), "create pods c1", "update sandboxclaims/status c1"},
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
			wantActions: []string{"get sandboxclaims c1", "update sandboxclaims/status c1", "delete pods c1"},
			wantPhase:   airlockv1alpha1.ClaimReaping,
			wantReason:  ReasonPodFailed,
		},
		"ready again before the startupTimeout: Ready True": {
			claim:         notReadySince(t0.Add(-2 * time.Minute)),
			pod:           markReady,
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
			f.withChildren(claim)
			if tc.pod != nil {
				f.pods = append(f.pods, newPod(claim, tc.pod))
			}
			c := f.newController(ctx)
			requeue, err := syncClaim(ctx, c, keyOf(claim))
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
			wantActions: []string{"get sandboxclaims c1", "update sandboxclaims/status c1", "delete pods c1"},
			wantPhase:   airlockv1alpha1.ClaimReaping,
		},
		"idle, pods gone, no targetPath: workspace kept, claim deleted, no Job to wait for": {
			wantActions: []string{"get sandboxclaims c1", "update sandboxclaims/status c1", "create jobs " + workspace.RecordName(claimDir("c1")), "delete sandboxclaims c1"},
			wantPhase:   airlockv1alpha1.ClaimReaping,
		},
		"idle, pods gone, targetPath: sync-back Job": {
			targetPath:  "projects/demo",
			wantActions: []string{"get sandboxclaims c1", "update sandboxclaims/status c1", "create jobs c1-sync"},
			wantPhase:   airlockv1alpha1.ClaimReaping,
		},
		// Garbage collection may not delete it (airlock-workspaces-recorded): deleted as it would,
		// without reaping or sync-back (orphan.go).
		"runtime gone: deleted as garbage collection would, no reaping": {
			runtimeGone: true,
			wantActions: []string{"delete sandboxclaims c1"},
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
			f.withChildren(claim)
			if tc.pods {
				f.pods = append(f.pods, newPod(claim, markReady))
			}
			c := f.newController(ctx)
			requeue, err := syncClaim(ctx, c, keyOf(claim))
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
				// It only copies: the workspace is kept for the retention (kept.go).
				wantArgs := []string{"sync", "--content-root=/content", "--from=" + claim.Spec.WorkspaceDir, "--to=projects/demo"}
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
	f.withChildren(claim)
	c := f.newController(ctx)
	// The API server has a renewal the cache has not seen.
	fresh := claim.DeepCopy()
	fresh.Status.LastUsedAt = ptr.To(metav1.NewTime(t0.Add(-time.Minute)))
	if _, err := f.airlockClient.AirlockV1alpha1().SandboxClaims(testNamespace).UpdateStatus(ctx, fresh, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.log = nil
	requeue, err := syncClaim(ctx, c, keyOf(claim))
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
	f.withChildren(claim)
	f.pods = append(f.pods, newPod(claim, nil)) // not ready
	c := f.newController(ctx)
	recovered := claim.DeepCopy()
	setCondition(&recovered.Status, ConditionReady, metav1.ConditionTrue, ReasonPodReady, MessageBound, t0.Add(-time.Second))
	if err := f.airlockClient.Tracker().Update(airlockv1alpha1.SchemeGroupVersion.WithResource("sandboxclaims"), recovered, testNamespace); err != nil {
		t.Fatal(err)
	}
	f.log = nil
	requeue, err := syncClaim(ctx, c, keyOf(claim))
	if err != nil {
		t.Fatal(err)
	}
	checkRequeue(t, requeue, ptr.To(5*time.Minute))
	checkActions(t, f, []string{"get sandboxclaims c1"})
}

// TestSyncBoundPodEvicted: a Bound claim whose pod the kubelet evicted (past its ephemeral-storage
// limit) says so: the Evicted condition names the pod and the kubelet's message, and a Warning
// event is recorded, once per evicted pod. The ended pod is deleted, to be created again on the
// same workspace; the claim stays Bound, Ready False with the eviction as the pod's failure, and
// when the new pod is Ready (at another IP) the claim is Ready again at the new address.
func TestSyncBoundPodEvicted(t *testing.T) {
	const kubeletMessage = "Pod ephemeral local storage usage exceeds the total limit of containers 64Mi. "
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := bound("c1", t0.Add(-time.Minute))
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	f.pods = append(f.pods, newPod(claim, func(p *corev1.Pod) {
		p.UID = "uid-pod-1"
		p.Status.Phase = corev1.PodFailed
		p.Status.Reason = "Evicted"
		p.Status.Message = kubeletMessage
	}))
	c := f.newController(ctx)
	if _, err := syncClaim(ctx, c, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	got := f.writtenClaim()
	ev := findCondition(got, ConditionEvicted)
	if ev == nil || ev.Status != metav1.ConditionTrue || ev.Reason != ReasonEvicted || !strings.Contains(ev.Message, "pod c1 ") || !strings.Contains(ev.Message, "ephemeral local storage") {
		t.Errorf("Evicted condition %+v, want True/Evicted naming the pod and the kubelet's message", ev)
	}
	if ready := findCondition(got, ConditionReady); ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != ReasonEvicted {
		t.Errorf("Ready condition %+v, want False/Evicted", ready)
	}
	if got.Status.Phase != airlockv1alpha1.ClaimBound {
		t.Errorf("phase %s, want Bound: another pod is started on the workspace", got.Status.Phase)
	}
	if !slices.Contains(f.actions(), "delete pods c1") {
		t.Errorf("actions %q, want the ended pod deleted", f.actions())
	}
	events := strings.Join(f.events(), "\n")
	if !strings.Contains(events, "Warning Evicted pod c1 was evicted") {
		t.Errorf("events %q, want a Warning Evicted event naming the pod", events)
	}

	// The deletion is seen, the pod is created again.
	f.claims, f.pods = []*airlockv1alpha1.SandboxClaim{got}, nil
	c = f.newController(ctx)
	if _, err := syncClaim(ctx, c, keyOf(got)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"create secrets " + tokenSecretName(claim), "create pods c1"})

	// The new pod is Ready, at another IP: Ready True at the new address, and no second report.
	f.pods = []*corev1.Pod{newPod(claim, func(p *corev1.Pod) { p.UID = "uid-pod-2"; markReady(p); p.Status.PodIP = "10.244.0.99" })}
	c = f.newController(ctx)
	if _, err := syncClaim(ctx, c, keyOf(got)); err != nil {
		t.Fatal(err)
	}
	checkActions(t, f, []string{"update sandboxclaims/status c1"})
	again := f.writtenClaim()
	if ready := findCondition(again, ConditionReady); ready == nil || ready.Status != metav1.ConditionTrue {
		t.Errorf("Ready condition %+v, want True: the new pod is ready", ready)
	}
	if want := []airlockv1alpha1.ClaimAddress{{Name: "mcp", URL: "http://10.244.0.99:8080"}}; !cmp.Equal(want, again.Status.Addresses) {
		t.Errorf("addresses %v, want %v", again.Status.Addresses, want)
	}
	if events := f.events(); len(events) != 0 {
		t.Errorf("events %q, want none for an eviction already reported", events)
	}
}

// fakePodEvents answers EvictionMessage from a map by pod name, and counts the lookups.
type fakePodEvents struct {
	messages map[string]string
	lookups  int
}

func (f *fakePodEvents) EvictionMessage(_ context.Context, pod *corev1.Pod) (string, error) {
	f.lookups++
	return f.messages[pod.Name], nil
}

// TestSyncBoundPodEvictedSucceeded: an evicted pod can end Succeeded (its container exits 0 on
// SIGTERM) with a status that says nothing of the eviction, as seen on the real node; the
// kubelet's Evicted event says it. The claim reports it from the event, looked up once per ended
// pod; a pod that ended for another reason is looked up once and not reported. Either way the
// ended pod is deleted, to be created again.
func TestSyncBoundPodEvictedSucceeded(t *testing.T) {
	const kubeletMessage = "Pod ephemeral local storage usage exceeds the total limit of containers 64Mi. "
	for name, tc := range map[string]struct {
		events     map[string]string
		wantReport bool
	}{
		"evicted":            {events: map[string]string{"c1": kubeletMessage}, wantReport: true},
		"ended, not evicted": {events: map[string]string{}},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			claim := bound("c1", t0.Add(-time.Minute))
			f.claims = append(f.claims, claim)
			f.withChildren(claim)
			f.pods = append(f.pods, newPod(claim, func(p *corev1.Pod) {
				p.UID = "uid-pod-1"
				p.Status.Phase = corev1.PodSucceeded
			}))
			c := f.newController(ctx)
			events := &fakePodEvents{messages: tc.events}
			c.podEvents = events
			if _, err := syncClaim(ctx, c, keyOf(claim)); err != nil {
				t.Fatal(err)
			}
			got := f.writtenClaim()
			ev := findCondition(got, ConditionEvicted)
			if tc.wantReport && (ev == nil || !strings.Contains(ev.Message, "pod c1 ") || !strings.Contains(ev.Message, "ephemeral local storage")) {
				t.Errorf("Evicted condition %+v, want the pod and the kubelet's message", ev)
			}
			if !tc.wantReport && ev != nil {
				t.Errorf("Evicted condition %+v for a pod that was not evicted", ev)
			}
			if !slices.Contains(f.actions(), "delete pods c1") {
				t.Errorf("actions %q, want the ended pod deleted", f.actions())
			}
			reported := 0
			for _, e := range f.events() {
				if strings.HasPrefix(e, "Warning Evicted") {
					reported++
				}
			}
			if (reported == 1) != tc.wantReport {
				t.Errorf("%d Evicted events, want a report: %v", reported, tc.wantReport)
			}
			// Looked at again (the deletion not seen yet): no second lookup, no second report.
			if err := f.claimInformer.GetIndexer().Update(got); err != nil {
				t.Fatal(err)
			}
			if _, err := syncClaim(ctx, c, keyOf(got)); err != nil {
				t.Fatal(err)
			}
			for _, e := range f.events() {
				if strings.HasPrefix(e, "Warning Evicted") {
					t.Errorf("a second report: %q", e)
				}
			}
			if events.lookups != 1 {
				t.Errorf("%d event lookups, want 1", events.lookups)
			}
		})
	}
}
