package sandboxapi

import (
	"encoding/json"
	"net/http"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/client"
)

// TestAcquirePodLost (issue 24): while a claim's pod cannot run (its PodLost condition True), an
// acquire never hands out its address, which does not answer: it answers 202 with the
// condition's reason and message, which name the pod and its node. Before, a Bound claim on a
// lost node answered 200 with a dead address, and a Reaping one a bare 202 "Reaping".
func TestAcquirePodLost(t *testing.T) {
	const message = "pod x is on node node-a, which is unreachable since 2026-01-01T00:00:00Z"
	for _, phase := range []airlockv1alpha1.ClaimPhase{airlockv1alpha1.ClaimBound, airlockv1alpha1.ClaimReaping, airlockv1alpha1.ClaimBinding} {
		t.Run(string(phase), func(t *testing.T) {
			c := existingClaim(testSession, testHandle, phase)
			c.Status.Conditions = append(c.Status.Conditions, metav1.Condition{
				Type: airlockv1alpha1.ConditionPodLost, Status: metav1.ConditionTrue, Reason: "NodeUnreachable", Message: message,
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
			if got.Reason != "NodeUnreachable" || got.Message != message || len(got.Addresses) != 0 || got.Headers != nil {
				t.Errorf("answer %+v, want 202 NodeUnreachable with the condition's message and no address", got)
			}
		})
	}
	t.Run("PodLost False: Bound answers 200", func(t *testing.T) {
		c := existingClaim(testSession, testHandle, airlockv1alpha1.ClaimBound)
		c.Status.Conditions = append(c.Status.Conditions, metav1.Condition{
			Type: airlockv1alpha1.ConditionPodLost, Status: metav1.ConditionFalse, Reason: "NoPodLost",
		})
		f := newFixture(t, append(baseObjects(), c)...)
		if rec := f.acquire(0); rec.Code != http.StatusOK {
			t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
		}
	})
}
