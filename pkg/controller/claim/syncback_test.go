package claim

import (
	"fmt"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

func TestSyncReapingSyncBack(t *testing.T) {
	reaping := func(failures string) *airlockv1alpha1.SandboxClaim {
		c := bound("c1", t0.Add(-time.Hour))
		c.Status.Phase = airlockv1alpha1.ClaimReaping
		c.Status.Reason = ReasonIdleTimeout
		c.Spec.TargetPath = "projects/demo"
		c.Annotations = map[string]string{airlockv1alpha1.AnnotationTraceparent: testTraceparent}
		if failures != "" {
			c.Annotations[AnnotationSyncFailures] = failures
		}
		return c
	}
	job := func(claim *airlockv1alpha1.SandboxClaim, attempt int, cond batchv1.JobConditionType, at time.Time, age time.Duration, notReady bool) *batchv1.Job {
		j := buildSyncJob(claim, "workspace-content", testSyncImage, attempt, true, 3)
		j.CreationTimestamp = metav1.NewTime(t0.Add(-age))
		if !notReady {
			j.Status.Ready = ptr.To[int32](1)
		}
		if cond != "" {
			j.Status.Conditions = []batchv1.JobCondition{{Type: cond, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at), Message: "copy failed"}}
		}
		return j
	}
	tests := map[string]struct {
		failures    string
		attempt     int
		cond        batchv1.JobConditionType
		age         time.Duration // of the Job at t0; a minute when zero
		notReady    bool          // its pod has not become ready
		pods        bool
		step        time.Duration
		wantRequeue *time.Duration
		wantActions []string
		wantEvents  []string
		// syncedBack: the claim says SyncedBack already (a leader wrote it and was killed
		// before it deleted the claim).
		syncedBack bool
		// wantSpan: the attempt's sync-back span exported: "ok", "error", or none.
		wantSpan string
	}{
		"pod still there: deleted, and waited for": {
			pods:        true,
			wantActions: []string{"delete pods c1"},
		},
		"job running: wait": {
			attempt: 1,
		},
		// Every attempt has an end: a pod that never starts (image, scheduling, volume) is a
		// failed attempt syncStartTimeout after the Job's creation.
		"job's pod not ready yet: looked at again when it should have started": {
			attempt: 1, notReady: true,
			wantRequeue: ptr.To(4 * time.Minute),
		},
		"job's pod not ready after the start timeout: counted, reported, backoff": {
			attempt: 1, notReady: true, age: 5 * time.Minute,
			wantSpan:    "error",
			wantRequeue: ptr.To(10 * time.Second),
			wantActions: []string{"update sandboxclaims c1", "update sandboxclaims/status c1"},
			// Said apart (SyncJobNotStarted), so that the runtime's status counts it apart.
			wantEvents: []string{"Warning SyncJobNotStarted Sync-back Job c1-sync failed (attempt 1), retrying in 10s: its pod did not become ready within 5m0s (image, scheduling or volume)"},
		},
		"job's pod never started, counted, backoff over: Job deleted": {
			failures: "1", attempt: 1, notReady: true, age: 5 * time.Minute, step: 10 * time.Second,
			wantActions: []string{"delete jobs c1-sync"},
		},
		"job succeeded: workspace kept, claim deleted": {
			attempt:     1,
			wantSpan:    "ok",
			cond:        batchv1.JobComplete,
			wantActions: []string{"update sandboxclaims/status c1", "create jobs " + workspace.RecordName(claimDir("c1")), "delete sandboxclaims c1"},
			wantEvents: []string{"Normal SyncedBack Sync-back Job c1-sync saved the workspace to projects/demo",
				"Normal WorkspaceKept Kept the workspace " + claimDir("c1") + " for 24h0m0s (record Job " + workspace.RecordName(claimDir("c1")) +
					"): a new claim of the same runtime, session and handle resumes with its files",
				"Normal SyncedBack Deleting the claim (SyncedBack)"},
		},
		// The leader that wrote SyncedBack exported the attempt's span: a new leader that takes
		// the claim up before its deletion exports none again (docs/record.md §1, "Faults").
		"job succeeded, SyncedBack written by a killed leader: deleted, no second span": {
			attempt:     1,
			syncedBack:  true,
			cond:        batchv1.JobComplete,
			wantActions: []string{"create jobs " + workspace.RecordName(claimDir("c1")), "delete sandboxclaims c1"},
			wantEvents: []string{"Normal SyncedBack Sync-back Job c1-sync saved the workspace to projects/demo",
				"Normal WorkspaceKept Kept the workspace " + claimDir("c1") + " for 24h0m0s (record Job " + workspace.RecordName(claimDir("c1")) +
					"): a new claim of the same runtime, session and handle resumes with its files",
				"Normal SyncedBack Deleting the claim (SyncedBack)"},
		},
		"job failed the first time: counted, reported, backoff": {
			attempt:     1,
			wantSpan:    "error",
			cond:        batchv1.JobFailed,
			wantRequeue: ptr.To(10 * time.Second),
			wantActions: []string{"update sandboxclaims c1", "update sandboxclaims/status c1"},
			wantEvents:  []string{"Warning SyncBackFailed Sync-back Job c1-sync failed (attempt 1), retrying in 10s: copy failed"},
		},
		"job failed, counted, backoff not over: wait": {
			failures:    "1",
			attempt:     1,
			cond:        batchv1.JobFailed,
			step:        4 * time.Second,
			wantRequeue: ptr.To(6 * time.Second),
		},
		"job failed, counted, backoff over: Job deleted": {
			failures:    "1",
			attempt:     1,
			cond:        batchv1.JobFailed,
			step:        10 * time.Second,
			wantActions: []string{"delete jobs c1-sync"},
		},
		"third failure backs off 40s": {
			failures:    "2",
			wantSpan:    "error",
			attempt:     3,
			cond:        batchv1.JobFailed,
			wantRequeue: ptr.To(40 * time.Second),
			wantActions: []string{"update sandboxclaims c1", "update sandboxclaims/status c1"},
			wantEvents:  []string{"Warning SyncBackFailed Sync-back Job c1-sync failed (attempt 3), retrying in 40s: copy failed"},
		},
		"job gone after failures: next attempt": {
			failures:    "2",
			wantActions: []string{"create jobs c1-sync"},
			wantEvents:  []string{"Normal SyncBackStarted Started sync-back Job c1-sync (attempt 3)"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			claim := reaping(tc.failures)
			if tc.syncedBack {
				setCondition(&claim.Status, ConditionSyncBack, metav1.ConditionTrue, ReasonSyncedBack, fmt.Sprintf(messageSyncBackOK, claim.Spec.TargetPath), t0.Add(-time.Second))
			}
			f.claims = append(f.claims, claim)
			f.withChildren(claim)
			if tc.pods {
				f.pods = append(f.pods, newPod(claim, nil))
			}
			if tc.attempt > 0 {
				age := tc.age
				if age == 0 {
					age = time.Minute
				}
				f.jobs = append(f.jobs, job(claim, tc.attempt, tc.cond, t0, age, tc.notReady))
			}
			c := f.newController(ctx)
			spans := tracetest.NewInMemoryExporter()
			c.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans)))
			f.clock.Step(tc.step)
			requeue, err := syncClaim(ctx, c, keyOf(claim))
			if err != nil {
				t.Fatal(err)
			}
			checkSyncBackSpan(t, spans.GetSpans(), tc.wantSpan)
			if tc.wantSpan == "ok" {
				// The whole attempt, whichever leader created its Job: from the Job's creation to
				// its completion.
				if s := spans.GetSpans()[0]; !s.StartTime.Equal(t0.Add(-time.Minute)) || !s.EndTime.Equal(t0) {
					t.Errorf("span %v..%v, want the Job's creation %v to its completion %v", s.StartTime, s.EndTime, t0.Add(-time.Minute), t0)
				}
			}
			checkRequeue(t, requeue, tc.wantRequeue)
			checkActions(t, f, tc.wantActions)
			if diff := cmp.Diff(tc.wantEvents, f.events()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if len(tc.wantActions) == 2 && tc.wantActions[0] == "update sandboxclaims c1" {
				got := f.writtenClaim()
				cond := findCondition(got, ConditionSyncBack)
				wantReason := ReasonSyncBackFailed
				if tc.notReady {
					wantReason = ReasonSyncJobNotStarted
				}
				if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != wantReason {
					t.Errorf("SyncBack condition %+v, want False/%s", cond, wantReason)
				}
				if got.Annotations[AnnotationSyncFailures] != fmt.Sprint(tc.attempt) {
					t.Errorf("failures annotation %q, want %d", got.Annotations[AnnotationSyncFailures], tc.attempt)
				}
			}
		})
	}
}

func TestSyncBackoff(t *testing.T) {
	want := map[int]time.Duration{1: 10 * time.Second, 2: 20 * time.Second, 3: 40 * time.Second, 5: 160 * time.Second, 6: 5 * time.Minute, 20: 5 * time.Minute}
	for attempt, d := range want {
		if got := syncBackoff(attempt); got != d {
			t.Errorf("syncBackoff(%d) = %s, want %s", attempt, got, d)
		}
	}
}

func TestBuildSyncJob(t *testing.T) {
	claim := newClaim("c1", "s1", airlockv1alpha1.ClaimReaping, t0)
	claim.Spec.TargetPath = "projects/demo"
	job := buildSyncJob(claim, "workspace-content", testSyncImage, 2, false, 3)
	if job.Name != "c1-sync" || job.Annotations[AnnotationSyncAttempt] != "2" || !metav1.IsControlledBy(job, claim) || job.Labels[LabelClaim] != "c1" {
		t.Errorf("job meta %+v", job.ObjectMeta)
	}
	if *job.Spec.BackoffLimit != 0 || job.Spec.TTLSecondsAfterFinished != nil {
		t.Errorf("backoffLimit %d ttl %v, want 0 and unset", *job.Spec.BackoffLimit, job.Spec.TTLSecondsAfterFinished)
	}
	if d := job.Spec.ActiveDeadlineSeconds; d == nil || *d != 1800 {
		t.Errorf("activeDeadlineSeconds %v, want 1800: every attempt ends", d)
	}
	pod := job.Spec.Template.Spec
	if _, ok := job.Spec.Template.Labels[LabelClaim]; ok {
		t.Error("sync pods carry the claim label: they would be taken for the claim's pod")
	}
	if pod.RestartPolicy != corev1.RestartPolicyNever || *pod.AutomountServiceAccountToken || !*pod.SecurityContext.RunAsNonRoot {
		t.Errorf("pod spec %+v", pod)
	}
	wantVolumes := []corev1.Volume{{Name: "content", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "workspace-content"}}}}
	if diff := cmp.Diff(wantVolumes, pod.Volumes); diff != "" {
		t.Errorf("volumes (-want +got):\n%s", diff)
	}
	if m := pod.Containers[0].VolumeMounts; len(m) != 1 || m[0].MountPath != "/content" {
		t.Errorf("mounts %+v", m)
	}
}

// testTraceparent is a sampled acquire's traceparent, as the Sandbox API writes it on a claim.
const testTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// checkSyncBackSpan: want "" is no span; "ok" or "error" one "syncback" span, a child of the
// claim's acquire span, with that status.
func checkSyncBackSpan(t *testing.T, spans tracetest.SpanStubs, want string) {
	t.Helper()
	if want == "" {
		if len(spans) != 0 {
			t.Errorf("%d spans exported, want none", len(spans))
		}
		return
	}
	if len(spans) != 1 || spans[0].Name != "syncback" {
		t.Fatalf("spans %v, want one syncback span", spans)
	}
	s := spans[0]
	if s.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || s.Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("span in trace %s under %s, want under the claim's acquire span", s.SpanContext.TraceID(), s.Parent.SpanID())
	}
	if got := map[bool]string{true: "error", false: "ok"}[s.Status.Code == codes.Error]; got != want {
		t.Errorf("span status %v, want %s", s.Status, want)
	}
	if !s.EndTime.After(s.StartTime) {
		t.Errorf("span %v..%v: it ends before it starts", s.StartTime, s.EndTime)
	}
}

// TestSyncBackOfAnUntracedClaimIsNoSpan: a claim whose acquire was not traced (no traceparent)
// exports no sync-back span: a sync-back is never a new root.
func TestSyncBackOfAnUntracedClaimIsNoSpan(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := bound("c1", t0.Add(-time.Hour))
	claim.Status.Phase, claim.Status.Reason, claim.Spec.TargetPath = airlockv1alpha1.ClaimReaping, ReasonIdleTimeout, "projects/demo"
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	j := buildSyncJob(claim, "workspace-content", testSyncImage, 1, true, 3)
	j.CreationTimestamp = metav1.NewTime(t0.Add(-time.Minute))
	j.Status.Ready = ptr.To[int32](1)
	j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0)}}
	f.jobs = append(f.jobs, j)
	c := f.newController(ctx)
	spans := tracetest.NewInMemoryExporter()
	c.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans)))
	if _, err := syncClaim(ctx, c, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	checkSyncBackSpan(t, spans.GetSpans(), "")
}
