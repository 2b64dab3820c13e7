package claim

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/legacyregistry"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	airlocklisters "github.com/airlock-dev/airlock/pkg/generated/listers/airlock/v1alpha1"
)

// gather returns the samples of a metric family by their label values, joined with "/".
func gather(t *testing.T, name string) map[string]float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			key := ""
			for i, l := range m.GetLabel() {
				if i > 0 {
					key += "/"
				}
				key += l.GetValue()
			}
			switch {
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				out[key] = float64(m.GetHistogram().GetSampleCount())
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

func TestClaimsByPhaseMetric(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, c := range []*airlockv1alpha1.SandboxClaim{
		newClaim("a", "s1", "", t0),
		newClaim("b", "s2", airlockv1alpha1.ClaimQueued, t0),
		bound("c", t0),
		bound("d", t0),
	} {
		if err := indexer.Add(c); err != nil {
			t.Fatal(err)
		}
	}
	registerMetrics(airlocklisters.NewSandboxClaimLister(indexer))
	want := map[string]float64{"team-a/Bound": 2, "team-a/Pending": 1, "team-a/Queued": 1}
	if diff := cmp.Diff(want, gather(t, "airlock_claims")); diff != "" {
		t.Errorf("airlock_claims (-want +got):\n%s", diff)
	}
}

func TestPhaseChangeMetrics(t *testing.T) {
	registerMetrics(airlocklisters.NewSandboxClaimLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})))
	before := gather(t, "airlock_claim_bind_duration_seconds")
	observePhaseChange(binding("c1", t0), bound("c1", t0.Add(time.Second)), t0.Add(3*time.Second))
	warm := bound("c2", t0.Add(time.Second))
	warm.Status.Warm = &airlockv1alpha1.WarmAdoption{Member: "m", WorkspaceDir: "team-a/sandboxes/warm/m"}
	observePhaseChange(binding("c2", t0), warm, t0.Add(2*time.Second))
	after := gather(t, "airlock_claim_bind_duration_seconds")
	if after["false"] != before["false"]+1 || after["true"] != before["true"]+1 {
		t.Errorf("bind duration samples cold %v warm %v, want %v and %v", after["false"], after["true"], before["false"]+1, before["true"]+1)
	}
	admitsBefore := gather(t, "airlock_claim_admission_decisions_total")["Admit/"]
	observePhaseChange(newClaim("c3", "s3", "", t0), warm, t0.Add(time.Second)) // Pending → Bound
	if admits := gather(t, "airlock_claim_admission_decisions_total")["Admit/"]; admits != admitsBefore+1 {
		t.Errorf("admissions %v, want %v: a claim admitted straight to Bound is an admission", admits, admitsBefore+1)
	}
	refused := newClaim("c2", "s1", airlockv1alpha1.ClaimRefused, t0)
	refused.Status.Reason = "MaxPerSession"
	beforeRefused := gather(t, "airlock_claim_admission_decisions_total")["Refuse/MaxPerSession"]
	observePhaseChange(newClaim("c2", "s1", "", t0), refused, t0)
	if after := gather(t, "airlock_claim_admission_decisions_total")["Refuse/MaxPerSession"]; after != beforeRefused+1 {
		t.Errorf("refusals %v, want %v", after, beforeRefused+1)
	}
}
