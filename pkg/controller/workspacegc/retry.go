package workspacegc

// A collection that failed is tried again, with backoff, by Jobs of its own: children of the
// record (which stays, failed, as the record: there is no moment without one), named
// <record>-c<n>, each a copy of the record's pod. The record's annotation airlock.dev/collect-
// attempts counts them; it is written before each is created, so a crash in between leaves a
// record that says which attempt to create. Each failure is a Warning event on the record saying
// why and when the next attempt starts; the claims that wait for the collection say the same.

import (
	"context"
	"fmt"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/objectcontrol"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// AnnotationCollectAttempts is on a record whose collection failed: how many attempts after the
// record's own (children <record>-c<n>) were made.
const AnnotationCollectAttempts = "airlock.dev/collect-attempts"

// Collection backoff: 10 s after the first failure, doubling, at most 10 min; never given up (a
// collection that cannot remove a workspace says why at every attempt).
const (
	collectBackoffBase = 10 * time.Second
	collectBackoffMax  = 10 * time.Minute
)

// collectBackoff is the wait after the given failed attempt (1: the record's own).
func collectBackoff(failed int) time.Duration {
	d := collectBackoffBase
	for i := 1; i < failed && d < collectBackoffMax; i++ {
		d *= 2
	}
	return min(d, collectBackoffMax)
}

// CollectJobName is the name of the n-th collection attempt after the record's own.
func CollectJobName(record string, n int) string {
	return record + "-c" + strconv.Itoa(n)
}

// collectAttempts is the record's count of collection attempts after its own.
func collectAttempts(record *batchv1.Job) int {
	n, err := strconv.Atoi(record.Annotations[AnnotationCollectAttempts])
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// syncFailedCollection looks at a record whose own collection failed: the latest attempt's Job
// completed (the record is deleted), failed (the next is made once its backoff has passed), or
// runs.
func (c *Controller) syncFailedCollection(ctx context.Context, record *batchv1.Job, failed *batchv1.JobCondition) (*time.Duration, error) {
	n := collectAttempts(record)
	since, why := failed.LastTransitionTime.Time, conditionWhy(failed)
	var previous *batchv1.Job
	if n > 0 {
		attempt, err := c.jobLister.Jobs(record.Namespace).Get(CollectJobName(record.Name, n))
		switch {
		case apierrors.IsNotFound(err):
			return nil, c.createCollectAttempt(ctx, record, n) // counted, not made yet (a crash, or its create failed)
		case err != nil:
			return nil, err
		case !metav1.IsControlledBy(attempt, record):
			return nil, fmt.Errorf("job %s is not the collection attempt of record %s; leaving both alone", attempt.Name, record.Name)
		case workspace.JobCondition(attempt, batchv1.JobComplete) != nil:
			c.recorder.Eventf(record, corev1.EventTypeNormal, ReasonWorkspaceCollected, messageWorkspaceCollected, record.Annotations[airlockv1alpha1.AnnotationKeptDir])
			return nil, c.jobs.Delete(ctx, record.Namespace, record.Name, record.UID)
		}
		cond := workspace.JobCondition(attempt, batchv1.JobFailed)
		if cond == nil {
			return nil, nil // running; its end enqueues the record
		}
		since, why, previous = cond.LastTransitionTime.Time, conditionWhy(cond), attempt
	}
	backoff := collectBackoff(n + 1)
	if left, ok := timeLeft(since, backoff, c.clock.Now()); ok {
		c.recorder.Eventf(record, corev1.EventTypeWarning, ReasonWorkspaceCollectFailed, messageCollectionFailed,
			record.Annotations[airlockv1alpha1.AnnotationKeptDir], n+1, why, backoff)
		return ptr.To(left), nil
	}
	if held, requeue, err := c.heldBack(ctx, record); err != nil || held {
		return requeue, err
	}
	updated := record.DeepCopy()
	updated.Annotations[AnnotationCollectAttempts] = strconv.Itoa(n + 1)
	if err := c.jobs.Update(ctx, updated); err != nil {
		return nil, err
	}
	if err := c.createCollectAttempt(ctx, updated, n+1); err != nil {
		return nil, err
	}
	if previous != nil {
		return nil, objectcontrol.IgnoreGone(c.jobs.Delete(ctx, previous.Namespace, previous.Name, previous.UID))
	}
	return nil, nil
}

// createCollectAttempt creates the n-th collection attempt of the record: its pod, a child of it.
func (c *Controller) createCollectAttempt(ctx context.Context, record *batchv1.Job, n int) error {
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:      CollectJobName(record.Name, n),
			Namespace: record.Namespace,
			Labels: map[string]string{
				airlockv1alpha1.LabelClaim:   record.Labels[airlockv1alpha1.LabelClaim],
				airlockv1alpha1.LabelRuntime: record.Labels[airlockv1alpha1.LabelRuntime],
			},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(record, batchv1.SchemeGroupVersion.WithKind("Job"))},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit:          record.Spec.BackoffLimit,
			ActiveDeadlineSeconds: record.Spec.ActiveDeadlineSeconds,
			Template:              *record.Spec.Template.DeepCopy(),
		},
	}
	// The record's template carries the labels the Job controller gave its pods; a new Job gets
	// its own.
	for _, k := range []string{batchv1.ControllerUidLabel, batchv1.JobNameLabel, "controller-uid", "job-name"} {
		delete(job.Spec.Template.Labels, k)
	}
	job.Spec.Selector = nil
	job.Spec.ManualSelector = nil
	err := c.jobs.Create(ctx, job)
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err == nil {
		klog.FromContext(ctx).V(2).Info("Collecting a kept workspace again", "record", klog.KObj(record), "attempt", n)
	}
	return err
}

// conditionWhy is a Job condition's reason and message.
func conditionWhy(cond *batchv1.JobCondition) string {
	if cond.Reason == "" {
		return cond.Message
	}
	return cond.Reason + ": " + cond.Message
}
