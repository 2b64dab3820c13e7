//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// policySyncImage is the sync image policyClaim's record froze.
const policySyncImage = "ghcr.io/airlock-dev/airlock:e2e-sync"

// neverJobs are the claim's workspace Jobs (its sync-back, its kept workspace's record), as the
// claim controller builds them, with another image or another PVC than the claim's record
// froze: each is refused by the claim-record policy (issue 39); a held record's retry of
// another image or PVC by the retry-record policy. The Jobs as built are admitted.
func neverJobs(t *testing.T, ctx context.Context, op kubernetes.Interface, claim *airlockv1alpha1.SandboxClaim) map[string]neverCase {
	t.Helper()
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	pvc := claim.Status.Frozen.WorkspaceClaimName
	cfg := sandboxpod.JobConfig(workspace.SyncImage(claim, "unused"))
	syncJob := func() *batchv1.Job { return policyJob(claim) }
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
	const wantRetry = "a retry Job is the controller child of the record it names (airlock.dev/retry-of), mounts only that record's PVC and runs its image"
	retry := heldRecordsRetry(t, ctx, op, claim, cfg)
	return map[string]neverCase{
		"sync-back Job running another image":           {write: with(syncJob(), "example.com/exfil:v1", ""), want: want},
		"sync-back Job mounting another workload's PVC": {write: with(syncJob(), "", "database-data"), want: want},
		"kept workspace's record running another image": {write: with(record(), "example.com/exfil:v1", ""), want: want},
		"retry Job running another image":               {write: with(retry(), "example.com/exfil:v1", ""), want: wantRetry},
		"retry Job mounting another workload's PVC":     {write: with(retry(), "", "database-data"), want: wantRetry},
	}
}

// heldRecordsRetry writes, as the suite's administrator, the claim's workspace record held (a
// sync-back that gave up: never collected nor retried by an operator unasked), and returns the
// builder of its retry Job as the workspace collector builds it, once the API server admits that
// from the operator (its param informer has the record).
func heldRecordsRetry(t *testing.T, ctx context.Context, op kubernetes.Interface, claim *airlockv1alpha1.SandboxClaim, cfg workspace.JobConfig) func() *batchv1.Job {
	t.Helper()
	held := workspace.HeldRecord(claim, claim.Status.Frozen.WorkspaceClaimName, cfg, time.Now(), "e2e: held for the policy's test", workspace.DefaultTargetVersions)
	// The record of an earlier claim of the name, gone (a held workspace outlives its claim): the
	// claim-record policy does not tie its retry, the retry-record policy alone does.
	held.Labels[airlockv1alpha1.LabelClaimUID] = "00000000-0000-0000-0000-0000000000e1"
	created, err := kubeClient.BatchV1().Jobs(held.Namespace).Create(ctx, held, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a held record: %v", err)
	}
	t.Cleanup(func() {
		err := kubeClient.BatchV1().Jobs(created.Namespace).Delete(context.Background(), created.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting the held record: %v", err)
		}
	})
	retry := func() *batchv1.Job {
		return workspace.RetryJob(created, claim.Status.Frozen.WorkspaceClaimName, sandboxpod.JobConfig(workspace.RecordImage(created, "unused")))
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	eventually(t, time.Minute, "the operator's retry of a held record admitted", func(ctx context.Context) (bool, error) {
		_, err := op.BatchV1().Jobs(created.Namespace).Create(ctx, retry(), dryRun)
		return err == nil, nil
	})
	return retry
}

// neverRecordRewrite is the claim's record rewritten, or removed, by a status write of the
// operator's (dry runs on the latest claim): refused by airlock-operator-record-frozen. The same
// write with the record as it is is admitted.
func neverRecordRewrite(t *testing.T, ctx context.Context, claim *airlockv1alpha1.SandboxClaim) map[string]neverCase {
	t.Helper()
	opAirlock, err := airlockclientset.NewForConfig(operatorConfig())
	if err != nil {
		t.Fatal(err)
	}
	dryRun := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
	writeStatus := func(mutate func(c *airlockv1alpha1.SandboxClaim)) func() error {
		return func() error {
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				latest, err := airlockClient.AirlockV1alpha1().SandboxClaims(claim.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				mutate(latest)
				_, err = opAirlock.AirlockV1alpha1().SandboxClaims(claim.Namespace).UpdateStatus(ctx, latest, dryRun)
				return err
			})
		}
	}
	if err := writeStatus(func(c *airlockv1alpha1.SandboxClaim) { c.Status.Message = "e2e" })(); err != nil {
		t.Errorf("the operator's status write keeping the record: %v, want admitted", err)
	}
	const want = "a claim's record (status.frozen) is written once, at admission, and never changed or removed"
	return map[string]neverCase{
		"claim's record rewritten (another image)": {write: writeStatus(func(c *airlockv1alpha1.SandboxClaim) {
			c.Status.Frozen.Image = "example.com/exfil:v1"
		}), want: want},
		"claim's record removed": {write: writeStatus(func(c *airlockv1alpha1.SandboxClaim) { c.Status.Frozen = nil }), want: want},
	}
}
