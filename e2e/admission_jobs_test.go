//go:build e2e

package e2e

import (
	"context"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// policySyncImage is the sync image policyClaim's record froze.
const policySyncImage = "ghcr.io/airlock-dev/airlock:e2e-sync"

// neverJobs are the claim's workspace Jobs (its sync-back, its kept workspace's record), as the
// claim controller builds them, with another image or another PVC than the claim's record
// froze: each is refused by the claim-record policy (issue 39). The Jobs as built are admitted.
func neverJobs(t *testing.T, ctx context.Context, op kubernetes.Interface, claim *airlockv1alpha1.SandboxClaim) map[string]neverCase {
	t.Helper()
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	pvc := claim.Status.Frozen.WorkspaceClaimName
	cfg := sandboxpod.JobConfig(workspace.SyncImage(claim, "unused"))
	syncJob := func() *batchv1.Job {
		meta := sandboxpod.ChildMeta(claim, workspace.SyncJobName(claim))
		meta.Labels[airlockv1alpha1.LabelClaimUID] = string(claim.UID)
		return workspace.SyncJob(meta, claim, pvc, cfg, 1, false, workspace.DefaultTargetVersions)
	}
	record := func() *batchv1.Job { return workspace.Record(claim, pvc, cfg, sandboxpodtest.T0) }
	create := func(job *batchv1.Job) error {
		_, err := op.BatchV1().Jobs(job.Namespace).Create(ctx, job, dryRun)
		return err
	}
	for name, job := range map[string]*batchv1.Job{"sync-back Job": syncJob(), "kept workspace's record": record()} {
		if err := create(job); err != nil {
			t.Errorf("the operator's %s as built: %v, want admitted", name, err)
		}
	}
	with := func(job *batchv1.Job, image, claimName string) func() error {
		if image != "" {
			job.Spec.Template.Spec.Containers[0].Image = image
		}
		if claimName != "" {
			job.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = claimName
		}
		return func() error { return create(job) }
	}
	const want = "a claim's workspace Job mounts only its record's workspace PVC and runs the sync image its record froze"
	return map[string]neverCase{
		"sync-back Job running another image":           {write: with(syncJob(), "example.com/exfil:v1", ""), want: want},
		"sync-back Job mounting another workload's PVC": {write: with(syncJob(), "", "database-data"), want: want},
		"kept workspace's record running another image": {write: with(record(), "example.com/exfil:v1", ""), want: want},
	}
}
