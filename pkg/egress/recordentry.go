package egress

import (
	"time"

	"github.com/airlock-dev/airlock/pkg/record"
)

// RecordEntry is the session record's entry of one exchange (docs/record.md §2.3, §3): the
// gateway's `egress` entry, with the bytes it moved both ways as its usage. The gateway's feed
// of these entries to the leader (GET /decisions) is designed, not built; this is what it will
// serve, and what pkg/usage counts a claim's egress bytes from.
func RecordEntry(r Record, at time.Time) record.Entry {
	verdict := record.VerdictDenied
	if r.Allowed {
		verdict = record.VerdictAllowed
	}
	return record.Entry{
		Time: record.FormatTime(at), Source: record.SourceGateway, Kind: record.KindEgress,
		Host: r.Host, Port: int(r.Port), Verdict: verdict, Reason: string(r.Reason), DurationMS: r.Duration.Milliseconds(),
		Usage: &record.Usage{EgressBytes: r.BytesUp + r.BytesDown},
	}
}
