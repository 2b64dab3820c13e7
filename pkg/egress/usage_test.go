package egress

import (
	"testing"
	"time"

	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/usage"
)

// runtimeBytesOf reads airlock_egress_runtime_bytes_total for a runtime and direction.
func runtimeBytesOf(t *testing.T, ns, runtime, direction string) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "airlock_egress_runtime_bytes_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if len(got) != 3 {
				t.Errorf("series with labels %v: only namespace, runtime and direction", got)
			}
			if got["namespace"] == ns && got["runtime"] == runtime && got["direction"] == direction {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestEgressBytesCountedPerRuntime: a tunnel's bytes each way are added to its claim's runtime's
// series when it ends, as its audit record says.
func TestEgressBytesCountedPerRuntime(t *testing.T) {
	f := newFixture(t, newInternet(t))
	up0, down0 := runtimeBytesOf(t, "team-a", "agent", "up"), runtimeBytesOf(t, "team-a", "agent", "down")
	c, echo := openEcho(t, f)
	if err := echo("some more bytes"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	rec := f.record()
	if rec.Runtime != "agent" || rec.BytesUp == 0 || rec.BytesDown == 0 {
		t.Fatalf("record %+v", rec)
	}
	if up := runtimeBytesOf(t, "team-a", "agent", "up") - up0; up != float64(rec.BytesUp) {
		t.Errorf("runtime's up bytes grew by %v, want %d", up, rec.BytesUp)
	}
	if down := runtimeBytesOf(t, "team-a", "agent", "down") - down0; down != float64(rec.BytesDown) {
		t.Errorf("runtime's down bytes grew by %v, want %d", down, rec.BytesDown)
	}
}

// TestRecordEntryCarriesTheExchangesBytes: an exchange's record entry is the gateway's egress
// entry, and its bytes, both ways, are the session's egress usage.
func TestRecordEntryCarriesTheExchangesBytes(t *testing.T) {
	at := time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)
	e := RecordEntry(Record{Kind: "connect", Host: "example.com", Port: 443, Allowed: true, Reason: ReasonAllowed, BytesUp: 100, BytesDown: 2000, Duration: time.Second}, at)
	if e.Source != record.SourceGateway || e.Kind != record.KindEgress || e.Verdict != record.VerdictAllowed || e.Host != "example.com" || e.Port != 443 || e.DurationMS != 1000 {
		t.Errorf("entry %+v", e)
	}
	denied := RecordEntry(Record{Kind: "connect", Host: "evil.example", Port: 443, Reason: ReasonNotAllowed}, at)
	e.Seq, denied.Seq = 1, 2
	if got := usage.Session([]record.Entry{e, denied}); got.EgressBytes != 2100 || denied.Verdict != record.VerdictDenied {
		t.Errorf("session's egress bytes %d (denied verdict %q), want 2100", got.EgressBytes, denied.Verdict)
	}
}
