//go:build e2e && realnode

package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-dev/airlock/e2e/internal/jaeger"
	"github.com/airlock-dev/airlock/e2e/internal/tracecheck"
	"github.com/airlock-dev/airlock/pkg/record"
)

// The trace in TestRealNodeFaultSuite (issue 42, docs/record.md §1, "Faults"): each session runs
// under a sampled root span of its own that the test exports (as a runtime would, as
// TestRealNodeTrace does) to the suite's Jaeger, and at the suite's end one query of each trace
// finds what the session's verified record names.

// sessionTraces are the suite's sessions' root spans, by session name.
type sessionTraces struct {
	query  string
	traces *runtimeTraces
	roots  map[string]trace.Span
	tps    map[string]string
}

// newSessionTraces exports to the collector hack/e2e-node.sh started; nil (the suite runs
// untraced, saying so) when it started none.
func newSessionTraces(t *testing.T) *sessionTraces {
	t.Helper()
	query, otlp, ok := suiteCollector()
	if !ok {
		t.Logf("no trace collector (%s unset: hack/e2e-node.sh starts one with the chart's install, and on a cluster of AIRLOCK_E2E_USE_KUBECONFIG only with AIRLOCK_E2E_JAEGER_HOST): the sessions run untraced, their trace is not checked", envJaegerQuery)
		return nil
	}
	return &sessionTraces{query: query, traces: newRuntimeTraces(t, otlp), roots: map[string]trace.Span{}, tps: map[string]string{}}
}

// traceparent is the session's root span's traceparent, the span started on the session's first
// run.
func (s *sessionTraces) traceparent(t *testing.T, session string) string {
	t.Helper()
	if _, ok := s.roots[session]; !ok {
		s.roots[session], s.tps[session] = s.traces.start(t, "session "+session)
	}
	return s.tps[session]
}

// end ends the session's root span (its close).
func (s *sessionTraces) end(session string) {
	if span, ok := s.roots[session]; ok {
		span.End()
	}
}

// leaderKilled is when the suite killed the leader operator pod, and during whose sync-back
// (zero: it did not).
type leaderKilled struct {
	at     time.Time
	during *faultSession
}

// How far around a leader's kill its spans may be lost: the batch it had not exported (the SDK
// exports every 5 s, an export may take up to 10 s) and what it collected in the seconds the
// kubelet gives a pod deleted with grace 0 before it kills it.
const (
	lossBeforeKill = 15 * time.Second
	lossAfterKill  = 5 * time.Second
)

// checkTraces: for every session of the suite, one query of Jaeger by its trace id holds
// (tracecheck.Session) its root span; the Sandbox API's acquire span(s) under it; every span its
// verified record names (each tool call, and the file.write and process entries of a call, of
// both boots of the killed sandbox's session, with the parent the record says) and no span of
// sandboxd the record does not name (nothing of the part a cut lost is invented); and, for every
// session synced back (the deleted runtime's excepted), its syncback span(s) under its acquire
// span, one per attempt, the last one ended well: for a3 those of the attempts that ran across the
// leader's kill, exported by the new leader. Spans of the killed leader's last batch (and its
// replica's acquire spans then) may be missing, and spans the new leader read again after the
// killed one had exported them may show twice: both listed; nothing else may be missing or twice.
func (r *faultRealnode) checkTraces(records map[*faultSession]sessionRecord, killed killedSandbox, kill leaderKilled, syncLostWithRuntime string) {
	t := r.t
	t.Helper()
	if r.traces == nil {
		t.Log("trace: not checked (no trace collector)")
		return
	}
	r.traces.traces.flush(t)
	checks := map[string]traceCheck{}
	found := map[string]tracecheck.Result{}
	ids := map[*faultSession]string{}
	for _, s := range r.sessions {
		root, ok := r.traces.roots[s.name]
		if !ok {
			t.Errorf("session %s ran without a root span", s.name)
			continue
		}
		rec := records[s]
		want := tracecheck.Session{
			TraceID: root.SpanContext().TraceID().String(), Root: root.SpanContext().SpanID().String(),
			Claim: r.e.ns + "/" + s.claim, Entries: rec.entries,
			SyncBack: s.runtime != syncLostWithRuntime && len(rec.uids) == 1,
		}
		if len(rec.uids) == 1 {
			want.ClaimUID = rec.uids[0]
		} else if s.runtime != syncLostWithRuntime {
			t.Logf("session %s: %d claims of its name (%v): its syncback spans are not checked", s.name, len(rec.uids), rec.uids)
		}
		if !kill.at.IsZero() {
			want.LossFrom, want.LossTo = kill.at.Add(-lossBeforeKill), kill.at.Add(lossAfterKill)
			want.SyncBackAcrossKill = s == kill.during
		}
		ids[s] = want.TraceID
		checks[want.TraceID] = func(tr jaeger.Trace) (bool, string) {
			res, ok, why := want.Check(tr)
			if ok {
				found[want.TraceID] = res
			}
			return ok, why
		}
	}
	failed := waitTraces(r.traces.query, checks, 3*time.Minute)
	for _, s := range r.sessions {
		id, ok := ids[s]
		if !ok {
			continue
		}
		if why, bad := failed[id]; bad {
			t.Errorf("session %s (claim %s): its trace %s in Jaeger (%s/api/traces/%s): %s\nservices Jaeger has spans of: %s",
				s.name, s.claim, id, r.traces.query, id, why, jaeger.Services(r.traces.query))
			continue
		}
		res := found[id]
		t.Logf("session %s: trace %s: %d acquire spans, %d tool calls with their files and processes, %d syncback spans; lost with the killed leader: %v; exported twice across the kill: %v",
			s.name, id, res.Acquires, res.Calls, res.Sync, res.Lost, res.Twice)
		if s == kill.during && res.Sync == 0 {
			t.Errorf("session %s: the leader was killed during its sync-back, and no syncback span of the new leader is in its trace", s.name)
		}
	}
	// The killed sandbox's session: calls of both boots are in its record with their spans (the
	// trace check above found each of them).
	if k := killed.session; k != nil {
		var boots []string
		for _, e := range records[k].entries {
			if e.Kind == record.KindToolCall && e.Span != "" && !slices.Contains(boots, e.Boot) {
				boots = append(boots, e.Boot)
			}
		}
		if len(boots) < 2 {
			t.Errorf("session %s (its sandbox killed): traced calls of boots %v in its record, want calls of the killed boot and of the one after", k.name, boots)
		} else {
			t.Logf("session %s (its sandbox killed): traced calls of boots %s", k.name, strings.Join(boots, " and "))
		}
	}
}
