package claim

// The session record (docs/record.md §2; pkg/controller/record keeps it). The claim controller
// meets it in three places, through SessionRecords, without importing that controller:
//   - the operator's stop (stop.go): once sandboxd answered that it stopped (it appended its
//     stopped entry before answering), the pod's deletion waits, at most recordReadHold, until
//     the record has read that entry, so that an ordinary end leaves no gap;
//   - keeping a workspace (kept.go): before the claim is deleted, the claim's records move to the
//     kept record's Job, so that they live as long as the workspace;
//   - a resume (takeKeptWorkspace): before the kept Job is deleted, its records move to the
//     resuming claim.

import (
	"context"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// recordReadHold bounds how long a stopped pod's deletion waits for the record to read the
// stopped entry (the read is local to the cluster: milliseconds).
const recordReadHold = 3 * time.Second

// SessionRecords is the session record's side of a claim's end (*record.Controller is one).
type SessionRecords interface {
	// WaitStopped waits until the claim's record has read its sandboxd's stopped entry, or ctx
	// ends; it returns at once when nothing reads the claim's log.
	WaitStopped(ctx context.Context, claimUID types.UID) bool
	// WaitStored asks for the claim's record to be stored now and waits until it is, or ctx
	// ends: before the claim's records move to its kept workspace, so that none is written after
	// the claim is gone (owned by it, and collected with it).
	WaitStored(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) bool
	// MoveRecords makes owner the owner of every record segment in namespace that from owns.
	MoveRecords(ctx context.Context, namespace string, from types.UID, owner metav1.OwnerReference) error
}

// SetSessionRecords links the controller to the session records (nil: none). Call before Run.
func (c *Controller) SetSessionRecords(r SessionRecords) { c.records = r }

// waitForRecord waits, at most recordReadHold, for the claim's record to read its sandboxd's
// stopped entry.
func (c *Controller) waitForRecord(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) {
	if c.records == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, recordReadHold)
	defer cancel()
	c.records.WaitStopped(ctx, claim.UID)
}

// moveRecordsToJob moves the claim's records to its kept workspace's Job, once what the record
// holds is stored (at most recordReadHold: past it, what is stored moves, and the rest is
// written owned by the claim, and goes with it).
func (c *Controller) moveRecordsToJob(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, job *batchv1.Job) error {
	if c.records == nil || job == nil || job.UID == "" {
		return nil
	}
	waitCtx, cancel := context.WithTimeout(ctx, recordReadHold)
	c.records.WaitStored(waitCtx, claim)
	cancel()
	return c.records.MoveRecords(ctx, claim.Namespace, claim.UID, metav1.OwnerReference{
		APIVersion: batchv1.SchemeGroupVersion.String(), Kind: "Job", Name: job.Name, UID: job.UID,
	})
}

// moveRecordsToClaim moves a kept workspace's records (owned by its Job) to the resuming claim.
func (c *Controller) moveRecordsToClaim(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, job *batchv1.Job) error {
	if c.records == nil {
		return nil
	}
	return c.records.MoveRecords(ctx, claim.Namespace, job.UID, metav1.OwnerReference{
		APIVersion: airlockv1alpha1.SchemeGroupVersion.String(), Kind: "SandboxClaim", Name: claim.Name, UID: claim.UID,
		BlockOwnerDeletion: ptr.To(false),
	})
}
