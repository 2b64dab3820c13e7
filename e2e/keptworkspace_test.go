//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/workspacegc"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// waitKeptRecord waits for the record of the kept workspace dir (a suspended cleanup Job owned by
// nothing) and returns it.
func waitKeptRecord(t *testing.T, ns, dir string, timeout time.Duration) *batchv1.Job {
	t.Helper()
	var record *batchv1.Job
	eventually(t, timeout, "the record of the kept workspace "+dir, func(ctx context.Context) (bool, error) {
		job, err := kubeClient.BatchV1().Jobs(ns).Get(ctx, workspace.RecordName(dir), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		record = job
		return true, nil
	})
	if len(record.OwnerReferences) != 0 || record.Annotations[airlockv1alpha1.AnnotationKeptDir] != dir {
		t.Errorf("record %s owners %v dir %q, want no owner and %q", record.Name, record.OwnerReferences, record.Annotations[airlockv1alpha1.AnnotationKeptDir], dir)
	}
	return record
}

// waitRecordCollected waits until the record of dir is gone and its collection ran: the operator
// says so with a WorkspaceCollected event on the record, once its cleanup Job completed (kwok
// completes its pod); the record then goes.
func waitRecordCollected(t *testing.T, ns, dir string, timeout time.Duration) {
	t.Helper()
	name := workspace.RecordName(dir)
	eventually(t, timeout, "the kept workspace "+dir+" to be collected", func(ctx context.Context) (bool, error) {
		if _, err := kubeClient.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, err
		}
		events, err := kubeClient.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false, err
		}
		for _, ev := range events.Items {
			if ev.Reason == workspacegc.ReasonWorkspaceCollected {
				return true, nil
			}
		}
		return false, nil
	})
}

// TestKeptWorkspaceLifecycle (issue 24 item 4): a reaped claim's workspace is kept (its record
// written, nothing removed, no Job to wait for); a new claim of the same runtime, session and
// handle within the retention resumes it (status.resumedWorkspace, the record taken); past a
// short retention the workspace is collected (the record's cleanup Job runs, then goes); and a
// kept workspace is collected when its runtime is deleted, and a runtime created again under the
// name resumes nothing.
func TestKeptWorkspaceLifecycle(t *testing.T) {
	retention := time.Hour
	e := newClaimEnv(t, "airlock-kept", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3, idleTimeout: 8 * time.Second, workspaceRetention: &retention})
	startClaimOperator(t, e.ns)
	ctx := context.Background()

	// A negative retention is refused by the API server, with the field named.
	bad := e.runtime.DeepCopy()
	bad.ObjectMeta = metav1.ObjectMeta{Name: "negative", Namespace: e.ns}
	bad.Status = airlockv1alpha1.AgentRuntimeStatus{}
	bad.Spec.Sandbox.WorkspaceRetention = &metav1.Duration{Duration: -time.Hour}
	if _, err := airlockClient.AirlockV1alpha1().AgentRuntimes(e.ns).Create(ctx, bad, metav1.CreateOptions{}); !apierrors.IsInvalid(err) ||
		!strings.Contains(err.Error(), "workspaceRetention") {
		t.Errorf("a runtime with workspaceRetention -1h: %v, want Invalid naming workspaceRetention", err)
	}

	// Kept.
	first := e.createClaim(t, "session-1", "codegen/default", "")
	e.waitPhase(t, first.Name, airlockv1alpha1.ClaimBound, 60*time.Second)
	e.waitGone(t, first.Name, 60*time.Second)
	record := waitKeptRecord(t, e.ns, first.Spec.WorkspaceDir, 30*time.Second)
	if !ptr.Deref(record.Spec.Suspend, false) || record.Annotations[airlockv1alpha1.AnnotationKeptRuntimeUID] != string(e.runtime.UID) {
		t.Errorf("record suspend %v runtime UID %q, want suspended, %q", record.Spec.Suspend, record.Annotations[airlockv1alpha1.AnnotationKeptRuntimeUID], e.runtime.UID)
	}

	// Resumed: the same session and handle, within the retention.
	second := e.createClaim(t, "session-1", "codegen/default", "")
	bound := e.waitPhase(t, second.Name, airlockv1alpha1.ClaimBound, 60*time.Second)
	if bound.Status.ResumedWorkspace == nil || bound.Status.ResumedWorkspace.KeptBy != first.Name {
		t.Errorf("resumedWorkspace %+v, want kept by %s", bound.Status.ResumedWorkspace, first.Name)
	}
	if _, err := kubeClient.BatchV1().Jobs(e.ns).Get(ctx, record.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the record after the resume: %v, want it taken (gone)", err)
	}
	// kubectl get sbx says so: the Resumed column (the server's table) has a value.
	if cell, err := tableCell(ctx, e.ns, second.Name, "Resumed"); err != nil || cell == nil || cell == "" {
		t.Errorf("the Resumed column of kubectl get sbx: %v, %v; want when the workspace was kept", cell, err)
	}
	// Collected past a short retention: kept again when the second claim is reaped, then
	// collected once the retention (shortened now) has passed.
	setRetention(t, e, 5*time.Second)
	e.waitGone(t, second.Name, 60*time.Second)
	waitRecordCollected(t, e.ns, second.Spec.WorkspaceDir, 90*time.Second)

	// Collected when the runtime is deleted: another handle's workspace, kept for an hour. That
	// claim resumes nothing (another handle).
	setRetention(t, e, time.Hour)
	other := e.createClaim(t, "session-1", "codegen/other", "")
	if c := e.waitPhase(t, other.Name, airlockv1alpha1.ClaimBound, 60*time.Second); c.Status.ResumedWorkspace != nil {
		t.Errorf("a claim of another handle resumed %+v", c.Status.ResumedWorkspace)
	}
	e.waitGone(t, other.Name, 60*time.Second)
	otherRecord := waitKeptRecord(t, e.ns, other.Spec.WorkspaceDir, 30*time.Second)
	if !ptr.Deref(otherRecord.Spec.Suspend, false) {
		t.Fatalf("the other handle's record is not suspended (kept) before the runtime's deletion")
	}
	if err := airlockClient.AirlockV1alpha1().AgentRuntimes(e.ns).Delete(ctx, e.runtime.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Created again at once under the name: another UID, someone else.
	again := e.runtime.DeepCopy()
	again.ObjectMeta = metav1.ObjectMeta{Name: e.runtime.Name, Namespace: e.ns}
	again.Status = airlockv1alpha1.AgentRuntimeStatus{}
	eventually(t, 30*time.Second, "the runtime created again", func(ctx context.Context) (bool, error) {
		created, err := airlockClient.AirlockV1alpha1().AgentRuntimes(e.ns).Create(ctx, again, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return false, nil // still being deleted
		}
		if err != nil {
			return false, err
		}
		e.runtime = created
		return true, nil
	})
	waitRecordCollected(t, e.ns, other.Spec.WorkspaceDir, 90*time.Second)
	third := e.createClaim(t, "session-1", "codegen/other", "")
	if c := e.waitPhase(t, third.Name, airlockv1alpha1.ClaimBound, 60*time.Second); c.Status.ResumedWorkspace != nil {
		t.Errorf("a claim of the runtime created again resumed %+v", c.Status.ResumedWorkspace)
	}
}

// tableCell returns the claim's cell of the named printer column, as kubectl get sbx shows it
// (the API server's Table).
func tableCell(ctx context.Context, ns, name, column string) (any, error) {
	raw, err := airlockClient.AirlockV1alpha1().RESTClient().Get().Namespace(ns).Resource("sandboxclaims").Name(name).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").Do(ctx).Raw()
	if err != nil {
		return nil, err
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		return nil, err
	}
	for i, col := range table.ColumnDefinitions {
		if col.Name == column && len(table.Rows) == 1 && i < len(table.Rows[0].Cells) {
			return table.Rows[0].Cells[i], nil
		}
	}
	return nil, fmt.Errorf("no column %q in %s", column, raw)
}

// setRetention sets the runtime's workspaceRetention.
func setRetention(t *testing.T, e *claimEnv, d time.Duration) {
	t.Helper()
	eventually(t, 30*time.Second, "the runtime's workspaceRetention to be set", func(ctx context.Context) (bool, error) {
		rt, err := airlockClient.AirlockV1alpha1().AgentRuntimes(e.ns).Get(ctx, e.runtime.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		rt.Spec.Sandbox.WorkspaceRetention = &metav1.Duration{Duration: d}
		if _, err := airlockClient.AirlockV1alpha1().AgentRuntimes(e.ns).Update(ctx, rt, metav1.UpdateOptions{}); apierrors.IsConflict(err) {
			return false, nil
		} else if err != nil {
			return false, err
		}
		return true, nil
	})
}
