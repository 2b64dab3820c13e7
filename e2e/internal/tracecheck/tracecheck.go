// Package tracecheck is what the e2e tests require of airlock's trace under the fault suite
// (docs/record.md §1, "Faults"), judged on one query's answer of the real Jaeger
// (e2e/internal/jaeger): a claim's sync-back spans, an acquire's span, and a session's whole
// trace against its verified record. Pure: tested here against traces made by hand, so that the
// checks the real-node suite runs (which cannot run on every machine) are known to fail when
// what they check is missing.
package tracecheck

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/airlock-dev/airlock/e2e/internal/jaeger"
	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/recordtrace"
	"github.com/airlock-dev/airlock/pkg/tracing"
)

// SyncBacks checks the sync-back spans in tr: every "syncback" span of the operator is of the
// claim claimUID and parented on a span parentOK accepts; one per attempt (an attempt with two
// spans, exported by two leaders, is an error); the attempts 1..n, every one but the last failed
// and the last ended well. With mayLose, an attempt may be missing (its span lost with a killed
// leader's unexported batch), not the last: the missing ones are returned in lost. It returns the
// spans' indexes in attempt order, or why the spans are not (yet) as required.
func SyncBacks(tr jaeger.Trace, claimUID string, parentOK func(spanID string) bool, mayLose bool) (spans []int, lost []int, why string) {
	byAttempt := map[int]int{}
	for i, s := range tr.Spans {
		if s.OperationName != "syncback" || tr.Service(i) != tracing.ServiceOperator {
			continue
		}
		if got := tr.Tag(i, "airlock.claim.uid"); got != claimUID {
			return nil, nil, fmt.Sprintf("syncback span %s is of claim UID %q, want %s", s.SpanID, got, claimUID)
		}
		if !parentOK(tr.Parent(i)) {
			return nil, nil, fmt.Sprintf("syncback span %s is parented on %q, not on the claim's acquire span", s.SpanID, tr.Parent(i))
		}
		attempt, err := strconv.Atoi(tr.Tag(i, "airlock.syncback.attempt"))
		if err != nil || attempt < 1 {
			return nil, nil, fmt.Sprintf("syncback span %s has attempt %q", s.SpanID, tr.Tag(i, "airlock.syncback.attempt"))
		}
		if j, dup := byAttempt[attempt]; dup {
			return nil, nil, fmt.Sprintf("attempt %d has two syncback spans, %s and %s", attempt, tr.Spans[j].SpanID, s.SpanID)
		}
		byAttempt[attempt] = i
	}
	if len(byAttempt) == 0 {
		return nil, nil, "no syncback span"
	}
	attempts := slices.Sorted(maps.Keys(byAttempt))
	last := attempts[len(attempts)-1]
	for a := 1; a <= last; a++ {
		i, ok := byAttempt[a]
		switch {
		case !ok && !mayLose:
			return nil, nil, fmt.Sprintf("syncback spans of attempts %v: attempt %d is missing", attempts, a)
		case !ok:
			lost = append(lost, a)
		case tr.Failed(i) != (a != last):
			return nil, nil, fmt.Sprintf("attempt %d of %d: failed %v (every attempt but the last fails, the last succeeds)", a, last, tr.Failed(i))
		default:
			spans = append(spans, i)
		}
	}
	return spans, lost, ""
}

// Acquire checks the trace of one acquire request made under the caller's span: the caller's span
// its root, exactly one "acquire" span of the operator, under it, saying the HTTP status the
// caller was answered; every other span (admission.wait, binding, isolation.evidence) under that
// acquire span, none parented elsewhere.
func Acquire(tr jaeger.Trace, caller string, status int) (bool, string) {
	if i := tr.Find(caller); i < 0 || tr.Parent(i) != "" {
		return false, fmt.Sprintf("the caller's span %s is not the trace's root", caller)
	}
	var acquires []int
	for i, s := range tr.Spans {
		if s.OperationName == "acquire" && tr.Service(i) == tracing.ServiceOperator {
			acquires = append(acquires, i)
		}
	}
	if len(acquires) != 1 {
		return false, fmt.Sprintf("%d acquire spans of %s, want 1 (one request)", len(acquires), tracing.ServiceOperator)
	}
	acq := acquires[0]
	if tr.Parent(acq) != caller {
		return false, fmt.Sprintf("the acquire span is parented on %q, not on the caller's span %s", tr.Parent(acq), caller)
	}
	if got := tr.Tag(acq, "http.response.status_code"); got != strconv.Itoa(status) {
		return false, fmt.Sprintf("the acquire span says status %q; the caller was answered %d", got, status)
	}
	for i, s := range tr.Spans {
		if i != acq && s.SpanID != caller && tr.Parent(i) != tr.Spans[acq].SpanID {
			return false, fmt.Sprintf("span %s %q is parented on %q, neither the caller's nor the acquire's span", s.SpanID, s.OperationName, tr.Parent(i))
		}
	}
	return true, ""
}

// Session is what a runtime's session traced under one root span must show in its trace.
type Session struct {
	// TraceID and Root are the runtime's span, the trace's root, whose traceparent the session
	// sent on every Sandbox API request and in every tool call's params._meta.
	TraceID, Root string
	// Claim (namespace/name) and ClaimUID are the session's claim.
	Claim, ClaimUID string
	// Entries is the claim's verified record (nil: the record is not checked, e.g. it went with
	// its runtime).
	Entries []record.Entry
	// SyncBack: the claim was synced back, so its syncback spans are required.
	SyncBack bool
	// LossFrom and LossTo, when set, bound the spans a killed leader (and its replica's Sandbox
	// API) may have had in its unexported batch: a span of an entry that ended between them may
	// be missing, and so may, for a session with such an entry, its acquire spans. Nothing else
	// may be missing.
	LossFrom, LossTo time.Time
	// SyncBackAcrossKill: the leader was killed while the claim's sync-back ran, so the attempt
	// it ended (if it did, in its last moments) may lack its span (SyncBacks' mayLose).
	SyncBackAcrossKill bool
}

// Result is what Check found: the spans that may have been lost and were, those that may have
// been exported twice and were, and counts to log.
type Result struct {
	Lost, Twice           []string
	Acquires, Calls, Sync int
}

// Check judges tr, one query's answer for s.TraceID: the root; at least one acquire span of the
// operator, all under the root; every span the record's entries name (tool.call, file.write,
// process: the ids sandboxd drew), of the session's trace, with the parent the entry names (a
// call's: the root), exported as sandboxd's, once; no span of sandboxd the record does not name
// (nothing invented, e.g. of a part of the record a cut lost); the syncback spans (SyncBacks)
// under an acquire span of the trace. It returns ok false and why while anything is missing or
// wrong.
func (s Session) Check(tr jaeger.Trace) (Result, bool, string) {
	var res Result
	if i := tr.Find(s.Root); i < 0 || tr.Parent(i) != "" {
		return res, false, fmt.Sprintf("the runtime's span %s is not the trace's root", s.Root)
	}
	named, active, why := s.entrySpans(tr, &res)
	if why == "" {
		why = s.onceAndNotInvented(tr, named, &res)
	}
	var acquires map[string]bool
	if why == "" {
		acquires, why = s.acquireSpans(tr, active, &res)
	}
	if why == "" && s.SyncBack {
		// The acquire that created the claim (whose span the claim names) may be one whose span
		// was lost with the killed leader's replica, when the session was active then.
		parentOK := func(p string) bool { return acquires[p] || active && p != "" && tr.Find(p) < 0 }
		var spans, lost []int
		spans, lost, why = SyncBacks(tr, s.ClaimUID, parentOK, s.SyncBackAcrossKill)
		for _, a := range lost {
			res.Lost = append(res.Lost, fmt.Sprintf("syncback attempt %d", a))
		}
		res.Sync = len(spans)
	}
	return res, why == "", why
}

// lossy says whether a span that ended at end may have been lost with a killed leader.
func (s Session) lossy(end time.Time) bool {
	return !s.LossTo.IsZero() && !end.Before(s.LossFrom) && !end.After(s.LossTo)
}

// entrySpans finds the span of every record entry that names one, as Check says; it returns the
// entries by span id, and whether the session had a span in the loss window (active then).
func (s Session) entrySpans(tr jaeger.Trace, res *Result) (named map[string]record.Entry, active bool, why string) {
	named = map[string]record.Entry{}
	for _, e := range s.Entries {
		if e.Kind != record.KindToolCall && e.Kind != record.KindFileWrite && e.Kind != record.KindProcess {
			continue
		}
		if e.Span == "" {
			if e.Kind == record.KindToolCall {
				return nil, false, fmt.Sprintf("entry %d (tool.call %s) has no span: the session's traceparent did not reach the call", e.Seq, e.Tool)
			}
			continue
		}
		if e.Trace != s.TraceID {
			return nil, false, fmt.Sprintf("entry %d (%s) is of trace %q, not the session's %s", e.Seq, e.Kind, e.Trace, s.TraceID)
		}
		if e.Kind == record.KindToolCall && e.Parent != s.Root {
			return nil, false, fmt.Sprintf("entry %d (tool.call %s) is parented on %q, not on the runtime's span %s", e.Seq, e.Tool, e.Parent, s.Root)
		}
		named[e.Span] = e
		stub, ok := recordtrace.Span(recordtrace.Claim{}, e)
		if !ok {
			return nil, false, fmt.Sprintf("entry %d (%s) names span %s that is not one", e.Seq, e.Kind, e.Span)
		}
		lossy := s.lossy(stub.EndTime)
		active = active || lossy
		i := tr.Find(e.Span)
		switch {
		case i < 0 && lossy:
			res.Lost = append(res.Lost, fmt.Sprintf("entry %d %s span %s (ended %s)", e.Seq, e.Kind, e.Span, stub.EndTime.Format(time.RFC3339Nano)))
			continue
		case i < 0:
			return nil, false, fmt.Sprintf("no span %s of entry %d (%s %s%s)", e.Span, e.Seq, e.Kind, e.Tool, e.Path)
		case tr.Service(i) != recordtrace.Service:
			return nil, false, fmt.Sprintf("span %s of entry %d is of %s, want %s", e.Span, e.Seq, tr.Service(i), recordtrace.Service)
		case tr.Parent(i) != e.Parent:
			return nil, false, fmt.Sprintf("span %s of entry %d (%s) is parented on %q; the record says %q", e.Span, e.Seq, e.Kind, tr.Parent(i), e.Parent)
		}
		if e.Kind == record.KindToolCall {
			res.Calls++
		}
	}
	return named, active, ""
}

// onceAndNotInvented: no span twice, but an entry's in the loss window (a new leader reads again,
// from the stored cursor, what the killed one had read, exported and not stored: within a second
// of the kill); and, when the record is judged, no span of sandboxd that no entry names.
func (s Session) onceAndNotInvented(tr jaeger.Trace, named map[string]record.Entry, res *Result) string {
	seen := map[string]bool{}
	for _, sp := range tr.Spans {
		if !seen[sp.SpanID] {
			seen[sp.SpanID] = true
			continue
		}
		e, ok := named[sp.SpanID]
		if !ok {
			return fmt.Sprintf("span %s %q is in the trace twice", sp.SpanID, sp.OperationName)
		}
		if stub, _ := recordtrace.Span(recordtrace.Claim{}, e); !s.lossy(stub.EndTime) {
			return fmt.Sprintf("span %s of entry %d (%s) is in the trace twice", sp.SpanID, e.Seq, e.Kind)
		}
		res.Twice = append(res.Twice, fmt.Sprintf("entry %d %s span %s", e.Seq, e.Kind, sp.SpanID))
	}
	for i, sp := range tr.Spans {
		if _, ok := named[sp.SpanID]; s.Entries != nil && tr.Service(i) == recordtrace.Service && !ok {
			return fmt.Sprintf("span %s %q of %s is named by no entry of the record: invented", sp.SpanID, sp.OperationName, recordtrace.Service)
		}
	}
	return ""
}

// acquireSpans finds the operator's acquire spans, all under the root and of the session's claim,
// at least one (unless the session was active when a leader was killed: then they may be lost).
func (s Session) acquireSpans(tr jaeger.Trace, active bool, res *Result) (map[string]bool, string) {
	acquires := map[string]bool{}
	for i, sp := range tr.Spans {
		if sp.OperationName != "acquire" || tr.Service(i) != tracing.ServiceOperator {
			continue
		}
		if tr.Parent(i) != s.Root {
			return nil, fmt.Sprintf("acquire span %s is parented on %q, not on the runtime's span %s", sp.SpanID, tr.Parent(i), s.Root)
		}
		if c := tr.Tag(i, "airlock.claim"); c != "" && c != s.Claim {
			return nil, fmt.Sprintf("acquire span %s is of claim %q, want %s", sp.SpanID, c, s.Claim)
		}
		acquires[sp.SpanID] = true
	}
	res.Acquires = len(acquires)
	switch {
	case len(acquires) == 0 && active:
		res.Lost = append(res.Lost, "the acquire spans")
	case len(acquires) == 0:
		return nil, fmt.Sprintf("no acquire span of %s under the runtime's span %s", tracing.ServiceOperator, s.Root)
	}
	return acquires, ""
}
