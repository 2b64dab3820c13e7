package agentruntime

// Held workspaces on the runtime's status: the records of its kept workspaces whose sync-back
// gave up (workspace.IsHeld), which nothing collects until a person retries or releases them
// (docs/nothing-lost.md, "A sync-back that gave up").

import (
	"cmp"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// maxHeldListed is how many held workspaces the status lists (it counts them all).
const maxHeldListed = 32

// enqueueRuntimeOfRecord enqueues the runtime of a kept workspace's record.
func (c *Controller) enqueueRuntimeOfRecord(obj any) {
	if job, ok := obj.(*batchv1.Job); ok && workspace.IsRecord(job) {
		c.queue.AddAfter(cache.ObjectName{Namespace: job.Namespace, Name: job.Labels[airlockv1alpha1.LabelRuntime]}, claimBatchPeriod)
	}
}

// heldWorkspaces returns the runtime's held workspaces (its name and UID), oldest first, at most
// maxHeldListed, and how many there are.
func (c *Controller) heldWorkspaces(rt *airlockv1alpha1.AgentRuntime) ([]airlockv1alpha1.HeldWorkspace, int32, error) {
	jobs, err := c.jobLister.Jobs(rt.Namespace).List(labels.SelectorFromSet(labels.Set{
		airlockv1alpha1.LabelKeptWorkspace: airlockv1alpha1.LabelValueKeptWorkspace,
		airlockv1alpha1.LabelRuntime:       rt.Name,
	}))
	if err != nil {
		return nil, 0, err
	}
	var held []airlockv1alpha1.HeldWorkspace
	for _, job := range jobs {
		if !workspace.RecordIsOurs(job) || !workspace.IsHeld(job) || job.DeletionTimestamp != nil ||
			job.Annotations[airlockv1alpha1.AnnotationKeptRuntimeUID] != string(rt.UID) {
			continue
		}
		h := airlockv1alpha1.HeldWorkspace{
			Record:       job.Name,
			WorkspaceDir: job.Annotations[airlockv1alpha1.AnnotationKeptDir],
			Claim:        job.Labels[airlockv1alpha1.LabelClaim],
			TargetPath:   job.Annotations[airlockv1alpha1.AnnotationHeldTarget],
			Message:      job.Annotations[airlockv1alpha1.AnnotationHeld],
		}
		if at, err := time.Parse(time.RFC3339, job.Annotations[workspace.AnnotationKeptAt]); err == nil {
			h.Since = &metav1.Time{Time: at}
		}
		held = append(held, h)
	}
	slices.SortFunc(held, func(a, b airlockv1alpha1.HeldWorkspace) int {
		return cmp.Or(cmp.Compare(sinceUnix(a), sinceUnix(b)), cmp.Compare(a.Record, b.Record))
	})
	n := int32(len(held))
	if len(held) > maxHeldListed {
		held = held[:maxHeldListed]
	}
	return held, n, nil
}

func sinceUnix(h airlockv1alpha1.HeldWorkspace) int64 {
	if h.Since == nil {
		return 0
	}
	return h.Since.Unix()
}
