//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimname"
	"github.com/airlock-dev/airlock/pkg/client"
)

// useSessionWorkspaces makes the env's registry entry share one directory per session and handle.
func useSessionWorkspaces(t *testing.T, e *claimEnv) {
	t.Helper()
	ctx := context.Background()
	reg, err := airlockClient.AirlockV1alpha1().ToolRegistries(e.ns).Get(ctx, "tools", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reg.Spec.Sandboxes[0].Workspace = airlockv1alpha1.WorkspaceSession
	if _, err := airlockClient.AirlockV1alpha1().ToolRegistries(e.ns).Update(ctx, reg, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createRuntime creates an AgentRuntime like the env's, named name, for the ServiceAccount sa.
func createRuntime(t *testing.T, e *claimEnv, name, sa string) *airlockv1alpha1.AgentRuntime {
	t.Helper()
	rt := &airlockv1alpha1.AgentRuntime{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec:       *e.runtime.Spec.DeepCopy(),
	}
	rt.Spec.ServiceAccountName = sa
	created, err := airlockClient.AirlockV1alpha1().AgentRuntimes(e.ns).Create(context.Background(), rt, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating runtime %s: %v", name, err)
	}
	return created
}

// TestTwoRuntimesOneSessionId: two AgentRuntimes of one namespace, each with its own
// ServiceAccount, that use one session id and handle with `workspace: session`, get two claims on
// two directories, neither holding the other: a workspace belongs to one runtime (issue 23 item
// 2; before, both resolved to sha256(session, handle)).
func TestTwoRuntimesOneSessionId(t *testing.T) {
	e := newClaimEnv(t, "airlock-two-runtimes", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3})
	useSessionWorkspaces(t, e)
	createRuntime(t, e, "other", "other")
	op := startAPIOperator(t, e.ns)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	dirs := map[string]string{}
	for _, rt := range []string{"agent", "other"} {
		c := op.client(serviceAccountToken(t, e.ns, rt))
		got, err := c.Acquire(ctx, client.AcquireRequest{Namespace: e.ns, Runtime: rt, Session: "shared-session", Handle: "codegen/default", WaitSeconds: waitSeconds(90)})
		if err != nil {
			t.Fatalf("acquire for %s: %v", rt, err)
		}
		cl, err := e.getClaim(ctx, got.Claim)
		if err != nil {
			t.Fatal(err)
		}
		if cl.Spec.RuntimeName != rt || admission.RuntimeUID(cl) == "" {
			t.Errorf("claim %s: runtime %q uid %q, want %s's", cl.Name, cl.Spec.RuntimeName, admission.RuntimeUID(cl), rt)
		}
		dirs[rt] = cl.Spec.WorkspaceDir
	}
	a, b := dirs["agent"]+"/", dirs["other"]+"/"
	if strings.HasPrefix(a, b) || strings.HasPrefix(b, a) {
		t.Errorf("two runtimes' claims share or nest workspaces: %q and %q", dirs["agent"], dirs["other"])
	}
}

// TestRecreatedRuntimeInheritsNothing: a runtime deleted with --cascade=orphan and created again
// under the same name, with another ServiceAccount, is a new owner. Its acquire of the old
// runtime's handle is never answered with the old claim's address or token (202 Reaping,
// PreviousRuntime, while the orphaned claim is reaped: nothing else would delete it), then gets a
// claim of its own.
func TestRecreatedRuntimeInheritsNothing(t *testing.T) {
	e := newClaimEnv(t, "airlock-recreated", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3})
	op := startAPIOperator(t, e.ns)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	req := client.AcquireRequest{Namespace: e.ns, Runtime: "agent", Session: "session-1", Handle: "codegen/default", WaitSeconds: waitSeconds(90)}
	old, err := op.client(serviceAccountToken(t, e.ns, "agent")).Acquire(ctx, req)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	oldClaim, err := e.getClaim(ctx, old.Claim)
	if err != nil {
		t.Fatal(err)
	}

	// Every phase and reason the old claim goes through, from a watch started before the
	// runtime's deletion.
	w, err := airlockClient.AirlockV1alpha1().SandboxClaims(e.ns).Watch(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=" + oldClaim.Name, ResourceVersion: oldClaim.ResourceVersion,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	reasons := make(chan string, 64)
	go func() {
		defer close(reasons)
		for ev := range w.ResultChan() {
			if c, ok := ev.Object.(*airlockv1alpha1.SandboxClaim); ok && c.UID == oldClaim.UID {
				reasons <- string(c.Status.Phase) + "/" + c.Status.Reason
				t.Logf("old claim: %s %s/%s owners %d deleting %v", ev.Type, c.Status.Phase, c.Status.Reason, len(c.OwnerReferences), c.DeletionTimestamp != nil)
			}
		}
	}()

	orphan := metav1.DeletePropagationOrphan
	if err := airlockClient.AirlockV1alpha1().AgentRuntimes(e.ns).Delete(ctx, "agent", metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the runtime to be gone and its claim orphaned", func(ctx context.Context) (bool, error) {
		_, err := airlockClient.AirlockV1alpha1().AgentRuntimes(e.ns).Get(ctx, "agent", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, nil
		}
		c, err := e.getClaim(ctx, old.Claim)
		if apierrors.IsNotFound(err) {
			return true, nil // reaped already
		}
		return err == nil && metav1.GetControllerOf(c) == nil, err
	})
	newRT := createRuntime(t, e, "agent", "someone-else")
	if newRT.UID == e.runtime.UID {
		t.Fatal("the runtime created again has the old UID")
	}
	newClient := op.client(serviceAccountToken(t, e.ns, "someone-else"))
	quick := req
	quick.WaitSeconds = waitSeconds(0)
	oldThere := func() bool {
		c, err := e.getClaim(ctx, oldClaim.Name)
		return err == nil && c.UID == oldClaim.UID
	}
	before := oldThere()
	got, status, err := newClient.AcquireOnce(ctx, quick)
	if err != nil {
		t.Fatalf("acquire by the new runtime: %v", err)
	}
	if got.Headers["Authorization"] == old.Headers["Authorization"] || (len(got.Addresses) > 0 && len(old.Addresses) > 0 && got.Addresses[0].URL == old.Addresses[0].URL && before) {
		t.Fatalf("the new runtime was handed the old runtime's claim: %d %+v", status, got)
	}
	if before && oldThere() && (status != http.StatusAccepted || got.Reason != client.ReasonPreviousRuntime) {
		t.Errorf("while the old runtime's claim is there: %d %+v, want 202 with reason %s", status, got, client.ReasonPreviousRuntime)
	}

	// The orphaned claim is reaped (Orphaned), and the new runtime gets a claim of its own (of the
	// same name: gone means that UID gone).
	eventually(t, 90*time.Second, "the old runtime's claim to be gone", func(ctx context.Context) (bool, error) {
		return !oldThere(), nil
	})
	w.Stop()
	var seen []string
	for r := range reasons {
		seen = append(seen, r)
	}
	if !slices.Contains(seen, "Reaping/Orphaned") {
		t.Errorf("the orphaned claim went through %q, want Reaping/Orphaned", seen)
	}
	fresh, err := newClient.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("acquire by the new runtime once the old claim is gone: %v", err)
	}
	cl, err := e.getClaim(ctx, fresh.Claim)
	if err != nil {
		t.Fatal(err)
	}
	if cl.UID == oldClaim.UID || admission.RuntimeUID(cl) != newRT.UID || fresh.Headers["Authorization"] == old.Headers["Authorization"] {
		t.Errorf("the new runtime's claim: uid %s runtime uid %s (new runtime %s); same token as the old: %v",
			cl.UID, admission.RuntimeUID(cl), newRT.UID, fresh.Headers["Authorization"] == old.Headers["Authorization"])
	}
	if fresh.Claim != claimname.For("agent", "session-1", "codegen/default") {
		t.Errorf("claim %s", fresh.Claim)
	}
}
