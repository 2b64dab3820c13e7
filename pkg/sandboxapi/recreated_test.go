package sandboxapi

import (
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/client"
)

// ofEarlierRuntime returns c as the claim of an earlier AgentRuntime of the runtime's name,
// deleted and created again since (another UID), orphaned (kubectl delete --cascade=orphan).
func ofEarlierRuntime(c *airlockv1alpha1.SandboxClaim) *airlockv1alpha1.SandboxClaim {
	c.Spec.RuntimeUID = types.UID("uid-of-the-deleted-runtime")
	c.OwnerReferences = nil
	return c
}

// TestRecreatedRuntimeGetsNothingOfTheOld: a runtime deleted and created again under the same
// name is a new owner. Its acquire of a handle whose claim name is held by the old runtime's
// Bound claim is answered 202 (Reaping, PreviousRuntime), never with the old claim's addresses or
// token; renew answers 404; open reports the handle as held, without the old claim's phase; close
// marks nothing of the old runtime's.
func TestRecreatedRuntimeGetsNothingOfTheOld(t *testing.T) {
	old := ofEarlierRuntime(existingClaim(testSession, testHandle, airlockv1alpha1.ClaimBound))
	oldEager := ofEarlierRuntime(existingClaim(testSession, "lint/default", airlockv1alpha1.ClaimBound))
	registry := newRegistry(
		airlockv1alpha1.RegistrySandbox{Name: "codegen", Class: "codegen"},
		airlockv1alpha1.RegistrySandbox{Name: "lint", Class: "codegen", Allocation: airlockv1alpha1.AllocationEager},
	)
	f := newFixture(t, newRuntime(), registry, newClass("codegen"), old, oldEager)

	rec := f.acquire(0)
	if rec.Code != http.StatusAccepted {
		t.Fatalf("acquire: status %d: %s", rec.Code, rec.Body.String())
	}
	got := decodeBody[client.AcquireResponse](t, rec)
	if got.Phase != string(airlockv1alpha1.ClaimReaping) || got.Reason != client.ReasonPreviousRuntime || len(got.Addresses) != 0 || len(got.Headers) != 0 {
		t.Errorf("acquire answered %+v, want 202 Reaping/%s and nothing of the old claim", got, client.ReasonPreviousRuntime)
	}
	if n := len(actionsOf(f.airlock.Actions(), "create")); n != 0 {
		t.Errorf("%d claims created while the name is held", n)
	}

	if code := f.do("/v1/sandboxes/renew", tokenAgent, renewBody(testSession, testHandle)).Code; code != http.StatusNotFound {
		t.Errorf("renew of the old runtime's claim: status %d, want 404", code)
	}
	if lu := f.apiClaim(old.Name).Status.LastUsedAt; lu != nil {
		t.Errorf("renew wrote the old runtime's claim: lastUsedAt %v", lu)
	}

	rec = f.do("/v1/sessions/open", tokenAgent, sessionBody(testSession))
	if rec.Code != http.StatusOK {
		t.Fatalf("open: status %d: %s", rec.Code, rec.Body.String())
	}
	want := []client.SessionClaim{{Claim: oldEager.Name, Handle: "lint/default", Phase: string(airlockv1alpha1.ClaimReaping), Reason: client.ReasonPreviousRuntime}}
	if diff := cmp.Diff(want, decodeBody[client.SessionResponse](t, rec).Claims); diff != "" {
		t.Errorf("open answered (-want +got):\n%s", diff)
	}

	rec = f.do("/v1/sessions/close", tokenAgent, sessionBody(testSession))
	if rec.Code != http.StatusAccepted {
		t.Fatalf("close: status %d: %s", rec.Code, rec.Body.String())
	}
	if claims := decodeBody[client.SessionResponse](t, rec).Claims; len(claims) != 0 {
		t.Errorf("close answered %+v, want none of the old runtime's claims", claims)
	}
	if patches := actionsOf(f.airlock.Actions(), "patch"); len(patches) != 0 {
		t.Errorf("close marked %d claims of the old runtime", len(patches))
	}
}
