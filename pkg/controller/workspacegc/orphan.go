package workspacegc

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// recordOrphanedWorkspace writes the record of a workspace whose claim garbage collection
// deleted: not resumable, so collected once no pod or live claim is on it.
//
// Its Jobs run the claim's frozen sync image while the claim is there (a claim of a runtime
// being deleted), and the operator's --sync-image once it is gone: no object holds a deleted
// claim's record any more, and the records webhook ties the record of a claim that does not
// exist to that flag (docs/security.md, "The records webhook").
func (c *Controller) recordOrphanedWorkspace(ctx context.Context, claim *airlockv1alpha1.SandboxClaim) error {
	pvc, err := c.contentClaimName(claim)
	if err != nil || pvc == "" {
		return err
	}
	image := c.syncImage
	if live, err := c.claimLister.SandboxClaims(claim.Namespace).Get(claim.Name); err == nil && live.UID == claim.UID {
		image = workspace.SyncImage(claim, c.syncImage)
	}
	job := workspace.Record(claim, pvc, sandboxpod.JobConfig(image), c.clock.Now())
	job.Annotations[airlockv1alpha1.AnnotationKeptResumable] = airlockv1alpha1.AnnotationValueNotResumable
	klog.FromContext(ctx).V(2).Info("Recording the workspace of a claim garbage collection deleted, for collection", "claim", klog.KObj(claim), "workspaceDir", workspace.DirOf(claim))
	if err := c.jobs.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// contentClaimName is the content PVC that the claim's workspace is in (empty when its class is
// gone and its record does not say).
func (c *Controller) contentClaimName(claim *airlockv1alpha1.SandboxClaim) (string, error) {
	return sandboxpod.ContentClaimNameOf(claim, c.classLister.Get)
}
