package sandboxapi

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimname"
	"github.com/airlock-dev/airlock/pkg/client"
)

func renewBody(session, handle string) client.RenewRequest {
	return client.RenewRequest{Namespace: testNS, Runtime: testRuntime, Session: session, Handle: handle}
}

// TestRenew: 204, writing lastUsedAt only once per half idle timeout (10m here).
func TestRenew(t *testing.T) {
	c := existingClaim(testSession, testHandle, airlockv1alpha1.ClaimBound)
	f := newFixture(t, append(baseObjects(), c)...)
	renew := func() int { return f.do("/v1/sandboxes/renew", tokenAgent, renewBody(testSession, testHandle)).Code }

	if code := renew(); code != http.StatusNoContent {
		t.Fatalf("status %d", code)
	}
	if got := f.apiClaim(c.Name).Status.LastUsedAt; got == nil || !got.Time.Equal(t0) {
		t.Fatalf("lastUsedAt %v, want %v", got, t0)
	}
	f.setClaim(f.apiClaim(c.Name))
	f.airlock.ClearActions()

	f.clock.Step(4 * time.Minute) // under half the idle timeout: no write
	if code := renew(); code != http.StatusNoContent {
		t.Fatalf("status %d", code)
	}
	if writes := writeActions(f.airlock.Actions()); len(writes) != 0 {
		t.Errorf("writes within half the idle timeout: %v", writes)
	}
	f.clock.Step(time.Minute) // half the idle timeout since the last write
	if code := renew(); code != http.StatusNoContent {
		t.Fatalf("status %d", code)
	}
	if writes := writeActions(f.airlock.Actions()); len(writes) != 1 || writes[0].GetSubresource() != "status" {
		t.Errorf("writes %v, want one status update", writes)
	}
}

func TestRenewErrors(t *testing.T) {
	deleting := existingClaim(testSession, "codegen/deleting", airlockv1alpha1.ClaimBound)
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	objects := append(baseObjects(),
		existingClaim(testSession, "codegen/binding", airlockv1alpha1.ClaimBinding),
		existingClaim(testSession, "codegen/reaping", airlockv1alpha1.ClaimReaping),
		deleting,
	)
	tests := map[string]struct {
		handle     string
		wantStatus int
		wantCode   string
	}{
		"no claim": {handle: "codegen/none", wantStatus: http.StatusNotFound, wantCode: client.CodeNotFound},
		"binding":  {handle: "codegen/binding", wantStatus: http.StatusConflict, wantCode: client.CodeNotBound},
		"reaping":  {handle: "codegen/reaping", wantStatus: http.StatusConflict, wantCode: client.CodeNotBound},
		"deleting": {handle: "codegen/deleting", wantStatus: http.StatusConflict, wantCode: client.CodeNotBound},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, objects...)
			wantError(t, f.do("/v1/sandboxes/renew", tokenAgent, renewBody(testSession, tc.handle)), tc.wantStatus, tc.wantCode, "")
			if writes := writeActions(f.airlock.Actions()); len(writes) != 0 {
				t.Errorf("writes: %v", writes)
			}
		})
	}
}

// TestRenewFollowsReplacement: a renew of a handle whose claim was replaced renews the replacement.
func TestRenewFollowsReplacement(t *testing.T) {
	old := existingClaim(testSession, testHandle, airlockv1alpha1.ClaimFailed)
	old.Status.ReplacedBy = claimname.Replacement(old.Name)
	repl := existingClaim(testSession, testHandle, airlockv1alpha1.ClaimBound)
	repl.Name, repl.Spec.Replaces = old.Status.ReplacedBy, old.Name
	f := newFixture(t, append(baseObjects(), old, repl)...)
	if rec := f.do("/v1/sandboxes/renew", tokenAgent, renewBody(testSession, testHandle)); rec.Code != http.StatusNoContent {
		t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
	}
	if f.apiClaim(repl.Name).Status.LastUsedAt == nil {
		t.Error("the replacement was not renewed")
	}
}

func sessionBody(session string) client.SessionRequest {
	return client.SessionRequest{Namespace: testNS, Runtime: testRuntime, Session: session}
}

// TestOpenSession: the eager sandboxes' claims are created, idempotently, and a claim the limits
// refuse is reported, not created.
func TestOpenSession(t *testing.T) {
	registry := newRegistry(
		airlockv1alpha1.RegistrySandbox{Name: "codegen", Class: "codegen"},
		airlockv1alpha1.RegistrySandbox{Name: "lint", Class: "codegen", Allocation: airlockv1alpha1.AllocationEager},
		airlockv1alpha1.RegistrySandbox{Name: "docs", Class: "codegen", Allocation: airlockv1alpha1.AllocationEager},
		airlockv1alpha1.RegistrySandbox{Name: "test", Class: "codegen", Allocation: airlockv1alpha1.AllocationEager},
	)
	rt := newRuntime(func(rt *airlockv1alpha1.AgentRuntime) { rt.Spec.Sandbox.MaxPerSession = 2 })
	f := newFixture(t, rt, registry, newClass("codegen"))

	rec := f.do("/v1/sessions/open", tokenAgent, sessionBody(testSession))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
	}
	lint, docs := claimname.For(testRuntime, testSession, "lint/default"), claimname.For(testRuntime, testSession, "docs/default")
	want := client.SessionResponse{Claims: []client.SessionClaim{
		{Claim: lint, Handle: "lint/default", Phase: "Pending"},
		{Claim: docs, Handle: "docs/default", Phase: "Pending"},
		{Handle: "test/default", Phase: "Refused", Reason: "MaxPerSession"},
	}}
	if diff := cmp.Diff(want, decodeBody[client.SessionResponse](t, rec)); diff != "" {
		t.Errorf("answer (-want +got):\n%s", diff)
	}
	if n := len(f.createdClaims()); n != 2 {
		t.Fatalf("%d claims, want 2", n)
	}

	// Again, once the cache has them: nothing new is created.
	for _, name := range []string{lint, docs} {
		c := f.apiClaim(name)
		c.ResourceVersion = "1"
		c.CreationTimestamp = metav1.NewTime(t0)
		f.setClaim(c)
	}
	f.airlock.ClearActions()
	rec = f.do("/v1/sessions/open", tokenAgent, sessionBody(testSession))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
	}
	if creates := actionsOf(f.airlock.Actions(), "create"); len(creates) != 0 {
		t.Errorf("second open created %v", creates)
	}
}

func TestOpenSessionErrors(t *testing.T) {
	tests := map[string]struct {
		objects    []runtime.Object
		wantStatus int
		wantCode   string
	}{
		"disabled": {
			objects:    []runtime.Object{newRuntime(func(rt *airlockv1alpha1.AgentRuntime) { rt.Spec.Sandbox.Enabled = false }), newRegistry(), newClass("codegen")},
			wantStatus: http.StatusConflict, wantCode: client.CodeDisabled,
		},
		"registry missing": {objects: []runtime.Object{newRuntime()}, wantStatus: http.StatusNotFound, wantCode: client.CodeNotFound},
		"an eager sandbox's class missing": {
			objects: []runtime.Object{newRuntime(), newRegistry(
				airlockv1alpha1.RegistrySandbox{Name: "a", Class: "codegen", Allocation: airlockv1alpha1.AllocationEager},
				airlockv1alpha1.RegistrySandbox{Name: "b", Class: "missing", Allocation: airlockv1alpha1.AllocationEager},
			), newClass("codegen")},
			wantStatus: http.StatusNotFound, wantCode: client.CodeNotFound,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, tc.objects...)
			wantError(t, f.do("/v1/sessions/open", tokenAgent, sessionBody(testSession)), tc.wantStatus, tc.wantCode, "")
			if creates := actionsOf(f.airlock.Actions(), "create"); len(creates) != 0 {
				t.Errorf("created %v", creates)
			}
		})
	}
}

// TestCloseSession: every live claim of the session, and only those, gets the reap-requested
// annotation (a Failed one too: the leader deletes it, so that a re-acquire does not wait on
// it); 202.
func TestCloseSession(t *testing.T) {
	bound := existingClaim(testSession, "codegen/a", airlockv1alpha1.ClaimBound)
	queued := existingClaim(testSession, "codegen/b", airlockv1alpha1.ClaimQueued)
	failed := existingClaim(testSession, "codegen/e", airlockv1alpha1.ClaimFailed)
	refused := existingClaim(testSession, "codegen/c", airlockv1alpha1.ClaimRefused)
	already := existingClaim(testSession, "codegen/d", airlockv1alpha1.ClaimBound)
	already.Annotations = map[string]string{airlockv1alpha1.AnnotationReapRequested: "2026-01-01T00:00:00Z"}
	other := existingClaim("other-session", "codegen/a", airlockv1alpha1.ClaimBound)
	f := newFixture(t, append(baseObjects(), bound, queued, failed, refused, already, other)...)

	rec := f.do("/v1/sessions/close", tokenAgent, sessionBody(testSession))
	if rec.Code != http.StatusAccepted {
		t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
	}
	got := decodeBody[client.SessionResponse](t, rec)
	if len(got.Claims) != 4 {
		t.Errorf("answer %+v, want the four live claims", got)
	}
	var patched []string
	for _, a := range actionsOf(f.airlock.Actions(), "patch") {
		patched = append(patched, a.(k8stesting.PatchAction).GetName())
	}
	wantPatched := []string{bound.Name, queued.Name, failed.Name}
	slices.Sort(wantPatched)
	if diff := cmp.Diff(wantPatched, patched); diff != "" {
		t.Errorf("patched (-want +got):\n%s", diff)
	}
	if v := f.apiClaim(bound.Name).Annotations[airlockv1alpha1.AnnotationReapRequested]; v != t0.Format(time.RFC3339) {
		t.Errorf("annotation %q", v)
	}
	if f.apiClaim(other.Name).Annotations[airlockv1alpha1.AnnotationReapRequested] != "" {
		t.Error("another session's claim was marked")
	}
}
