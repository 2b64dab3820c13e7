package workspacegc

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// failedCollection returns the record of claim c1's workspace being collected, its own
// collection failed at failedAt, with attempts attempts after it made.
func failedCollection(failedAt time.Time, attempts string) *batchv1.Job {
	record := keptRecord(newClaim("c1", airlockv1alpha1.ClaimBinding, t0), "c1", "uid-rt-agent", t0.Add(-25*time.Hour))
	record.Spec.Suspend = ptr.To(false)
	record.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue,
		Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastTransitionTime: metav1.NewTime(failedAt)}}
	if attempts != "" {
		record.Annotations[AnnotationCollectAttempts] = attempts
	}
	return record
}

// attemptJob is the record's n-th collection attempt, ended with cond (none: running).
func attemptJob(record *batchv1.Job, n int, cond batchv1.JobConditionType, at time.Time) *batchv1.Job {
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: CollectJobName(record.Name, n), Namespace: record.Namespace, UID: "uid-attempt",
		Labels:          map[string]string{airlockv1alpha1.LabelClaim: "c1"},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(record, batchv1.SchemeGroupVersion.WithKind("Job"))}}}
	if cond != "" {
		job.Status.Conditions = []batchv1.JobCondition{{Type: cond, Status: corev1.ConditionTrue, Reason: "DeadlineExceeded", Message: "too slow", LastTransitionTime: metav1.NewTime(at)}}
	}
	return job
}

// TestFailedCollectionRetried (issue 39): a collection that failed is tried again, with backoff
// (10 s doubling), by Jobs of its own, children of the record, which stays: a Warning event says
// why it failed and when it is tried again; the attempt is counted on the record before its Job
// is made; an attempt that completes deletes the record. Before, a failed collection waited for
// a person to delete the Job.
func TestFailedCollectionRetried(t *testing.T) {
	tests := map[string]struct {
		attempts     string
		attempt      *batchv1.JobConditionType // the latest attempt's Job, with its condition ("": running)
		failedAt     time.Time
		wantRequeue  *time.Duration
		wantActions  func(record string) []string
		wantEvent    string
		wantAttempts string
	}{
		"the record's collection failed a second ago: waits 10 s, says why": {
			failedAt: t0.Add(-time.Second), wantRequeue: ptr.To(9 * time.Second),
			wantActions: func(string) []string { return nil },
			wantEvent:   "Warning " + ReasonWorkspaceCollectFailed + " the collection of the kept workspace " + claimDir("c1") + " failed (attempt 1): BackoffLimitExceeded: Job has reached the specified backoff limit; trying again in 10s",
		},
		"its backoff passed: counted, then the first attempt made": {
			failedAt:     t0.Add(-10 * time.Second),
			wantActions:  func(r string) []string { return []string{"update jobs " + r, "create jobs " + r + "-c1"} },
			wantAttempts: "1",
		},
		"counted, its attempt not made (a crash): made": {
			attempts: "1", failedAt: t0.Add(-time.Hour),
			wantActions: func(r string) []string { return []string{"create jobs " + r + "-c1"} },
		},
		"the first attempt runs: nothing": {
			attempts: "1", attempt: ptr.To(batchv1.JobConditionType("")), failedAt: t0.Add(-time.Hour),
			wantActions: func(string) []string { return nil },
		},
		"the first attempt failed a second ago: waits 20 s": {
			attempts: "1", attempt: ptr.To(batchv1.JobFailed), failedAt: t0.Add(-time.Second), wantRequeue: ptr.To(19 * time.Second),
			wantActions: func(string) []string { return nil },
			wantEvent:   "attempt 2): DeadlineExceeded: too slow; trying again in 20s",
		},
		"the first attempt failed 20 s ago: the second made, the first deleted": {
			attempts: "1", attempt: ptr.To(batchv1.JobFailed), failedAt: t0.Add(-20 * time.Second),
			wantActions: func(r string) []string {
				return []string{"update jobs " + r, "create jobs " + r + "-c2", "delete jobs " + r + "-c1"}
			},
			wantAttempts: "2",
		},
		"an attempt completed: the record deleted": {
			attempts: "1", attempt: ptr.To(batchv1.JobComplete), failedAt: t0.Add(-time.Second),
			wantActions: func(r string) []string { return []string{"delete jobs " + r} },
			wantEvent:   "Normal " + ReasonWorkspaceCollected,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t)
			record := failedCollection(tc.failedAt, tc.attempts)
			if tc.attempt != nil {
				record.Status.Conditions[0].LastTransitionTime = metav1.NewTime(t0.Add(-time.Hour))
				f.jobs = append(f.jobs, attemptJob(record, 1, *tc.attempt, tc.failedAt))
			}
			f.jobs = append(f.jobs, record)
			c := f.newController(ctx)
			requeue, err := c.sync(ctx, cache.MetaObjectToName(record))
			if err != nil {
				t.Fatal(err)
			}
			checkRequeue(t, requeue, tc.wantRequeue)
			checkActions(t, f, tc.wantActions(record.Name))
			if tc.wantEvent != "" {
				if events := drain(f); !strings.Contains(strings.Join(events, "\n"), tc.wantEvent) {
					t.Errorf("events %q, want %q", events, tc.wantEvent)
				}
			}
			if tc.wantAttempts == "" {
				return
			}
			var updated, created *batchv1.Job
			for _, a := range f.log {
				if a.GetResource().Resource != "jobs" {
					continue
				}
				switch a.GetVerb() {
				case "update":
					updated = a.(core.UpdateAction).GetObject().(*batchv1.Job)
				case "create":
					created = a.(core.CreateAction).GetObject().(*batchv1.Job)
				}
			}
			if updated == nil || created == nil {
				t.Fatalf("record updated %v, attempt created %v: want both", updated != nil, created != nil)
			}
			if updated.Annotations[AnnotationCollectAttempts] != tc.wantAttempts || updated.ResourceVersion != record.ResourceVersion {
				t.Errorf("record attempts %q rv %q, want %q conditional on %q", updated.Annotations[AnnotationCollectAttempts], updated.ResourceVersion, tc.wantAttempts, record.ResourceVersion)
			}
			if !metav1.IsControlledBy(created, record) || created.Spec.Suspend != nil ||
				!equalArgs(created.Spec.Template.Spec.Containers[0].Args, record.Spec.Template.Spec.Containers[0].Args) {
				t.Errorf("attempt %s: owner %v suspend %v args %v, want the record's child running its removal",
					created.Name, created.OwnerReferences, created.Spec.Suspend, created.Spec.Template.Spec.Containers[0].Args)
			}
		})
	}
}

// TestCollectBackoff: 10 s doubling, at most 10 min.
func TestCollectBackoff(t *testing.T) {
	for failed, want := range map[int]time.Duration{1: 10 * time.Second, 2: 20 * time.Second, 4: 80 * time.Second, 6: 320 * time.Second, 7: 10 * time.Minute, 30: 10 * time.Minute} {
		if got := collectBackoff(failed); got != want {
			t.Errorf("collectBackoff(%d) = %s, want %s", failed, got, want)
		}
	}
}

func equalArgs(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

// drain returns the events recorded so far.
func drain(f *fixture) []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// TestChildJobEnqueuesItsRecord: a collection attempt's or a retry's events enqueue the record
// that controls it (their end is what the record waits for); a Job controlled by anything else
// enqueues nothing.
func TestChildJobEnqueuesItsRecord(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t)
	c := f.newController(ctx)
	record := failedCollection(t0, "1")
	c.enqueueRecord(cache.DeletedFinalStateUnknown{Obj: attemptJob(record, 1, batchv1.JobFailed, t0)})
	if c.queue.Len() != 1 {
		t.Fatalf("%d keys enqueued, want the record's", c.queue.Len())
	}
	if got, _ := c.queue.Get(); got != cache.MetaObjectToName(record) {
		t.Errorf("enqueued %v, want the record %s", got, record.Name)
	}
	c.queue.Done(cache.MetaObjectToName(record))
	other := attemptJob(record, 1, "", t0)
	other.OwnerReferences[0].Kind = "CronJob"
	c.enqueueRecord(other)
	if c.queue.Len() != 0 {
		t.Errorf("a Job of another owner enqueued %d keys", c.queue.Len())
	}
}
