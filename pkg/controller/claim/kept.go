package claim

// Kept workspaces (issue 24 item 4; docs/nothing-lost.md, "Resume without loss").
//
// Once a reaped or closed claim's work is saved (its sync-back Job succeeded, or it has no
// targetPath), its workspace is kept, not removed: the claim writes a record of it and is deleted.
// The record is a suspended Job, the workspace's cleanup Job (`airlock sync --remove-only`), named
// after the workspace directory (workspace.RecordName), with no owner: it survives the claim, the runtime,
// an operator restart and a leader change, and the Job informer (filtered on LabelClaim) has it.
// Its annotations say whose workspace it is (the runtime's name and UID), which directory, and
// when it was kept.
//
// Resume. A new claim whose workspace is that directory, of the same runtime name and UID, takes
// the record before its pod is created: it deletes the Job, conditional on the UID and the
// resourceVersion it read fresh from the API server, and its pod carries the labels that say so
// (workspace.LabelResumedKeptAt, copied into status.resumedWorkspace when it is Bound). Any other claim on
// that directory (a runtime deleted and created again under the same name) waits, Ready False
// WaitingForWorkspaceCollection, and asks for the record to be collected now.
//
// Collection is pkg/controller/workspacegc's: it unsuspends a record when the runtime's
// workspaceRetention has passed, or at once when its runtime is gone, and deletes it once the
// collection completed. A claim waiting for it is woken by the record's deletion, or its failure
// (keptHandler).

import (
	"context"
	"errors"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// Reasons of kept workspaces.
const (
	ReasonWorkspaceKept           = "WorkspaceKept"
	ReasonWorkspaceResumed        = "WorkspaceResumed"
	ReasonWaitingForCollection    = airlockv1alpha1.ReasonWaitingForWorkspaceCollection
	ReasonWorkspaceHeld           = "WorkspaceHeld"
	messageWorkspaceHeld          = "Holding the workspace %s, whose sync-back gave up (record Job %s): it is never collected until a person annotates the Job: kubectl annotate job %s airlock.dev/held-action=retry (copy it into the target again) or =release (keep it as any other workspace)"
	messageWorkspaceKept          = "Kept the workspace %s for %s (record Job %s): a new claim of the same runtime, session and handle resumes with its files"
	messageWorkspaceResumed       = "Resumed the workspace %s that claim %s left at %s"
	messageWaitingForCollection   = "the workspace %s is another owner's kept workspace (record Job %s), being collected first"
	messageWaitingCollectionFail  = "the workspace %s is being collected by Job %s, which failed: %s (tried again with backoff: see the Job's events)"
	messageWaitingForHeld         = "the workspace %s is another owner's held workspace (record Job %s): its sync-back gave up, and it is kept until a person retries or releases it (annotation airlock.dev/held-action)"
	messageWaitingForRetry        = "the workspace %s is being copied into its target again (record Job %s, annotation airlock.dev/held-action=retry)"
	keptRecordAlreadyCollectedFmt = "the kept workspace record %s is being collected; keeping %s again once it is gone"
)

// keepWorkspace writes the record of the claim's workspace, whose work is saved, before the claim
// is deleted: nothing is removed now. A workspace that is not the operator's to remove (a mount
// role's), or that another live claim uses, gets no record (as it got no cleanup before).
func (c *Controller) keepWorkspace(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) error {
	return c.writeRecord(ctx, claim, "")
}

// holdWorkspace writes the record of the workspace of a claim whose sync-back gave up (why:
// the message), held: never collected, by its retention or otherwise, until a person releases it
// or a retry copies it into its target (workspacegc; the annotation airlock.dev/held-action on the
// record), and counted on the runtime's status. A claim of the same runtime, session and handle
// that comes next resumes it as any kept workspace, and its own sync-back saves it.
func (c *Controller) holdWorkspace(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, why string) error {
	return c.writeRecord(ctx, claim, why)
}

// writeRecord writes the record of the claim's workspace, held when held (why) is set.
func (c *Controller) writeRecord(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, held string) error {
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
			"claim", klog.KObj(claim), "class", claim.Spec.ClassName, "workspaceDir", workspace.DirOf(claim))
		return nil
	}
	job := buildKeptJob(claim, pvc, workspace.SyncImage(claim, c.syncImage), c.clock.Now())
	if held != "" {
		job = workspace.HeldRecord(claim, pvc, sandboxpod.JobConfig(workspace.SyncImage(claim, c.syncImage)), c.clock.Now(), held, c.targetVersions(claim))
	}
	err = c.children.jobs.Create(ctx, job)
	if apierrors.IsAlreadyExists(err) {
		err = c.keepAgain(ctx, job)
	}
	if err != nil {
		return err
	}
	if c.records != nil {
		// The claim's records live as long as the workspace: they move to the Job before the
		// claim is deleted (records.go); a failed move is tried again with the keep.
		live, err := c.freshKeptRecord(ctx, job.Namespace, job.Name)
		if err != nil {
			return err
		}
		if err := c.moveRecordsToJob(ctx, claim, live); err != nil {
			return err
		}
	}
	c.keptWritten.Expect(cache.MetaObjectToName(job), struct{}{}) // until the Job cache shows it
	if keptFor := job.Labels[airlockv1alpha1.LabelKeptFor]; keptFor != "" {
		// A warm member's workspace kept for the claim's own directory: the next claim of the
		// name looks for it there.
		c.keptWritten.Expect(keptForKey(job.Namespace, keptFor), struct{}{})
	}
	if held != "" {
		c.recorder.Eventf(claim, corev1.EventTypeWarning, ReasonWorkspaceHeld, messageWorkspaceHeld, job.Annotations[airlockv1alpha1.AnnotationKeptDir], job.Name, job.Name)
		return nil
	}
	c.recorder.Eventf(claim, corev1.EventTypeNormal, ReasonWorkspaceKept, messageWorkspaceKept, job.Annotations[airlockv1alpha1.AnnotationKeptDir], workspace.Retention(rt), job.Name)
	return nil
}

// targetVersions is the claim's registry entry's targetVersions (defaulted; the default when the
// runtime, registry or entry is gone).
func (c *Controller) targetVersions(claim *airlockv1alpha1.SandboxClaim) int32 {
	_, entry, err := c.warmEntry(claim)
	if err != nil {
		return workspace.DefaultTargetVersions
	}
	return workspace.EntryTargetVersions(entry)
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
	if !workspace.RecordIsOurs(live) {
		return fmt.Errorf(MessageResourceExists, "Job", live.Name)
	}
	if !ptr.Deref(live.Spec.Suspend, false) {
		return fmt.Errorf(keptRecordAlreadyCollectedFmt, klog.KObj(live), want.Annotations[airlockv1alpha1.AnnotationKeptDir])
	}
	updated := live.DeepCopy()
	updated.Labels = want.Labels
	updated.Annotations = want.Annotations
	return c.children.jobs.Update(ctx, updated)
}

// freshKeptRecord reads the record of that name from the API server (a list by name: the
// operator may list Jobs, not get them); nil when there is none.
func (c *Controller) freshKeptRecord(ctx context.Context, namespace, name string) (*batchv1.Job, error) {
	list, err := c.keptRecords.List(ctx, namespace, workspace.RecordListOptions(name))
	if err != nil {
		return nil, err
	}
	return workspace.RecordIn(list.Items, namespace, name), nil
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

// takeKeptWorkspace is asked before the claim's pod is created: it takes the record of the
// claim's workspace when the claim may resume it, and returns the labels its pod carries then;
// it returns a workspaceWaitError while the workspace is another owner's kept one or is being
// collected. A claim whose workspace is not one the operator keeps takes nothing.
func (c *Controller) takeKeptWorkspace(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) (map[string]string, error) {
	if claim.Status.Warm != nil || !workspace.Removable(claim) {
		return nil, nil
	}
	if claim.Status.WorkspaceDir == "" {
		// Its own directory: a warm member's workspace may have been kept for it.
		if moved, err := c.resumeWarmKept(ctx, claim); err != nil || moved {
			if moved {
				return nil, errWorkspaceDirWritten
			}
			return nil, err
		}
	}
	dir := workspace.DirOf(claim)
	if !c.mayHaveKeptRecord(claim.Namespace, workspace.RecordName(dir)) {
		return nil, nil // no record: no API round trip for a new claim (issue 40)
	}
	record, err := c.freshKeptRecord(ctx, claim.Namespace, workspace.RecordName(dir))
	if err != nil || record == nil {
		return nil, err
	}
	if !workspace.RecordIsOurs(record) || record.Annotations[airlockv1alpha1.AnnotationKeptDir] != dir {
		klog.FromContext(ctx).Info("Ignoring a Job that looks like a kept workspace's record but is not the operator's", "job", klog.KObj(record), "claim", klog.KObj(claim))
		return nil, nil
	}
	if record.DeletionTimestamp != nil {
		return nil, &workspaceWaitError{message: fmt.Sprintf(messageWaitingForCollection, dir, record.Name)}
	}
	if !ptr.Deref(record.Spec.Suspend, false) {
		if cond := workspace.JobCondition(record, batchv1.JobFailed); cond != nil {
			return nil, &workspaceWaitError{message: fmt.Sprintf(messageWaitingCollectionFail, dir, record.Name, cond.Message)}
		}
		return nil, &workspaceWaitError{message: fmt.Sprintf(messageWaitingForCollection, dir, record.Name)}
	}
	if !workspace.ResumableBy(record, claim) {
		if workspace.IsHeld(record) {
			// Held work of another owner is never collected for it: it waits for a person.
			return nil, &workspaceWaitError{message: fmt.Sprintf(messageWaitingForHeld, dir, record.Name)}
		}
		// Not this claim's to resume: collected now (workspacegc sees the claim wait).
		return nil, &workspaceWaitError{message: fmt.Sprintf(messageWaitingForCollection, dir, record.Name)}
	}
	if record.Annotations[airlockv1alpha1.AnnotationHeldAction] == airlockv1alpha1.HeldActionRetry && workspace.IsHeld(record) {
		// Its sync-back is being retried: no pod writes the workspace while it is copied.
		return nil, &workspaceWaitError{message: fmt.Sprintf(messageWaitingForRetry, dir, record.Name)}
	}
	// A resume member that waits on it (one the claim did not adopt) goes first, confirmed gone,
	// before the take (resume.go): the record names it until then, and the take is conditional
	// on the record as read here.
	if err := c.clearResumeMembers(ctx, claim, record.Name, record); err != nil {
		return nil, err
	}
	// The workspace's records follow it to the resuming claim before the Job goes (records.go):
	// a failed move fails the take, which is tried again.
	if err := c.moveRecordsToClaim(ctx, claim, record); err != nil {
		return nil, err
	}
	if err := c.children.jobs.DeleteUnchanged(ctx, record); apierrors.IsNotFound(err) {
		return nil, nil // gone meanwhile (collected and deleted): nothing to resume
	} else if err != nil {
		return nil, err // changed meanwhile (a collection began): looked at again
	}
	resumed := workspace.ResumedLabels(record)
	klog.FromContext(ctx).V(2).Info("Resuming a kept workspace", "claim", klog.KObj(claim), "workspaceDir", dir, "keptBy", resumed[workspace.LabelResumedKeptBy])
	c.recorder.Eventf(claim, corev1.EventTypeNormal, ReasonWorkspaceResumed, messageWorkspaceResumed, dir, resumed[workspace.LabelResumedKeptBy], record.Annotations[workspace.AnnotationKeptAt])
	return resumed, nil
}

// errWorkspaceDirWritten says that the claim's status.workspaceDir was written (it resumes a warm
// member's kept workspace): its pod is made at the next sync, which the status update brings,
// from the claim as written.
var errWorkspaceDirWritten = errors.New("the claim's workspace directory was written; its pod is made at the next sync")

// resumeWarmKept looks for the record of a warm member's workspace kept for the claim's own
// directory (workspace.LabelKeptFor: an earlier claim of the same runtime, session and handle
// that adopted a warm member) that the claim may resume, and when there is one writes the
// member's directory into the claim's status.workspaceDir (true): from then on the claim's
// workspace is that directory, whose record it takes as any other before its pod is made. The
// directory is written first so that a crash between the two leaves a claim that still finds and
// takes the record at its next sync, never a record taken by a claim that works elsewhere.
func (c *Controller) resumeWarmKept(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) (bool, error) {
	keptFor := workspace.RecordName(claim.Spec.WorkspaceDir)
	if _, err := c.jobLister.Jobs(claim.Namespace).Get(keptFor); err == nil {
		return false, nil // a record of its own directory: resumed as any (no API round trip here)
	}
	_, written := c.keptWritten.Get(keptForKey(claim.Namespace, keptFor))
	if !written && !c.cachedKeptFor(claim.Namespace, keptFor) {
		return false, nil
	}
	list, err := c.keptRecords.List(ctx, claim.Namespace, workspace.KeptForListOptions(keptFor))
	if err != nil {
		return false, err
	}
	record := newestWarmKept(list.Items, claim, keptFor)
	if record == nil {
		return false, nil
	}
	updated := claim.DeepCopy()
	updated.Status.WorkspaceDir = record.Annotations[airlockv1alpha1.AnnotationKeptDir]
	if _, err := c.updateClaimStatus(ctx, claim, updated); err != nil {
		return false, err
	}
	klog.FromContext(ctx).V(2).Info("Resuming a warm member's kept workspace", "claim", klog.KObj(claim),
		"workspaceDir", updated.Status.WorkspaceDir, "record", klog.KObj(record))
	return true, nil
}

// newestWarmKept returns, of the records listed for keptFor, the newest kept one the claim may
// resume (the operator's, suspended, not being deleted, of its runtime by name and UID), or nil.
func newestWarmKept(jobs []batchv1.Job, claim *airlockv1alpha1.SandboxClaim, keptFor string) *batchv1.Job {
	var newest *batchv1.Job
	for i := range jobs {
		job := &jobs[i]
		if job.Namespace != claim.Namespace || job.Labels[airlockv1alpha1.LabelKeptFor] != keptFor ||
			!workspace.RecordIsOurs(job) || job.DeletionTimestamp != nil ||
			!ptr.Deref(job.Spec.Suspend, false) || !workspace.ResumableBy(job, claim) {
			continue
		}
		if newest == nil || job.Annotations[workspace.AnnotationKeptAt] > newest.Annotations[workspace.AnnotationKeptAt] {
			newest = job
		}
	}
	return newest
}

// keptForKey is the keptWritten key of a record kept for the directory whose record name is
// keptFor (workspace.LabelKeptFor): apart from the key of a record of that name (a name holds no
// ':'), so that a record of a claim's own directory written a moment ago costs no list of the
// records kept for it.
func keptForKey(namespace, keptFor string) cache.ObjectName {
	return cache.ObjectName{Namespace: namespace, Name: "kept-for:" + keptFor}
}

// cachedKeptFor says whether the Job cache shows a record kept for the directory whose record
// name is keptFor (workspace.LabelKeptFor).
func (c *Controller) cachedKeptFor(namespace, keptFor string) bool {
	jobs, err := c.jobLister.Jobs(namespace).List(labels.SelectorFromSet(workspace.KeptForSelector(keptFor)))
	return err != nil || len(jobs) > 0
}

// mayHaveKeptRecord says whether a record named name may exist in namespace: the Job cache shows
// a Job of that name, or this controller wrote that record and the cache has not shown it yet
// (keptWritten). Only then is the record read fresh from the API server before a claim's pod is
// made; otherwise there is none to take. A record is written only by the claim whose workspace
// it records, before that claim is deleted, and only then can a new claim of the same name (and
// directory) be created: written by this leader, it is in keptWritten until the cache shows it;
// written by an earlier leader, the Job informer of this term listed it when the term began (the
// same assumption as the admission fence's: a deposed leader writes no more once the lease is
// lost). Reading every new claim's record fresh cost an API round trip (a consistent list) on
// the path of every cold acquire (issue 40).
func (c *Controller) mayHaveKeptRecord(namespace, name string) bool {
	if _, err := c.jobLister.Jobs(namespace).Get(name); err == nil {
		return true
	}
	_, written := c.keptWritten.Get(cache.ObjectName{Namespace: namespace, Name: name})
	return written
}

// hasKeptWorkspace says whether the cache shows a record of the claim's own workspace that it may
// resume: such a claim adopts no warm member (whose workspace is another), so that it resumes.
func (c *Controller) hasKeptWorkspace(claim *airlockv1alpha1.SandboxClaim) bool {
	name := workspace.RecordName(claim.Spec.WorkspaceDir)
	if _, written := c.keptWritten.Get(cache.ObjectName{Namespace: claim.Namespace, Name: name}); written {
		return true // written by this leader for the directory, not cached yet
	}
	if _, written := c.keptWritten.Get(keptForKey(claim.Namespace, name)); written {
		return true // a warm member's workspace kept for the directory, not cached yet
	}
	return workspace.WouldResume(c.jobLister.Jobs(claim.Namespace), claim)
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
		if workspace.DirOf(claim) == job.Annotations[airlockv1alpha1.AnnotationKeptDir] {
			c.enqueueClaim(claim)
		}
	}
}

// keptHandler is the Job informer's handler for records: a record that goes, or whose collection
// failed, wakes the claims of its directory (one may wait for it).
func (c *Controller) keptHandler() cache.ResourceEventHandlerFuncs {
	failed := func(obj any) {
		job, ok := obj.(*batchv1.Job)
		if !ok {
			return
		}
		c.keptWritten.Delete(cache.MetaObjectToName(job)) // the cache shows it now
		if keptFor := job.Labels[airlockv1alpha1.LabelKeptFor]; keptFor != "" {
			c.keptWritten.Delete(keptForKey(job.Namespace, keptFor))
		}
		if workspace.IsRecord(job) && workspace.JobCondition(job, batchv1.JobFailed) != nil {
			c.enqueueWorkspaceClaims(job)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: failed,
		UpdateFunc: func(old, cur any) {
			o, n := old.(*batchv1.Job), cur.(*batchv1.Job)
			if o.ResourceVersion == n.ResourceVersion {
				return
			}
			failed(cur)
			if workspace.IsRecord(n) && (workspace.IsHeld(o) != workspace.IsHeld(n) ||
				o.Annotations[airlockv1alpha1.AnnotationHeldAction] != n.Annotations[airlockv1alpha1.AnnotationHeldAction]) {
				c.enqueueWorkspaceClaims(n) // a retry ended, or the workspace was released: one may wait
			}
		},
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if job, ok := obj.(*batchv1.Job); ok && workspace.IsRecord(job) {
				c.enqueueWorkspaceClaims(job)
			}
		},
	}
}
