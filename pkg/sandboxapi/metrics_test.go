package sandboxapi

import (
	"net/http"
	"testing"

	"k8s.io/component-base/metrics/legacyregistry"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// TestMetrics: requests by endpoint and code, acquire latency by result, renewals by result.
func TestMetrics(t *testing.T) {
	c := existingClaim(testSession, testHandle, airlockv1alpha1.ClaimBound)
	f := newFixture(t, append(baseObjects(), c)...)

	count := func(endpoint, code string) float64 {
		v, _ := gathered(t, "airlock_sandboxapi_requests_total", map[string]string{"endpoint": endpoint, "code": code})
		return v
	}
	histogram := func(result string) uint64 {
		_, n := gathered(t, "airlock_sandboxapi_acquire_duration_seconds", map[string]string{"result": result})
		return n
	}
	renewed := func(result string) float64 {
		v, _ := gathered(t, "airlock_sandboxapi_renewals_total", map[string]string{"result": result})
		return v
	}
	lastUsed := func(written string) float64 {
		v, _ := gathered(t, "airlock_claim_renewals_total", map[string]string{"written": written})
		return v
	}
	ok, bound, denied := count("acquire", "200"), histogram("bound"), histogram("denied")
	written, skipped := renewed("written"), renewed("skipped")
	wroteLastUsed, noWrite := lastUsed("true"), lastUsed("false")

	if rec := f.acquire(0); rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	f.do("/v1/sandboxes/acquire", "forged", acquireBody(testSession, testHandle, 0))
	f.do("/v1/sandboxes/renew", tokenAgent, renewBody(testSession, testHandle))
	f.setClaim(f.apiClaim(c.Name))
	f.do("/v1/sandboxes/renew", tokenAgent, renewBody(testSession, testHandle))

	if got := count("acquire", "200") - ok; got != 1 {
		t.Errorf("acquire 200 counted %v times", got)
	}
	if got := histogram("bound") - bound; got != 1 {
		t.Errorf("bound latency observed %d times", got)
	}
	if got := histogram("denied") - denied; got != 1 {
		t.Errorf("denied latency observed %d times", got)
	}
	if got := renewed("written") - written; got != 1 {
		t.Errorf("written renewals %v, want 1", got)
	}
	if got := renewed("skipped") - skipped; got != 1 {
		t.Errorf("skipped renewals %v, want 1", got)
	}
	// Renewals vs lastUsedAt writes (SPEC section 7).
	if got1, got2 := lastUsed("true")-wroteLastUsed, lastUsed("false")-noWrite; got1 != 1 || got2 != 1 {
		t.Errorf("airlock_claim_renewals_total written=true %v, written=false %v; want 1 and 1", got1, got2)
	}
}

// gathered reads a counter's value or a histogram's sample count from the legacy registry, as a
// scrape of /metrics would.
func gathered(t *testing.T, name string, labels map[string]string) (counter float64, samples uint64) {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			matched := 0
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v == lp.GetValue() {
					matched++
				}
			}
			if matched == len(labels) {
				return m.GetCounter().GetValue(), m.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0, 0
}
