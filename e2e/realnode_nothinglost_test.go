//go:build e2e && realnode

package e2e

import (
	"context"
	"path"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/claim"
	"github.com/airlock-dev/airlock/pkg/syncback"
)

// TestRealNodeSyncBackKeepsEverything (issue 24, items 2 and 3, on real pods and Jobs):
//
//   - two sessions sync back into one target, one after the other: the target holds the younger's
//     files and the older's are its newest kept version, not silently replaced;
//   - a target that cannot take the copy (a file where the directory was, the fault injected on the
//     node) fails every attempt of a third session's sync-back: after syncMaxAttempts the claim is
//     Failed (SyncBackFailed) with its workspace untouched in the content volume and named in its
//     message, while a fourth session's sync-back into the same target waited its turn, and, the
//     fault repaired, takes it and saves its work; the target's earlier content is a version.
//
// Before, the second session's copy replaced the first's whole, and the third's sync-back was
// retried without end, holding up the fourth.
func TestRealNodeSyncBackKeepsEverything(t *testing.T) {
	requireRealNode(t)
	const target = "results/shared"
	e := newRealnodeEnv(t, "airlock-rn-keep", realnodeOptions{maxConcurrent: 4, maxPerSession: 1, maxInstances: 4, targetPath: target})
	run := func(session, content string) rnSession {
		t.Helper()
		plan := map[string]any{"api": apiURL(), "namespace": e.ns, "runtime": "agent", "session": session, "handle": "codegen/default", "close": true,
			"steps": []map[string]any{step("write", "Write", map[string]any{"file_path": "src/a.txt", "content": content})}}
		var r rnSession
		e.runClient(t, "runtime-"+session, "session", plan, 4*time.Minute, &r)
		if r.Error != "" || r.Phase != "Bound" {
			t.Fatalf("%s: %s %s", session, r.Phase, r.Error)
		}
		if c := r.call(t, "write"); c.Err != "" || c.IsError {
			t.Fatalf("%s: write: %q %v %s", session, c.Err, c.IsError, c.Text)
		}
		return r
	}
	gone := func(name string) {
		t.Helper()
		eventually(t, 4*time.Minute, "claim "+name+" synced back and deleted", func(ctx context.Context) (bool, error) {
			_, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		})
	}
	read := func(rel string) string {
		t.Helper()
		got, err := e.readContent(rel)
		if err != nil {
			t.Fatalf("reading %s: %v", rel, err)
		}
		return got
	}
	versionsDir := path.Join(path.Dir(target), syncback.VersionsDir(path.Base(target)))
	newestVersion := func() string {
		t.Helper()
		names, err := e.listContent(versionsDir)
		if err != nil || len(names) == 0 {
			t.Fatalf("versions of %s: %v %v", target, names, err)
		}
		return path.Join(versionsDir, names[len(names)-1]) // names sort by time
	}

	// Two sessions into one target.
	gone(run("keep-1", "the first session's work\n").Claim)
	gone(run("keep-2", "the second session's work\n").Claim)
	if got := read(target + "/src/a.txt"); got != "the second session's work\n" {
		t.Errorf("the target holds %q, want the second session's work", got)
	}
	if got := read(newestVersion() + "/src/a.txt"); got != "the first session's work\n" {
		t.Errorf("the newest version holds %q, want the first session's work", got)
	}

	// A target that cannot take the copy: the directory moved aside, a file in its place.
	shell := nodeShell(t)
	dir := "/node/" + path.Base(e.hostDir) + "/" + target
	if err := shell(context.Background(), "break-target", "set -e; mv "+dir+" "+dir+".aside && echo x > "+dir); err != nil {
		t.Fatal(err)
	}
	third := run("keep-3", "the third session's work\n")
	fourth := run("keep-4", "the fourth session's work\n")
	var waited bool
	var failed *airlockv1alpha1.SandboxClaim
	eventually(t, 10*time.Minute, "the third claim to give up its sync-back", func(ctx context.Context) (bool, error) {
		if c, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Get(ctx, fourth.Claim, metav1.GetOptions{}); err == nil {
			if cond := meta.FindStatusCondition(c.Status.Conditions, claim.ConditionSyncBack); cond != nil && cond.Reason == claim.ReasonSyncBackWaiting {
				waited = true
			}
		}
		c, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Get(ctx, third.Claim, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		failed = c
		return c.Status.Phase == airlockv1alpha1.ClaimFailed, nil
	})
	if !waited {
		t.Errorf("the fourth claim never waited behind the third (its target overlaps)")
	}
	if failed.Status.Reason != claim.ReasonSyncBackFailed || !strings.Contains(failed.Status.Message, failed.Spec.WorkspaceDir) {
		t.Errorf("the third claim: %s %q, want SyncBackFailed naming its workspace %s", failed.Status.Reason, failed.Status.Message, failed.Spec.WorkspaceDir)
	}
	if cond := meta.FindStatusCondition(failed.Status.Conditions, claim.ConditionSyncBack); cond == nil || cond.Reason != claim.ReasonSyncBackGaveUp {
		t.Errorf("the third claim's SyncBack condition %+v, want %s", cond, claim.ReasonSyncBackGaveUp)
	}
	t.Logf("the third claim gave up: %s", failed.Status.Message)
	if got := read(failed.Spec.WorkspaceDir + "/src/a.txt"); got != "the third session's work\n" {
		t.Errorf("the third session's workspace holds %q, want its work, untouched", got)
	}

	// Repaired: the fourth syncs back.
	if err := shell(context.Background(), "repair-target", "set -e; rm "+dir+" && mv "+dir+".aside "+dir); err != nil {
		t.Fatal(err)
	}
	gone(fourth.Claim)
	if got := read(target + "/src/a.txt"); got != "the fourth session's work\n" {
		t.Errorf("the target holds %q, want the fourth session's work", got)
	}
	if got := read(newestVersion() + "/src/a.txt"); got != "the second session's work\n" {
		t.Errorf("the newest version holds %q, want the second session's work", got)
	}
}
