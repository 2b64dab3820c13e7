package sandboxapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/client"
)

// TestAcquireSaysResumed (issue 24 item 4): the 200 of a claim that resumed a kept workspace
// says so (resumedWorkspace: when it was kept, by which claim); a claim that did not resume one
// answers without it.
func TestAcquireSaysResumed(t *testing.T) {
	keptAt := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	for name, resumed := range map[string]*airlockv1alpha1.ResumedWorkspace{
		"resumed":     {KeptAt: metav1.NewTime(keptAt), KeptBy: "agent-0123456789"},
		"not resumed": nil,
	} {
		t.Run(name, func(t *testing.T) {
			c := existingClaim(testSession, testHandle, airlockv1alpha1.ClaimBound)
			c.Status.ResumedWorkspace = resumed
			f := newFixture(t, append(baseObjects(), c)...)
			rec := f.acquire(0)
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
			}
			var got client.AcquireResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if resumed == nil {
				if got.ResumedWorkspace != nil || strings.Contains(rec.Body.String(), "resumedWorkspace") {
					t.Errorf("answer %s, want no resumedWorkspace", rec.Body.String())
				}
				return
			}
			if got.ResumedWorkspace == nil || !got.ResumedWorkspace.KeptAt.Equal(keptAt) || got.ResumedWorkspace.KeptBy != resumed.KeptBy {
				t.Errorf("resumedWorkspace %+v, want kept at %s by %s", got.ResumedWorkspace, keptAt, resumed.KeptBy)
			}
		})
	}
}

// TestAcquireWaitingForCollection: a Binding claim whose directory holds another owner's kept
// workspace, being removed first, answers 202 with why.
func TestAcquireWaitingForCollection(t *testing.T) {
	const message = "the workspace team-a/sandboxes/x is another owner's kept workspace (record Job airlock-kept-1), being collected first"
	c := existingClaim(testSession, testHandle, airlockv1alpha1.ClaimBinding)
	c.Status.Conditions = append(c.Status.Conditions, metav1.Condition{
		Type: "Ready", Status: metav1.ConditionFalse, Reason: airlockv1alpha1.ReasonWaitingForWorkspaceCollection, Message: message,
	})
	f := newFixture(t, append(baseObjects(), c)...)
	rec := f.acquire(0)
	if rec.Code != http.StatusAccepted {
		t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
	}
	var got client.AcquireResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Reason != airlockv1alpha1.ReasonWaitingForWorkspaceCollection || got.Message != message {
		t.Errorf("answer %+v, want 202 %s with the condition's message", got, airlockv1alpha1.ReasonWaitingForWorkspaceCollection)
	}
}
