//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/recordstore"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// closeClaim marks the claim's session closed, as the Sandbox API's sessions/close does.
func (e *claimEnv) closeClaim(t *testing.T, name string) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, airlockv1alpha1.AnnotationReapRequested, time.Now().UTC().Format(time.RFC3339))
	if _, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitResumeMember waits for the Ready resume member of the record, named on the record (the
// pool's fence before its key Secret), and returns it.
func (e *claimEnv) waitResumeMember(t *testing.T, record *batchv1.Job, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var member *corev1.Pod
	eventually(t, timeout, "a resume member Ready on "+record.Annotations[airlockv1alpha1.AnnotationKeptDir], func(ctx context.Context) (bool, error) {
		members, err := e.resumeMembers(ctx)
		if err != nil {
			return false, err
		}
		live, err := kubeClient.BatchV1().Jobs(e.ns).Get(ctx, record.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range members {
			if p.Labels[airlockv1alpha1.LabelResumes] != record.Name || !workspace.NamesResumeMember(live, p) {
				continue
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					member = p
					return true, nil
				}
			}
		}
		return false, nil
	})
	return member
}

// TestResumeMemberAdopted (issue 39 item 5, issue 40 item 3; docs/nothing-lost.md, "Resume
// members"), on the API-only plane: a session that adopted a warm member closes; its workspace is
// kept; the pool starts a resume member on it (the kept directory as its workspace, named on the
// record, counted apart from the pool); another session's acquire does not get it; the next
// acquire of the same handle is Bound on that very member (no pod of its own, no restart), with
// status.resumedWorkspace, the record taken and its session records moved to the new claim.
// Closed again, with the resume members off (resumeWindow 0), the idle member is deleted and the
// next acquire resumes cold, in the same directory.
func TestResumeMemberAdopted(t *testing.T) {
	ctx := context.Background()
	retention := time.Hour
	e := newClaimEnv(t, "airlock-resume-member", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3, maxInstances: 10,
		idleTimeout: 10 * time.Minute, workspaceRetention: &retention})
	e.updateRegistry(t, func(r *airlockv1alpha1.ToolRegistry) { r.Spec.Sandboxes[0].Warm = 1 })
	startClaimOperator(t, e.ns)
	e.waitWarm(t, 1, 60*time.Second)

	first := e.waitPhase(t, e.createClaim(t, "session-1", "codegen/default", "").Name, airlockv1alpha1.ClaimBound, 30*time.Second)
	dir := workspace.DirOf(first)
	// A segment of its session record, as the record controller writes it (no sandboxd runs here).
	seg, err := recordstore.SessionRecord(first, recordstore.Segment{N: 0, Lines: [][]byte{[]byte(`{"e":"test"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if seg, err = airlockClient.AirlockV1alpha1().SessionRecords(e.ns).Create(ctx, seg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.closeClaim(t, first.Name)
	e.waitGone(t, first.Name, 60*time.Second)
	record := waitKeptRecord(t, e.ns, dir, 30*time.Second)

	member := e.waitResumeMember(t, record, 60*time.Second)
	if member.Annotations[airlockv1alpha1.AnnotationResumesDir] != dir || member.Labels[airlockv1alpha1.LabelResumesRuntimeUID] != string(e.runtime.UID) {
		t.Errorf("resume member %s: annotations %v labels %v, want the kept directory %s and the runtime's UID", member.Name, member.Annotations, member.Labels, dir)
	}
	for _, m := range member.Spec.Containers[0].VolumeMounts {
		if m.SubPath != "" && m.SubPath != dir {
			t.Errorf("the resume member mounts %q, want the kept %q", m.SubPath, dir)
		}
	}
	eventually(t, 30*time.Second, "the registry's status counting the resume member apart", func(ctx context.Context) (bool, error) {
		r, err := airlockClient.AirlockV1alpha1().ToolRegistries(e.ns).Get(ctx, e.runtime.Spec.ToolRegistryRef.Name, metav1.GetOptions{})
		if err != nil || len(r.Status.Warm) != 1 {
			return false, err
		}
		return r.Status.Warm[0].Resuming == 1 && r.Status.Warm[0].Ready == 1 && r.Status.WarmReady == 1, nil
	})

	// Another session's acquire: never this member.
	other := e.waitPhase(t, e.createClaim(t, "session-2", "codegen/default", "").Name, airlockv1alpha1.ClaimBound, 30*time.Second)
	if other.Status.Warm != nil && other.Status.Warm.Member == member.Name {
		t.Fatalf("another session's claim adopted the resume member %s", member.Name)
	}
	if other.Status.ResumedWorkspace != nil {
		t.Errorf("another session's claim resumed %+v", other.Status.ResumedWorkspace)
	}

	// The same handle: Bound on the member.
	second := e.waitPhase(t, e.createClaim(t, "session-1", "codegen/default", "").Name, airlockv1alpha1.ClaimBound, 30*time.Second)
	if second.Status.Warm == nil || second.Status.Warm.Member != member.Name || second.Status.Warm.WorkspaceDir != dir {
		t.Fatalf("the next claim of the handle: warm %+v, want the resume member %s in %s", second.Status.Warm, member.Name, dir)
	}
	if r := second.Status.ResumedWorkspace; r == nil || r.KeptBy != first.Name {
		t.Errorf("resumedWorkspace %+v, want kept by %s", r, first.Name)
	}
	pod := e.pod(t, member.Name)
	if pod.UID != member.UID || !metav1.IsControlledBy(pod, second) {
		t.Errorf("the member after the adoption: uid %s (was %s), controller %+v", pod.UID, member.UID, metav1.GetControllerOf(pod))
	}
	if _, err := kubeClient.CoreV1().Pods(e.ns).Get(ctx, second.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a pod of the resuming claim's own: %v, want none (no pod start)", err)
	}
	if _, err := kubeClient.BatchV1().Jobs(e.ns).Get(ctx, record.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the record after the resume: %v, want it taken", err)
	}
	eventually(t, 30*time.Second, "the session record's segment moved to the resuming claim", func(ctx context.Context) (bool, error) {
		got, err := airlockClient.AirlockV1alpha1().SessionRecords(e.ns).Get(ctx, seg.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ref := metav1.GetControllerOf(got)
		if ref == nil && len(got.OwnerReferences) == 1 {
			ref = &got.OwnerReferences[0]
		}
		return ref != nil && ref.Kind == "SandboxClaim" && ref.UID == second.UID, nil
	})

	// Resume members off: the next one is deleted, and the handle resumes cold in the same place.
	e.updateRegistry(t, func(r *airlockv1alpha1.ToolRegistry) { r.Spec.Sandboxes[0].ResumeWindow = &metav1.Duration{} })
	e.closeClaim(t, second.Name)
	e.waitGone(t, second.Name, 60*time.Second)
	waitKeptRecord(t, e.ns, dir, 30*time.Second)
	eventually(t, 30*time.Second, "no resume member", func(ctx context.Context) (bool, error) {
		members, err := e.resumeMembers(ctx)
		return err == nil && len(members) == 0, err
	})
	third := e.waitPhase(t, e.createClaim(t, "session-1", "codegen/default", "").Name, airlockv1alpha1.ClaimBound, 60*time.Second)
	if third.Status.Warm != nil || third.Status.ResumedWorkspace == nil || third.Status.ResumedWorkspace.KeptBy != second.Name {
		t.Errorf("with resume members off: warm %+v resumed %+v, want cold, resumed from %s", third.Status.Warm, third.Status.ResumedWorkspace, second.Name)
	}
	if got := workspace.DirOf(third); got != dir {
		t.Errorf("the cold resume works in %q, want %q", got, dir)
	}
}
