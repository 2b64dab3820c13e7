package claim

// Kept workspaces (issue 24 item 4; docs/nothing-lost.md, "Resume without loss").
//
// Once a reaped or closed claim's work is saved (its sync-back Job succeeded, or it has no
// targetPath), its workspace is kept, not removed: the claim writes a record of it and is deleted.
// The record is a suspended Job, the workspace's cleanup Job (`airlock sync --remove-only`), named
// after the workspace directory (keptJobName), with no owner: it survives the claim, the runtime,
// an operator restart and a leader change, and the Job informer (filtered on LabelClaim) has it.
// Its annotations say whose workspace it is (the runtime's name and UID), which directory, and
// when it was kept.
//
// Resume. A new claim whose workspace is that directory, of the same runtime name and UID, takes
// the record before its pod is created: it deletes the Job, conditional on the UID and the
// resourceVersion it read fresh from the API server, and its pod carries the labels that say so
// (LabelResumedKeptAt, copied into status.resumedWorkspace when it is Bound). Any other claim on
// that directory (a runtime deleted and created again under the same name) waits, Ready False
// WaitingForWorkspaceCollection, and asks for the record to be collected now.
//
// Collection. The keep queue looks at a record when it appears or changes, when its runtime goes
// or comes again, and when a claim of its directory goes; it collects it (unsuspends the Job, an
// Update conditional on the resourceVersion, so that of a take and a collection one wins) when the
// runtime's workspaceRetention has passed since it was kept, or at once when its runtime (by name
// and UID) is gone or the workspace cannot be resumed (a warm member's). Before, a fresh list of
// the namespace's claims from the API server must show no live claim on the directory, other than
// a claim of another owner that waits for the collection. A collection Job that completes is
// deleted, which wakes the claims that wait for it. Timers are AddAfter on the injected clock.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimname"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/syncback"
)

// Labels and annotations of a kept workspace's record (a suspended cleanup Job) and of a pod that
// resumed one.
const (
	// LabelKeptWorkspace marks a kept workspace's record ("true").
	LabelKeptWorkspace = airlockv1alpha1.LabelKeptWorkspace
	// AnnotationKeptRuntimeUID is the UID of the runtime whose workspace it is.
	AnnotationKeptRuntimeUID = airlockv1alpha1.AnnotationKeptRuntimeUID
	// AnnotationKeptDir is the workspace directory inside the content PVC.
	AnnotationKeptDir = airlockv1alpha1.AnnotationKeptDir
	// AnnotationKeptAt is when the workspace was kept (RFC 3339).
	AnnotationKeptAt = "airlock.dev/kept-at"
	// AnnotationKeptResumable is "false" for a workspace no claim resumes (a warm member's).
	AnnotationKeptResumable = airlockv1alpha1.AnnotationKeptResumable
	// AnnotationCollected says why a record is being collected.
	AnnotationCollected = "airlock.dev/collected"

	// LabelResumedKeptAt is on a pod that resumed a kept workspace: when it was kept (Unix
	// seconds); LabelResumedKeptBy names the claim that left it.
	LabelResumedKeptAt = "airlock.dev/resumed-kept-at"
	LabelResumedKeptBy = "airlock.dev/resumed-kept-by"
)

// Reasons of kept workspaces.
const (
	ReasonWorkspaceKept           = "WorkspaceKept"
	ReasonWorkspaceResumed        = "WorkspaceResumed"
	ReasonWaitingForCollection    = airlockv1alpha1.ReasonWaitingForWorkspaceCollection
	ReasonWorkspaceCollected      = "WorkspaceCollected"
	ReasonWorkspaceCollecting     = "WorkspaceCollecting"
	ReasonWorkspaceCollectFailed  = "WorkspaceCollectionFailed"
	CollectedRetentionPassed      = "RetentionPassed"
	CollectedRuntimeGone          = "RuntimeGone"
	CollectedNotResumable         = "NotResumable"
	messageWorkspaceKept          = "Kept the workspace %s for %s (record Job %s): a new claim of the same runtime, session and handle resumes with its files"
	messageWorkspaceResumed       = "Resumed the workspace %s that claim %s left at %s"
	messageWaitingForCollection   = "the workspace %s is another owner's kept workspace (record Job %s), being collected first"
	messageWaitingCollectionFail  = "the workspace %s is being collected by Job %s, which failed: %s (delete the Job to retry)"
	messageWorkspaceCollecting    = "Collecting the kept workspace %s: %s"
	messageWorkspaceCollected     = "Collected the kept workspace %s"
	keptCollectionBackoffLimit    = 3
	annotationValueNotResumable   = airlockv1alpha1.AnnotationValueNotResumable
	labelValueKeptWorkspace       = airlockv1alpha1.LabelValueKeptWorkspace
	keptRecordAlreadyCollectedFmt = "the kept workspace record %s is being collected; keeping %s again once it is gone"
)

// KeptRecordName is the name of the record (a Job) of the kept workspace directory dir: one per
// directory (claimname.KeptRecordName, shared with the Sandbox API).
func KeptRecordName(dir string) string { return claimname.KeptRecordName(dir) }

// keptJobName is KeptRecordName.
func keptJobName(dir string) string { return claimname.KeptRecordName(dir) }

// isKeptRecord says whether the Job is a kept workspace's record (or its collection).
func isKeptRecord(job *batchv1.Job) bool {
	return job.Labels[LabelKeptWorkspace] == labelValueKeptWorkspace && len(job.OwnerReferences) == 0
}

// recordIsOurs says whether the record is of the shape this operator writes: a kept workspace's
// record of a directory the operator may remove, named after it, running exactly the cleanup it
// builds for it (the image may be an earlier version's --sync-image). Anything else wearing the
// label (a Job someone else made in the namespace) is neither collected nor taken, nor waited
// for: fail closed.
func recordIsOurs(job *batchv1.Job) bool {
	dir := job.Annotations[AnnotationKeptDir]
	if !isKeptRecord(job) || job.Name != keptJobName(dir) ||
		syncback.ValidateRemovable(dir, sandboxpod.SandboxesDir(job.Namespace)) != nil {
		return false
	}
	containers := job.Spec.Template.Spec.Containers
	want := keptJobArgs(job.Namespace, dir)
	return len(containers) == 1 && len(job.Spec.Template.Spec.InitContainers) == 0 &&
		len(containers[0].Command) == 0 && slices.Equal(containers[0].Args, want)
}

// keptJobArgs are the arguments of the cleanup Job of a kept workspace.
func keptJobArgs(namespace, dir string) []string {
	return []string{"sync", "--content-root=" + contentMountPath, "--from=" + dir, "--remove-only",
		"--sandboxes-dir=" + sandboxpod.SandboxesDir(namespace)}
}

// workspaceRetention is the runtime's workspaceRetention, defaulted.
func workspaceRetention(rt *airlockv1alpha1.AgentRuntime) time.Duration {
	if rt == nil || rt.Spec.Sandbox.WorkspaceRetention == nil || rt.Spec.Sandbox.WorkspaceRetention.Duration < 0 {
		return airlockv1alpha1.DefaultWorkspaceRetention
	}
	return rt.Spec.Sandbox.WorkspaceRetention.Duration
}

// buildKeptJob returns the record of the claim's workspace: its cleanup Job, suspended.
func buildKeptJob(claim *airlockv1alpha1.SandboxClaim, contentClaimName, image string, now time.Time) *batchv1.Job {
	dir := workspaceDirOf(claim)
	args := keptJobArgs(claim.Namespace, dir)
	annotations := map[string]string{
		AnnotationKeptRuntimeUID: string(admission.RuntimeUID(claim)),
		AnnotationKeptDir:        dir,
		AnnotationKeptAt:         now.UTC().Format(time.RFC3339),
	}
	if claim.Status.Warm != nil {
		annotations[AnnotationKeptResumable] = annotationValueNotResumable
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:      keptJobName(dir),
			Namespace: claim.Namespace,
			Labels: map[string]string{
				LabelClaim:                   claim.Name,
				airlockv1alpha1.LabelRuntime: claim.Spec.RuntimeName,
				LabelKeptWorkspace:           labelValueKeptWorkspace,
			},
			Annotations: annotations,
		},
		Spec: batchv1.JobSpec{
			Suspend:               ptr.To(true),
			BackoffLimit:          ptr.To[int32](keptCollectionBackoffLimit),
			ActiveDeadlineSeconds: ptr.To(int64(syncDeadline / time.Second)),
			Template:              syncPodTemplate(keptJobName(dir), contentClaimName, image, args),
		},
	}
}

// keepWorkspace writes the record of the claim's workspace, whose work is saved, before the claim
// is deleted: nothing is removed now. A workspace that is not the operator's to remove (a mount
// role's), or that another live claim uses, gets no record (as it got no cleanup before).
func (c *Controller) keepWorkspace(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) error {
	rt, err := c.runtime(claim)
	if err != nil {
		return err
	}
	keep, err := c.removesWorkspace(ctx, claim)
	if err != nil || !keep {
		return err
	}
	pvc, err := c.contentClaimName(claim)
	if err != nil {
		return err
	}
	if pvc == "" {
		klog.FromContext(ctx).Info("Cannot keep the workspace for collection: the class is gone; it is left in the content volume",
			"claim", klog.KObj(claim), "class", claim.Spec.ClassName, "workspaceDir", workspaceDirOf(claim))
		return nil
	}
	job := buildKeptJob(claim, pvc, c.syncImage, c.clock.Now())
	err = c.children.jobs.Create(ctx, job)
	if apierrors.IsAlreadyExists(err) {
		err = c.keepAgain(ctx, job)
	}
	if err != nil {
		return err
	}
	c.recorder.Eventf(claim, corev1.EventTypeNormal, ReasonWorkspaceKept, messageWorkspaceKept, job.Annotations[AnnotationKeptDir], workspaceRetention(rt), job.Name)
	return nil
}

// keepAgain updates an existing record of the workspace (an earlier claim's, which nobody took:
// a claim that saw no record in time) to say who kept it now, and when.
func (c *Controller) keepAgain(ctx context.Context, want *batchv1.Job) error {
	live, err := c.freshKeptRecord(ctx, want.Namespace, want.Name)
	if err != nil {
		return err
	}
	if live == nil {
		return fmt.Errorf("the kept workspace record %s was deleted while it was kept again; retrying", want.Name)
	}
	if !recordIsOurs(live) {
		return fmt.Errorf(MessageResourceExists, "Job", live.Name)
	}
	if !ptr.Deref(live.Spec.Suspend, false) {
		return fmt.Errorf(keptRecordAlreadyCollectedFmt, klog.KObj(live), want.Annotations[AnnotationKeptDir])
	}
	updated := live.DeepCopy()
	updated.Labels = want.Labels
	updated.Annotations = want.Annotations
	return c.children.jobs.Update(ctx, updated)
}

// freshKeptRecord reads the record of that name from the API server (a list by name: the
// operator may list Jobs, not get them); nil when there is none.
func (c *Controller) freshKeptRecord(ctx context.Context, namespace, name string) (*batchv1.Job, error) {
	list, err := c.keptRecords.List(ctx, namespace, claimname.KeptRecordListOptions(name))
	if err != nil {
		return nil, err
	}
	return claimname.KeptRecordIn(list.Items, namespace, name), nil
}

// jobReader lists Jobs from the API server (a quorum read, not the cache).
type jobReader interface {
	List(ctx context.Context, namespace string, opts metav1.ListOptions) (*batchv1.JobList, error)
}

type realJobReader struct{ client kubernetes.Interface }

func (r realJobReader) List(ctx context.Context, namespace string, opts metav1.ListOptions) (*batchv1.JobList, error) {
	return r.client.BatchV1().Jobs(namespace).List(ctx, opts)
}

// workspaceWaitError says that a claim's pod waits for its workspace's collection.
type workspaceWaitError struct{ message string }

func (e *workspaceWaitError) Error() string { return e.message }

// isWorkspaceWait says whether err (joined errors too) is a workspaceWaitError, and its message.
func isWorkspaceWait(err error) (string, bool) {
	var wait *workspaceWaitError
	if errors.As(err, &wait) {
		return wait.message, true
	}
	return "", false
}

// resumedLabels are the labels of a pod that resumed the record's workspace.
func resumedLabels(record *batchv1.Job) map[string]string {
	keptAt, err := time.Parse(time.RFC3339, record.Annotations[AnnotationKeptAt])
	if err != nil {
		keptAt = record.CreationTimestamp.Time
	}
	return map[string]string{
		LabelResumedKeptAt: strconv.FormatInt(keptAt.Unix(), 10),
		LabelResumedKeptBy: record.Labels[LabelClaim],
	}
}

// takeKeptWorkspace is asked before the claim's pod is created: it takes the record of the
// claim's workspace when the claim may resume it, and returns the labels its pod carries then;
// it returns a workspaceWaitError while the workspace is another owner's kept one or is being
// collected. A claim whose workspace is not one the operator keeps takes nothing.
func (c *Controller) takeKeptWorkspace(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) (map[string]string, error) {
	if claim.Status.Warm != nil || !workspaceRemovable(claim) {
		return nil, nil
	}
	dir := workspaceDirOf(claim)
	record, err := c.freshKeptRecord(ctx, claim.Namespace, keptJobName(dir))
	if err != nil || record == nil {
		return nil, err
	}
	key := cache.MetaObjectToName(record)
	if !recordIsOurs(record) || record.Annotations[AnnotationKeptDir] != dir {
		klog.FromContext(ctx).Info("Ignoring a Job that looks like a kept workspace's record but is not the operator's", "job", klog.KObj(record), "claim", klog.KObj(claim))
		return nil, nil
	}
	if record.DeletionTimestamp != nil {
		return nil, &workspaceWaitError{message: fmt.Sprintf(messageWaitingForCollection, dir, record.Name)}
	}
	if !ptr.Deref(record.Spec.Suspend, false) {
		if cond := jobCondition(record, batchv1.JobFailed); cond != nil {
			return nil, &workspaceWaitError{message: fmt.Sprintf(messageWaitingCollectionFail, dir, record.Name, cond.Message)}
		}
		return nil, &workspaceWaitError{message: fmt.Sprintf(messageWaitingForCollection, dir, record.Name)}
	}
	if !resumableBy(record, claim) {
		c.keptQueue.Add(key) // not this claim's to resume: collected now
		return nil, &workspaceWaitError{message: fmt.Sprintf(messageWaitingForCollection, dir, record.Name)}
	}
	if err := c.children.jobs.DeleteUnchanged(ctx, record); apierrors.IsNotFound(err) {
		return nil, nil // gone meanwhile (collected and deleted): nothing to resume
	} else if err != nil {
		return nil, err // changed meanwhile (a collection began): looked at again
	}
	resumed := resumedLabels(record)
	klog.FromContext(ctx).V(2).Info("Resuming a kept workspace", "claim", klog.KObj(claim), "workspaceDir", dir, "keptBy", resumed[LabelResumedKeptBy])
	c.recorder.Eventf(claim, corev1.EventTypeNormal, ReasonWorkspaceResumed, messageWorkspaceResumed, dir, resumed[LabelResumedKeptBy], record.Annotations[AnnotationKeptAt])
	return resumed, nil
}

// hasKeptWorkspace says whether the cache shows a record of the claim's own workspace that it may
// resume: such a claim adopts no warm member (whose workspace is another), so that it resumes.
func (c *Controller) hasKeptWorkspace(claim *airlockv1alpha1.SandboxClaim) bool {
	job, err := c.jobLister.Jobs(claim.Namespace).Get(keptJobName(claim.Spec.WorkspaceDir))
	return err == nil && isKeptRecord(job) && ptr.Deref(job.Spec.Suspend, false) && resumableBy(job, claim)
}

// resumableBy says whether the claim may resume the record's workspace: the same runtime, by
// name and UID, and a workspace a claim may resume.
func resumableBy(record *batchv1.Job, claim *airlockv1alpha1.SandboxClaim) bool {
	return record.Annotations[AnnotationKeptResumable] != annotationValueNotResumable &&
		record.Labels[airlockv1alpha1.LabelRuntime] == claim.Spec.RuntimeName &&
		record.Annotations[AnnotationKeptRuntimeUID] != "" &&
		record.Annotations[AnnotationKeptRuntimeUID] == string(admission.RuntimeUID(claim))
}

// resumedWorkspace is the status.resumedWorkspace of a claim whose pod carries the labels of a
// resumed workspace (nil when it does not).
func resumedWorkspace(pod *corev1.Pod) *airlockv1alpha1.ResumedWorkspace {
	if pod == nil || pod.Labels[LabelResumedKeptAt] == "" {
		return nil
	}
	secs, err := strconv.ParseInt(pod.Labels[LabelResumedKeptAt], 10, 64)
	if err != nil {
		return nil
	}
	return &airlockv1alpha1.ResumedWorkspace{KeptAt: metav1.NewTime(time.Unix(secs, 0).UTC()), KeptBy: pod.Labels[LabelResumedKeptBy]}
}
