package egress

import (
	"time"

	"github.com/airlock-dev/airlock/pkg/record"
)

// RecordEntry is the session record's entry of one exchange (docs/record.md §2.3, §3): the
// gateway's `egress` entry, with the bytes it moved both ways as its usage, the name of the
// credential a rule injected (never its value) and the span the proxy user name named. The
// gateway's DecisionLog keeps these per claim for the leader (GET /decisions), and pkg/usage
// counts a claim's egress bytes from them.
func RecordEntry(r Record, at time.Time) record.Entry {
	verdict := record.VerdictDenied
	if r.Allowed {
		verdict = record.VerdictAllowed
	}
	return record.Entry{
		Time: record.FormatTime(at), Source: record.SourceGateway, Kind: record.KindEgress,
		Host: r.Host, Port: int(r.Port), Verdict: verdict, Reason: string(r.Reason), DurationMS: r.Duration.Milliseconds(),
		Credential: r.Credential, Trace: r.Trace, Parent: r.Parent,
		Usage: &record.Usage{EgressBytes: r.BytesUp + r.BytesDown},
	}
}
