package workspacegc

// Held workspaces: the record of a workspace whose sync-back gave up carries
// airlock.dev/held (the claim controller writes it so). It is never collected, by its retention,
// its runtime's deletion or a claim that waits, until a person acts on the record Job with the
// annotation airlock.dev/held-action (docs/nothing-lost.md):
//
//   - release: it is kept from now on as any other workspace (resumed within the runtime's
//     retention, collected past it);
//   - retry: its sync-back runs once more, as the Job <record>-retry (a child of the record, a
//     sync-back pod of the claim that kept it, so that no collection runs beside it). On success
//     it is released as above (the work is in the target); on failure it stays held, with the
//     retry's failure as why, and the action is cleared so that a person may ask again.

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/objectcontrol"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// Event reasons and messages of held workspaces.
const (
	ReasonWorkspaceReleased     = "WorkspaceReleased"
	ReasonWorkspaceRetrying     = "WorkspaceSyncBackRetrying"
	ReasonWorkspaceSaved        = "WorkspaceSyncBackRetried"
	ReasonWorkspaceRetryFailed  = "WorkspaceSyncBackRetryFailed"
	ReasonUnknownHeldAction     = "UnknownHeldAction"
	messageWorkspaceReleased    = "Released the held workspace %s: it is kept as any other from now on (%s)"
	messageWorkspaceRetrying    = "Copying the held workspace %s into %s again (Job %s)"
	messageWorkspaceSaved       = "the retry Job %s copied the workspace into %s"
	messageWorkspaceRetryFailed = "the retry Job %s failed: %s; the workspace stays held (annotate %s=%s to try again)"
	messageUnknownHeldAction    = "unknown %s %q: use %q or %q"
	messageReleasedByPerson     = "released by " + airlockv1alpha1.AnnotationHeldAction
)

// syncHeld carries out the action a person asked of a held record, if any.
func (c *Controller) syncHeld(ctx context.Context, record *batchv1.Job) (*time.Duration, error) {
	switch action := record.Annotations[airlockv1alpha1.AnnotationHeldAction]; action {
	case "":
		return nil, nil // held: reported on the runtime's status; an annotation enqueues it
	case airlockv1alpha1.HeldActionRelease:
		return nil, c.release(ctx, record, messageReleasedByPerson)
	case airlockv1alpha1.HeldActionRetry:
		return c.syncRetry(ctx, record)
	default:
		c.recorder.Eventf(record, corev1.EventTypeWarning, ReasonUnknownHeldAction, messageUnknownHeldAction,
			airlockv1alpha1.AnnotationHeldAction, action, airlockv1alpha1.HeldActionRetry, airlockv1alpha1.HeldActionRelease)
		return nil, nil
	}
}

// syncRetry runs the held record's retry Job, and once it has ended releases the record (it
// succeeded) or keeps it held with the retry's failure.
func (c *Controller) syncRetry(ctx context.Context, record *batchv1.Job) (*time.Duration, error) {
	dir, target := record.Annotations[airlockv1alpha1.AnnotationKeptDir], record.Annotations[airlockv1alpha1.AnnotationHeldTarget]
	if workspace.ValidatePath(target) != nil || workspace.Overlaps(target, dir) {
		c.recorder.Eventf(record, corev1.EventTypeWarning, ReasonWorkspaceRetryFailed, messageWorkspaceRetryFailed,
			workspace.RetryJobName(record.Name), fmt.Sprintf("the record's target %q is not a target", target),
			airlockv1alpha1.AnnotationHeldAction, airlockv1alpha1.HeldActionRetry)
		return nil, nil
	}
	retry, err := c.jobLister.Jobs(record.Namespace).Get(workspace.RetryJobName(record.Name))
	if apierrors.IsNotFound(err) {
		return c.startRetry(ctx, record)
	}
	if err != nil {
		return nil, err
	}
	if !metav1.IsControlledBy(retry, record) {
		return nil, fmt.Errorf("job %s is not the retry of record %s; leaving both alone", retry.Name, record.Name)
	}
	if workspace.JobCondition(retry, batchv1.JobComplete) != nil {
		if err := c.release(ctx, record, fmt.Sprintf(messageWorkspaceSaved, retry.Name, target)); err != nil {
			return nil, err
		}
		c.recorder.Eventf(record, corev1.EventTypeNormal, ReasonWorkspaceSaved, messageWorkspaceSaved, retry.Name, target)
		return nil, objectcontrol.IgnoreGone(c.jobs.Delete(ctx, retry.Namespace, retry.Name, retry.UID))
	}
	cond := workspace.JobCondition(retry, batchv1.JobFailed)
	if cond == nil {
		return nil, nil // running; its end enqueues the record
	}
	message := fmt.Sprintf(messageWorkspaceRetryFailed, retry.Name, conditionWhy(cond), airlockv1alpha1.AnnotationHeldAction, airlockv1alpha1.HeldActionRetry)
	updated := record.DeepCopy()
	updated.Annotations[airlockv1alpha1.AnnotationHeld] = message
	delete(updated.Annotations, airlockv1alpha1.AnnotationHeldAction)
	if err := c.jobs.Update(ctx, updated); err != nil {
		return nil, err
	}
	c.recorder.Event(record, corev1.EventTypeWarning, ReasonWorkspaceRetryFailed, message)
	return nil, objectcontrol.IgnoreGone(c.jobs.Delete(ctx, retry.Namespace, retry.Name, retry.UID))
}

// startRetry creates the held record's retry Job once no pod of its claim may still write or copy
// the workspace.
func (c *Controller) startRetry(ctx context.Context, record *batchv1.Job) (*time.Duration, error) {
	if held, requeue, err := c.podsOnWorkspace(ctx, record); err != nil || held {
		return requeue, err
	}
	if why, err := c.syncBackRunning(record); err != nil || why != "" {
		klog.FromContext(ctx).V(2).Info("The retry of a held workspace waits for its turn", "record", klog.KObj(record), "why", why)
		return nil, err // the sync-back Job's end enqueues the record (enqueueRetries)
	}
	volumes := record.Spec.Template.Spec.Volumes
	if len(volumes) != 1 || volumes[0].PersistentVolumeClaim == nil {
		return nil, fmt.Errorf("record %s has no content volume", record.Name)
	}
	job := workspace.RetryJob(record, volumes[0].PersistentVolumeClaim.ClaimName, sandboxpod.JobConfig(workspace.RecordImage(record, c.syncImage)))
	if err := c.jobs.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Retrying the sync-back of a held workspace", "record", klog.KObj(record), "job", job.Name)
	c.recorder.Eventf(record, corev1.EventTypeNormal, ReasonWorkspaceRetrying, messageWorkspaceRetrying,
		record.Annotations[airlockv1alpha1.AnnotationKeptDir], record.Annotations[airlockv1alpha1.AnnotationHeldTarget], job.Name)
	return nil, nil
}

// syncBackRunning says which claim's sync-back Job runs into a target that overlaps the held
// record's ("" when none): the retry takes its turn in the claim controller's line (sync-backs
// of overlapping targets one at a time), and that controller's turns wait for a running retry in
// turn (pkg/controller/claim, retryAhead).
func (c *Controller) syncBackRunning(record *batchv1.Job) (string, error) {
	target, ok := workspace.RetryTarget(record)
	if !ok {
		return "", nil
	}
	claims, err := c.claimLister.SandboxClaims(record.Namespace).List(labels.Everything())
	if err != nil {
		return "", err
	}
	for _, claim := range claims {
		if claim.Spec.TargetPath == "" || !workspace.Overlaps(claim.Spec.TargetPath, target) {
			continue
		}
		job, err := c.jobLister.Jobs(claim.Namespace).Get(workspace.SyncJobName(claim))
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return "", err
		}
		if metav1.IsControlledBy(job, claim) && !workspace.JobFinished(job) {
			return fmt.Sprintf("sync-back Job %s of claim %s is running into %s", job.Name, claim.Name, claim.Spec.TargetPath), nil
		}
	}
	return "", nil
}

// release makes a held record an ordinary kept one, kept from now (why: for the event).
func (c *Controller) release(ctx context.Context, record *batchv1.Job, why string) error {
	updated := record.DeepCopy()
	for _, k := range []string{airlockv1alpha1.AnnotationHeld, airlockv1alpha1.AnnotationHeldAction,
		airlockv1alpha1.AnnotationHeldTarget, airlockv1alpha1.AnnotationHeldVersions} {
		delete(updated.Annotations, k)
	}
	updated.Annotations[workspace.AnnotationKeptAt] = c.clock.Now().UTC().Format(time.RFC3339)
	if err := c.jobs.Update(ctx, updated); err != nil {
		return err
	}
	c.recorder.Eventf(record, corev1.EventTypeNormal, ReasonWorkspaceReleased, messageWorkspaceReleased, record.Annotations[airlockv1alpha1.AnnotationKeptDir], why)
	return nil
}
