package claim

// Resume members, the claim's side (docs/nothing-lost.md, "Resume members"; the pool's side is
// pkg/controller/warmpool resume.go). A claim that would take a kept workspace's record (kept.go)
// and is admitted with the record its resume member was built from adopts that member: the record
// is read fresh and must name the member; the member is adopted (the adoption patch of any warm
// member, with the resume labels); the record is taken (its records moved, then the conditional
// deletion, as a cold resume takes it); and the claim is written Bound at the member, with
// status.warm naming it and its kept directory, and status.resumedWorkspace: no pod is started.
//
// The adoption comes before the take: the adopted pod (controlled by the claim, labelled with the
// record and carrying its directory) is what says, across a crash, which workspace the claim works
// in, as status.workspaceDir does for a cold resume of a warm member's workspace. A claim whose
// take then loses lets the member go (deleted with a grace period of 0: no token of it was ever
// handed out) and resumes cold, which waits until the member is gone. A claim undecided or
// Binding that controls a resume member takes the record first, again, if it is still there (the
// pass that adopted it stopped before its write); a record gone was taken by that pass (no other
// claim may take it, and no collection runs while a member of it exists).
//
// One writer: a claim's own pod on a kept directory is created only once no resume member of it
// is left (clearResumeMembers): the one its record names is deleted (grace period 0, never
// served) and confirmed gone by the API server, and none is in the cache.

import (
	"context"
	"errors"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// errResumeMemberGoing says that a resume member still mounts the claim's workspace: its pod is
// made once the member is gone (its deletion enqueues the claim).
var errResumeMemberGoing = errors.New("a resume member of the claim's workspace is being deleted; its pod is made once it is gone")

// messageResumedInMember is the event of a claim that adopted its workspace's resume member.
const messageResumedInMember = "Resumed the workspace %s that claim %s left at %s, in the resume member %s (no pod started)"

// keptRecordFor returns, from the cache, the record of the kept workspace the claim would resume
// (kept.go): the record of its own directory, when there is one it may resume, else the newest
// record kept for its own directory (a warm member's workspace); nil when there is none (or one
// of its own directory it may not resume: it waits for that one's collection).
func (c *Controller) keptRecordFor(claim *airlockv1alpha1.SandboxClaim) *batchv1.Job {
	own := workspace.RecordName(claim.Spec.WorkspaceDir)
	if job, err := c.jobLister.Jobs(claim.Namespace).Get(own); err == nil {
		if job.Annotations[airlockv1alpha1.AnnotationKeptDir] == claim.Spec.WorkspaceDir && resumableFor(job, claim) {
			return job
		}
		return nil
	}
	jobs, err := c.jobLister.Jobs(claim.Namespace).List(labels.SelectorFromSet(workspace.KeptForSelector(own)))
	if err != nil || len(jobs) == 0 {
		return nil
	}
	items := make([]batchv1.Job, len(jobs))
	for i, job := range jobs {
		items[i] = *job
	}
	return newestWarmKept(items, claim, own)
}

// resumableFor says whether the claim may take the record now (kept.go's rules).
func resumableFor(record *batchv1.Job, claim *airlockv1alpha1.SandboxClaim) bool {
	return workspace.Resumable(record) && workspace.ResumableBy(record, claim)
}

// resumeCandidates filters a pool's resume members of kept down to those of the claim's runtime
// (by UID) that mount kept's directory.
func resumeCandidates(claim *airlockv1alpha1.SandboxClaim, kept *batchv1.Job, pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, pod := range pods {
		if pod.Labels[airlockv1alpha1.LabelResumesRuntimeUID] == string(admission.RuntimeUID(claim)) &&
			sandboxpod.MemberWorkspaceDir(pod) == kept.Annotations[airlockv1alpha1.AnnotationKeptDir] {
			out = append(out, pod)
		}
	}
	return out
}

// mayAdoptResume reads the record a resume member waits on fresh and says whether the claim may
// adopt the member for it: the claim may take the record (kept.go's rules), the record is of the
// claim's own directory or kept for it, it names this very member, and no other resume member of
// it is in the cache. It returns the record as read.
func (c *Controller) mayAdoptResume(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, pod *corev1.Pod) (*batchv1.Job, bool, error) {
	record, err := c.freshKeptRecord(ctx, claim.Namespace, pod.Labels[airlockv1alpha1.LabelResumes])
	if err != nil || record == nil {
		return nil, false, err
	}
	return record, c.resumeFits(claim, record, pod), nil
}

// resumeFits says whether the claim may work in the member's kept workspace, record's.
func (c *Controller) resumeFits(claim *airlockv1alpha1.SandboxClaim, record *batchv1.Job, pod *corev1.Pod) bool {
	own := workspace.RecordName(claim.Spec.WorkspaceDir)
	dir := record.Annotations[airlockv1alpha1.AnnotationKeptDir]
	if !resumableFor(record, claim) || !workspace.NamesResumeMember(record, pod) ||
		pod.Labels[airlockv1alpha1.LabelResumesRuntimeUID] != string(admission.RuntimeUID(claim)) ||
		(dir != claim.Spec.WorkspaceDir && record.Labels[airlockv1alpha1.LabelKeptFor] != own) {
		return false
	}
	others, err := c.podLister.Pods(claim.Namespace).List(labels.SelectorFromSet(labels.Set{airlockv1alpha1.LabelResumes: record.Name}))
	if err != nil {
		return false
	}
	for _, other := range others {
		if other.UID != pod.UID {
			return false // another pod on the workspace: one writer
		}
	}
	return true
}

// takeForMember takes the record of the workspace of the resume member the claim has adopted:
// its records move to the claim, then it is deleted conditional on its UID and resourceVersion (a
// change meanwhile is read again once). It says whether the claim holds the workspace now; false
// when the take lost (the record changed so that the member is not its own any more, or is gone).
func (c *Controller) takeForMember(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, pod *corev1.Pod, record *batchv1.Job) (bool, error) {
	for attempt := 0; ; attempt++ {
		if err := c.moveRecordsToClaim(ctx, claim, record); err != nil {
			return false, err
		}
		err := c.children.jobs.DeleteUnchanged(ctx, record)
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsNotFound(err):
			return false, nil
		case !apierrors.IsConflict(err) || attempt > 0:
			return false, err
		}
		var ok bool
		if record, ok, err = c.mayAdoptResume(ctx, claim, pod); err != nil || !ok {
			return false, err
		}
	}
}

// finishResumeTake takes the record of the resume member a claim adopted in an earlier pass or
// sync whose write did not go through: it says whether the claim holds the workspace. A record
// gone was taken then (only this claim may take it, and no collection runs while a resume member
// of it exists: pkg/controller/workspacegc).
func (c *Controller) finishResumeTake(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, pod *corev1.Pod) (bool, error) {
	record, err := c.freshKeptRecord(ctx, claim.Namespace, pod.Labels[airlockv1alpha1.LabelResumes])
	switch {
	case err != nil:
		return false, err
	case record == nil:
		return true, nil
	case string(record.UID) != pod.Labels[airlockv1alpha1.LabelResumesUID] || !c.resumeFits(claim, record, pod):
		return false, nil
	}
	return c.takeForMember(ctx, claim, pod, record)
}

// releaseUnserved deletes a resume member that served nobody (idle, or adopted by a claim that
// was never Bound to it: no token of it was ever handed out) with a grace period of 0, on its UID:
// its sandboxd writes nothing to the workspace (pkg/sandboxd TestWarmMemberLeavesAKeptWorkspace),
// so nothing waits for its termination. It says whether the API server confirms it gone.
func (c *Controller) releaseUnserved(ctx context.Context, namespace, name string, uid types.UID) (bool, error) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: uid}}
	for range 2 { // the second answers NotFound once the first removed it
		err := c.lostPods.Release(ctx, pod)
		switch {
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			return true, nil // gone, or another pod of the name
		case err != nil:
			return false, err
		}
	}
	return false, nil
}

// clearResumeMembers makes sure no resume member mounts the workspace whose record is named
// recordName before the claim's own pod is created there: the member the record (when there is
// one, read fresh) names is deleted and confirmed gone, and so is every one in the cache that
// served nobody; errResumeMemberGoing while one is left. A member another claim controls (a
// predecessor's, being reaped) is waited for.
func (c *Controller) clearResumeMembers(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, recordName string, record *batchv1.Job) error {
	going, gone := false, types.UID("")
	if record != nil {
		if name, uid := workspace.ResumeMember(record); name != "" {
			confirmed, err := c.releaseUnserved(ctx, claim.Namespace, name, uid)
			if err != nil {
				return err
			}
			if going = !confirmed; confirmed {
				gone = uid
			}
		}
	}
	pods, err := c.podLister.Pods(claim.Namespace).List(labels.SelectorFromSet(labels.Set{airlockv1alpha1.LabelResumes: recordName}))
	if err != nil {
		return err
	}
	for _, pod := range pods {
		going = true
		idle := pod.Labels[airlockv1alpha1.LabelClaim] == ""
		if pod.UID == gone || (!idle && !(metav1.IsControlledBy(pod, claim) && claim.Status.Phase != airlockv1alpha1.ClaimBound)) {
			continue // gone already (the cache will show it), or another claim's: its own end deletes it
		}
		klog.FromContext(ctx).V(2).Info("Deleting a resume member of the claim's workspace before its own pod", "claim", klog.KObj(claim), "member", klog.KObj(pod))
		if _, err := c.releaseUnserved(ctx, pod.Namespace, pod.Name, pod.UID); err != nil {
			return err
		}
	}
	if going {
		return errResumeMemberGoing
	}
	return nil
}

// resumedEvent records that the claim resumed its workspace in the member.
func (c *Controller) resumedEvent(claim *airlockv1alpha1.SandboxClaim, pod *corev1.Pod, resumed *airlockv1alpha1.ResumedWorkspace) {
	if resumed == nil {
		return
	}
	c.recorder.Eventf(claim, corev1.EventTypeNormal, ReasonWorkspaceResumed, messageResumedInMember,
		sandboxpod.MemberWorkspaceDir(pod), resumed.KeptBy, resumed.KeptAt.UTC().Format("2006-01-02T15:04:05Z"), pod.Name)
}

// enqueueResumeWaiters enqueues the claims of the namespace whose workspace a deleted resume
// member mounted (one may wait for it to go before its own pod).
func (c *Controller) enqueueResumeWaiters(pod *corev1.Pod) {
	record := pod.Labels[airlockv1alpha1.LabelResumes]
	if record == "" {
		return
	}
	claims, err := c.claimLister.SandboxClaims(pod.Namespace).List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, claim := range claims {
		if workspace.RecordName(workspace.DirOf(claim)) == record {
			c.enqueueClaim(claim)
		}
	}
}

// keepTakenResume writes the record of the workspace of the resume member an undecided claim
// controls, when that record is gone (the pass that adopted the member took it, and stopped before
// its Bound write), before the member is let go (releaseMember): the workspace is kept again, as a
// claim's that ran, never left without a record for a claim that will not work in it. A record
// still there was not taken and stays as it is.
func (c *Controller) keepTakenResume(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, member *corev1.Pod) error {
	record, err := c.freshKeptRecord(ctx, claim.Namespace, member.Labels[airlockv1alpha1.LabelResumes])
	if err != nil || record != nil {
		return err
	}
	kept := claim.DeepCopy()
	kept.Status.Warm = &airlockv1alpha1.WarmAdoption{Member: member.Name, WorkspaceDir: sandboxpod.MemberWorkspaceDir(member), AdoptedAt: member.CreationTimestamp}
	klog.FromContext(ctx).V(2).Info("Keeping again the workspace a claim took for its resume member before it lets the member go", "claim", klog.KObj(claim),
		"member", klog.KObj(member), "workspaceDir", kept.Status.Warm.WorkspaceDir)
	return c.keepWorkspace(ctx, kept)
}
