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
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/syncback"
)

// Labels and annotations of a kept workspace's record (a suspended cleanup Job) and of a pod that
// resumed one.
const (
	// LabelKeptWorkspace marks a kept workspace's record ("true").
	LabelKeptWorkspace = "airlock.dev/kept-workspace"
	// AnnotationKeptRuntimeUID is the UID of the runtime whose workspace it is.
	AnnotationKeptRuntimeUID = "airlock.dev/runtime-uid"
	// AnnotationKeptDir is the workspace directory inside the content PVC.
	AnnotationKeptDir = "airlock.dev/workspace-dir"
	// AnnotationKeptAt is when the workspace was kept (RFC 3339).
	AnnotationKeptAt = "airlock.dev/kept-at"
	// AnnotationKeptResumable is "false" for a workspace no claim resumes (a warm member's).
	AnnotationKeptResumable = "airlock.dev/resumable"
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
	keptJobPrefix                 = "airlock-kept-"
	keptJobHashLen                = 20
	keptCollectionBackoffLimit    = 3
	annotationValueNotResumable   = "false"
	labelValueKeptWorkspace       = "true"
	keptRecordAlreadyCollectedFmt = "the kept workspace record %s is being collected; keeping %s again once it is gone"
)

// syncPodRecheck is how long after a record was not collected because a sync-back pod of its
// claim was still there it is looked at again: those pods are in no cache, so no event says
// when they go.
const syncPodRecheck = 5 * time.Second

// syncPodControl reads the pods of a claim's sync-back Jobs from the API server: the operator's
// pod cache holds only pods that carry LabelClaim, and sync-back pods carry LabelSyncOf instead.
type syncPodControl interface {
	SyncPods(ctx context.Context, namespace, claim string) ([]corev1.Pod, error)
}

type realSyncPods struct {
	client kubernetes.Interface
}

func (r realSyncPods) SyncPods(ctx context.Context, namespace, claim string) ([]corev1.Pod, error) {
	list, err := r.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{LabelSyncOf: claim}).String(),
	})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// syncingPod returns a sync-back pod of the claim that has not ended (it may still read the
// workspace), or nil.
func syncingPod(pods []corev1.Pod) *corev1.Pod {
	for i := range pods {
		if p := pods[i].Status.Phase; p != corev1.PodSucceeded && p != corev1.PodFailed {
			return &pods[i]
		}
	}
	return nil
}

// KeptRecordName is the name of the record (a Job) of the kept workspace directory dir: one per
// directory.
func KeptRecordName(dir string) string { return keptJobName(dir) }

// keptJobName is KeptRecordName.
func keptJobName(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return keptJobPrefix + hex.EncodeToString(sum[:])[:keptJobHashLen]
}

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
	list, err := c.keptRecords.List(ctx, namespace, metav1.ListOptions{
		LabelSelector: LabelKeptWorkspace + "=" + labelValueKeptWorkspace,
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(),
	})
	if err != nil {
		return nil, err
	}
	for i := range list.Items {
		if list.Items[i].Name == name && list.Items[i].Namespace == namespace {
			return &list.Items[i], nil
		}
	}
	return nil, nil
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

// syncKept looks at one record: a collection that completed is deleted; a kept workspace is
// collected when its retention has passed or its runtime is gone, and otherwise looked at again
// when its retention passes.
func (c *Controller) syncKept(ctx context.Context, key cache.ObjectName) (*time.Duration, error) {
	job, err := c.jobLister.Jobs(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		if orphan, ok := c.orphanedWorkspaces.LoadAndDelete(key); ok {
			return nil, c.recordOrphanedWorkspace(ctx, orphan.(*airlockv1alpha1.SandboxClaim))
		}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	c.orphanedWorkspaces.Delete(key) // a record is there: collected as any other
	if !isKeptRecord(job) || job.DeletionTimestamp != nil {
		return nil, nil
	}
	if !recordIsOurs(job) {
		klog.FromContext(ctx).Info("Ignoring a Job that looks like a kept workspace's record but is not the operator's", "job", klog.KObj(job))
		return nil, nil
	}
	if !ptr.Deref(job.Spec.Suspend, false) {
		return nil, c.syncCollection(ctx, job)
	}
	why, left, err := c.collectReason(job)
	if err != nil || why == "" {
		return left, err
	}
	// No pod of the claim that kept it may be left (one of a claim garbage collection deleted
	// may still be terminating); its deletion enqueues the record.
	pods, err := c.podLister.Pods(job.Namespace).List(labels.SelectorFromSet(labels.Set{LabelClaim: job.Labels[LabelClaim]}))
	if err != nil {
		return nil, err
	}
	if len(pods) > 0 {
		klog.FromContext(ctx).V(2).Info("Not collecting a kept workspace yet: a pod of its claim is still there", "record", klog.KObj(job), "pod", klog.KObj(pods[0]))
		return nil, nil
	}
	// Nor a sync-back pod of it that may still copy the workspace: a runtime deleted while its
	// claim synced back has the claim and its Job deleted by garbage collection, and the Job's pod
	// goes after them (found by the fault suite: the collection's pod beside the copy's).
	syncPods, err := c.syncPods.SyncPods(ctx, job.Namespace, job.Labels[LabelClaim])
	if err != nil {
		return nil, err
	}
	if p := syncingPod(syncPods); p != nil {
		klog.FromContext(ctx).V(2).Info("Not collecting a kept workspace yet: a sync-back pod of its claim is still there", "record", klog.KObj(job), "pod", klog.KObj(p))
		return ptr.To(syncPodRecheck), nil
	}
	// Decided with a fresh read: no live claim may be on the directory.
	claims, err := c.claims.List(ctx, job.Namespace)
	if err != nil {
		return nil, err
	}
	if user := keptWorkspaceUser(claims.Items, job); user != nil {
		klog.FromContext(ctx).V(2).Info("Not collecting a kept workspace: a live claim is on it", "record", klog.KObj(job),
			"workspaceDir", job.Annotations[AnnotationKeptDir], "claim", klog.KObj(user))
		return nil, nil // the claim's deletion, or its keeping the workspace again, enqueues the record
	}
	updated := job.DeepCopy()
	updated.Spec.Suspend = ptr.To(false)
	updated.Annotations[AnnotationCollected] = why
	if err := c.children.jobs.Update(ctx, updated); err != nil {
		return nil, err // a conflict (taken or kept again meanwhile) is looked at again
	}
	klog.FromContext(ctx).V(2).Info("Collecting a kept workspace", "record", klog.KObj(job), "workspaceDir", job.Annotations[AnnotationKeptDir], "why", why)
	c.recorder.Eventf(job, corev1.EventTypeNormal, ReasonWorkspaceCollecting, messageWorkspaceCollecting, job.Annotations[AnnotationKeptDir], why)
	return nil, nil
}

// syncCollection deletes a collection Job that completed (its claims waiting are woken by the
// deletion) and reports one that failed.
func (c *Controller) syncCollection(ctx context.Context, job *batchv1.Job) error {
	if cond := jobCondition(job, batchv1.JobFailed); cond != nil {
		c.recorder.Eventf(job, corev1.EventTypeWarning, ReasonWorkspaceCollectFailed, messageWaitingCollectionFail, job.Annotations[AnnotationKeptDir], job.Name, cond.Message)
		c.enqueueWorkspaceClaims(job)
		return nil
	}
	if jobCondition(job, batchv1.JobComplete) == nil {
		return nil // running; its completion enqueues it
	}
	c.recorder.Eventf(job, corev1.EventTypeNormal, ReasonWorkspaceCollected, messageWorkspaceCollected, job.Annotations[AnnotationKeptDir])
	return c.children.jobs.Delete(ctx, job.Namespace, job.Name, job.UID)
}

// collectReason says why the record is to be collected now ("" when not yet, with when to look
// again).
func (c *Controller) collectReason(job *batchv1.Job) (string, *time.Duration, error) {
	if job.Annotations[AnnotationKeptResumable] == annotationValueNotResumable {
		return CollectedNotResumable, nil, nil
	}
	rt, err := c.runtimeLister.AgentRuntimes(job.Namespace).Get(job.Labels[airlockv1alpha1.LabelRuntime])
	if apierrors.IsNotFound(err) {
		return CollectedRuntimeGone, nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	if rt.DeletionTimestamp != nil || job.Annotations[AnnotationKeptRuntimeUID] == "" || string(rt.UID) != job.Annotations[AnnotationKeptRuntimeUID] {
		return CollectedRuntimeGone, nil, nil
	}
	keptAt, err := time.Parse(time.RFC3339, job.Annotations[AnnotationKeptAt])
	if err != nil {
		keptAt = job.CreationTimestamp.Time // unreadable: kept since the record was made
	}
	if left, ok := timeLeft(keptAt, workspaceRetention(rt), c.clock.Now()); ok {
		return "", ptr.To(left), nil
	}
	return CollectedRetentionPassed, nil, nil
}

// keptWorkspaceUser returns a live claim (fresh from the API server) whose workspace is the
// record's directory, lies in it or holds it, other than a claim of another owner that has no pod
// on it yet (undecided, or waiting for this collection), or nil when there is none.
func keptWorkspaceUser(claims []airlockv1alpha1.SandboxClaim, job *batchv1.Job) *airlockv1alpha1.SandboxClaim {
	dir := job.Annotations[AnnotationKeptDir]
	ptrs := make([]*airlockv1alpha1.SandboxClaim, 0, len(claims))
	for i := range claims {
		ptrs = append(ptrs, &claims[i])
	}
	replaced := admission.Replaced(ptrs)
	for _, claim := range ptrs {
		switch {
		case claim.DeletionTimestamp != nil, claim.Status.Phase == airlockv1alpha1.ClaimRefused,
			claim.Status.Phase == airlockv1alpha1.ClaimFailed && replaced[claim.Name],
			!syncback.Overlaps(workspaceDirOf(claim), dir):
			continue
		}
		if string(admission.RuntimeUID(claim)) != job.Annotations[AnnotationKeptRuntimeUID] && waitsForCollection(claim) {
			continue
		}
		return claim
	}
	return nil
}

// waitsForCollection says whether the claim has no pod on its workspace because it waits for a
// collection (or is not decided yet).
func waitsForCollection(claim *airlockv1alpha1.SandboxClaim) bool {
	switch claim.Status.Phase {
	case "", airlockv1alpha1.ClaimPending, airlockv1alpha1.ClaimQueued:
		return true
	case airlockv1alpha1.ClaimBinding:
		cond := findCondition(claim, ConditionReady)
		return cond != nil && cond.Reason == ReasonWaitingForCollection
	}
	return false
}

// enqueueWorkspaceClaims enqueues the claims of the namespace whose workspace is the record's
// directory: one may wait for it.
func (c *Controller) enqueueWorkspaceClaims(job *batchv1.Job) {
	claims, err := c.claimLister.SandboxClaims(job.Namespace).List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, claim := range claims {
		if workspaceDirOf(claim) == job.Annotations[AnnotationKeptDir] {
			c.enqueueClaim(claim)
		}
	}
}

// enqueueKeptOf enqueues the records of the runtime's workspaces (its deletion, or a runtime
// created again under its name: an old UID's records are collected).
func (c *Controller) enqueueKeptOf(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	rt, ok := obj.(*airlockv1alpha1.AgentRuntime)
	if !ok {
		return
	}
	jobs, err := c.jobLister.Jobs(rt.Namespace).List(labels.SelectorFromSet(labels.Set{
		LabelKeptWorkspace: labelValueKeptWorkspace, airlockv1alpha1.LabelRuntime: rt.Name,
	}))
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, job := range jobs {
		c.keptQueue.Add(cache.MetaObjectToName(job))
	}
}

// keptRuntimeChanged says whether a runtime's update may change what happens to its kept
// workspaces: its deletion began, or its retention changed (not its status writes, which come
// once a second in a burst).
func keptRuntimeChanged(old, cur *airlockv1alpha1.AgentRuntime) bool {
	return (old.DeletionTimestamp == nil) != (cur.DeletionTimestamp == nil) || workspaceRetention(old) != workspaceRetention(cur)
}

// keptHandler is the Job informer's handler for records: a record that appears or changes is
// looked at; one that goes wakes the claims of its directory.
func (c *Controller) keptHandler() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if job, ok := obj.(*batchv1.Job); ok && isKeptRecord(job) {
				c.keptQueue.Add(cache.MetaObjectToName(job))
			}
		},
		UpdateFunc: func(old, cur any) {
			oldJob, ok1 := old.(*batchv1.Job)
			job, ok2 := cur.(*batchv1.Job)
			if ok1 && ok2 && oldJob.ResourceVersion != job.ResourceVersion && isKeptRecord(job) {
				c.keptQueue.Add(cache.MetaObjectToName(job))
			}
		},
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if job, ok := obj.(*batchv1.Job); ok && isKeptRecord(job) {
				c.enqueueWorkspaceClaims(job)
			}
		},
	}
}

// enqueueKeptDir enqueues the record of a deleted claim's workspace, if there is one: the claim
// may have been what kept it from collection.
func (c *Controller) enqueueKeptDir(claim *airlockv1alpha1.SandboxClaim) {
	name := keptJobName(workspaceDirOf(claim))
	if _, err := c.jobLister.Jobs(claim.Namespace).Get(name); err == nil {
		c.keptQueue.Add(cache.ObjectName{Namespace: claim.Namespace, Name: name})
	}
}

func (c *Controller) runKeptWorker(ctx context.Context) {
	for c.processNextKept(ctx) {
	}
}

func (c *Controller) processNextKept(ctx context.Context) bool {
	key, shutdown := c.keptQueue.Get()
	if shutdown {
		return false
	}
	defer c.keptQueue.Done(key)
	requeueAfter, err := c.syncKept(ctx, key)
	switch {
	case err != nil:
		if !apierrors.IsConflict(err) {
			utilruntime.HandleErrorWithContext(ctx, err, "Error syncing a kept workspace", "record", klog.KRef(key.Namespace, key.Name))
		}
		c.keptQueue.AddRateLimited(key)
	case requeueAfter != nil:
		c.keptQueue.Forget(key)
		c.keptQueue.AddAfter(key, *requeueAfter)
	default:
		c.keptQueue.Forget(key)
	}
	return true
}

// enqueueOrphanedWorkspace is asked when a claim is deleted: a claim that may have had a pod on
// its workspace, whose runtime (by name and UID) is gone, was deleted by garbage collection
// without sync-back (SPEC section 3), and its workspace, which no claim of a runtime created
// again under the name may resume, gets a record that is collected at once (syncKept).
func (c *Controller) enqueueOrphanedWorkspace(claim *airlockv1alpha1.SandboxClaim) {
	switch claim.Status.Phase {
	case airlockv1alpha1.ClaimBinding, airlockv1alpha1.ClaimBound, airlockv1alpha1.ClaimReaping, airlockv1alpha1.ClaimFailed:
	default:
		return // never had a pod: nothing was written
	}
	if !workspaceRemovable(claim) {
		return
	}
	rt, err := c.runtimeLister.AgentRuntimes(claim.Namespace).Get(claim.Spec.RuntimeName)
	if err == nil && rt.DeletionTimestamp == nil && admission.OwnedBy(claim, rt) {
		return // its runtime's: kept (or not) by its reaping
	}
	if err != nil && !apierrors.IsNotFound(err) {
		utilruntime.HandleError(err)
		return
	}
	key := cache.ObjectName{Namespace: claim.Namespace, Name: keptJobName(workspaceDirOf(claim))}
	c.orphanedWorkspaces.Store(key, claim.DeepCopy())
	c.keptQueue.Add(key)
}

// recordOrphanedWorkspace writes the record of a workspace whose claim garbage collection
// deleted: not resumable, so collected once no pod or live claim is on it.
func (c *Controller) recordOrphanedWorkspace(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) error {
	pvc, err := c.contentClaimName(claim)
	if err != nil || pvc == "" {
		return err
	}
	job := buildKeptJob(claim, pvc, c.syncImage, c.clock.Now())
	job.Annotations[AnnotationKeptResumable] = annotationValueNotResumable
	klog.FromContext(ctx).V(2).Info("Recording the workspace of a claim garbage collection deleted, for collection", "claim", klog.KObj(claim), "workspaceDir", workspaceDirOf(claim))
	if err := c.children.jobs.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// enqueueKeptOfPod enqueues the records the claim of a deleted pod kept: the pod may have been
// what kept them from collection.
func (c *Controller) enqueueKeptOfPod(pod *corev1.Pod) {
	name := pod.Labels[LabelClaim]
	if name == "" {
		return
	}
	jobs, err := c.jobLister.Jobs(pod.Namespace).List(labels.SelectorFromSet(labels.Set{LabelKeptWorkspace: labelValueKeptWorkspace, LabelClaim: name}))
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, job := range jobs {
		c.keptQueue.Add(cache.MetaObjectToName(job))
	}
}
