package tracecheck

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/e2e/internal/jaeger"
	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/recordtrace"
	"github.com/airlock-dev/airlock/pkg/tracing"
)

const (
	traceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
	root     = "00f067aa0ba902b7"
	acquire  = "a0a0a0a0a0a0a0a0"
	call1    = "c1c1c1c1c1c1c1c1"
	call2    = "c2c2c2c2c2c2c2c2"
	file1    = "f1f1f1f1f1f1f1f1"
	proc2    = "d2d2d2d2d2d2d2d2"
	sync1    = "5151515151515151"
	sync2    = "5252525252525252"
	claimUID = "uid-1"
)

var t0 = time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)

// builder makes a jaeger.Trace by hand: a process per service.
type builder struct{ tr jaeger.Trace }

func newTrace() *builder {
	return &builder{tr: jaeger.Trace{Processes: map[string]jaeger.Process{}}}
}

func (b *builder) span(id, name, service, parent string, tags ...any) *builder {
	b.tr.Processes[service] = jaeger.Process{ServiceName: service}
	s := jaeger.Span{TraceID: traceID, SpanID: id, OperationName: name, ProcessID: service}
	if parent != "" {
		s.References = []jaeger.Reference{{RefType: "CHILD_OF", SpanID: parent}}
	}
	for i := 0; i+1 < len(tags); i += 2 {
		s.Tags = append(s.Tags, jaeger.KeyValue{Key: tags[i].(string), Value: tags[i+1]})
	}
	b.tr.Spans = append(b.tr.Spans, s)
	return b
}

func (b *builder) without(id string) *builder {
	b.tr.Spans = slices.DeleteFunc(b.tr.Spans, func(s jaeger.Span) bool { return s.SpanID == id })
	return b
}

func syncSpan(b *builder, id, parent, uid string, attempt int, failed bool) *builder {
	tags := []any{"airlock.claim.uid", uid, "airlock.syncback.attempt", attempt}
	if failed {
		tags = append(tags, "otel.status_code", "ERROR", "error", true)
	}
	return b.span(id, "syncback", tracing.ServiceOperator, parent, tags...)
}

func isRoot(p string) bool { return p == root }

func TestSyncBacks(t *testing.T) {
	base := func() *builder { return newTrace().span(root, "acquire s", "runtime", "") }
	tests := map[string]struct {
		tr       *builder
		mayLose  bool
		wantWhy  string // a part of why; "" for ok
		wantN    int
		wantLost []int
	}{
		"one attempt, ended well":            {tr: syncSpan(base(), sync1, root, claimUID, 1, false), wantN: 1},
		"a failed attempt, then one ok":      {tr: syncSpan(syncSpan(base(), sync1, root, claimUID, 1, true), sync2, root, claimUID, 2, false), wantN: 2},
		"none":                               {tr: base(), wantWhy: "no syncback span"},
		"parented elsewhere":                 {tr: syncSpan(base(), sync1, "ffffffffffffffff", claimUID, 1, false), wantWhy: "parented on"},
		"another claim's":                    {tr: syncSpan(base(), sync1, root, "uid-2", 1, false), wantWhy: "of claim UID"},
		"an attempt twice (two leaders)":     {tr: syncSpan(syncSpan(base(), sync1, root, claimUID, 1, false), sync2, root, claimUID, 1, false), wantWhy: "two syncback spans"},
		"the last failed (not finished yet)": {tr: syncSpan(base(), sync1, root, claimUID, 1, true), wantWhy: "failed true"},
		"an earlier one ended well":          {tr: syncSpan(syncSpan(base(), sync1, root, claimUID, 1, false), sync2, root, claimUID, 2, false), wantWhy: "attempt 1 of 2: failed false"},
		"attempt 1 missing":                  {tr: syncSpan(base(), sync2, root, claimUID, 2, false), wantWhy: "attempt 1 is missing"},
		"attempt 1 missing, may be lost":     {tr: syncSpan(base(), sync2, root, claimUID, 2, false), mayLose: true, wantN: 1, wantLost: []int{1}},
		"none, may be lost: still required":  {tr: base(), mayLose: true, wantWhy: "no syncback span"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			spans, lost, why := SyncBacks(tc.tr.tr, claimUID, isRoot, tc.mayLose)
			if tc.wantWhy == "" {
				if why != "" || len(spans) != tc.wantN || !slices.Equal(lost, tc.wantLost) {
					t.Errorf("spans %v lost %v why %q, want %d spans, lost %v", spans, lost, why, tc.wantN, tc.wantLost)
				}
				return
			}
			if !strings.Contains(why, tc.wantWhy) {
				t.Errorf("why %q, want it to say %q", why, tc.wantWhy)
			}
		})
	}
}

func TestAcquire(t *testing.T) {
	base := func() *builder {
		return newTrace().span(root, "acquire s", "runtime", "").
			span(acquire, "acquire", tracing.ServiceOperator, root, "http.response.status_code", 200).
			span("b1b1b1b1b1b1b1b1", "binding", tracing.ServiceOperator, acquire)
	}
	tests := map[string]struct {
		tr      *builder
		status  int
		wantWhy string
	}{
		"its acquire span under the caller's": {tr: base(), status: 200},
		"another status":                      {tr: base(), status: 202, wantWhy: `says status "200"`},
		"none":                                {tr: base().without(acquire).without("b1b1b1b1b1b1b1b1"), status: 200, wantWhy: "0 acquire spans"},
		"two":                                 {tr: base().span("a1a1a1a1a1a1a1a1", "acquire", tracing.ServiceOperator, root), status: 200, wantWhy: "2 acquire spans"},
		"parented elsewhere": {tr: newTrace().span(root, "acquire s", "runtime", "").
			span(acquire, "acquire", tracing.ServiceOperator, "ffffffffffffffff", "http.response.status_code", 200), status: 200, wantWhy: "not on the caller's span"},
		"a child parented elsewhere": {tr: base().span("b2b2b2b2b2b2b2b2", "binding", tracing.ServiceOperator, "ffffffffffffffff"), status: 200, wantWhy: "neither the caller's nor the acquire's"},
		"no root":                    {tr: base().without(root), status: 200, wantWhy: "not the trace's root"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ok, why := Acquire(tc.tr.tr, root, tc.status)
			if tc.wantWhy == "" {
				if !ok {
					t.Errorf("not ok: %s", why)
				}
				return
			}
			if ok || !strings.Contains(why, tc.wantWhy) {
				t.Errorf("ok %v why %q, want it to say %q", ok, why, tc.wantWhy)
			}
		})
	}
}

func exit(n int) *int { return &n }

// entries is a record of two boots of sandboxd: a Write of a.txt (boot b1) and, after the cut, a
// Bash whose process ran (boot b2), each call traced under the root.
func entries() []record.Entry {
	at := func(d time.Duration) string { return record.FormatTime(t0.Add(d)) }
	return []record.Entry{
		{Seq: 1, Kind: record.KindClaimPhase, Time: at(0), Phase: "Bound"},
		{Seq: 2, Kind: record.KindFileWrite, Boot: "b1", Call: 1, Trace: traceID, Span: file1, Parent: call1, Time: at(time.Second), Path: "a.txt"},
		{Seq: 3, Kind: record.KindToolCall, Boot: "b1", Call: 1, Trace: traceID, Span: call1, Parent: root, Time: at(time.Second), Tool: "Write", Status: record.StatusOK, DurationMS: 5},
		{Seq: 4, Kind: record.KindRecordGap, Time: at(10 * time.Second), Message: "sandboxd boot b1 ended without its stopped entry"},
		{Seq: 5, Kind: record.KindProcess, Boot: "b2", Call: 1, Trace: traceID, Span: proc2, Parent: call2, Time: at(20 * time.Second), Argv: []string{"bash"}, Exit: exit(0), DurationMS: 100},
		{Seq: 6, Kind: record.KindToolCall, Boot: "b2", Call: 1, Trace: traceID, Span: call2, Parent: root, Time: at(19 * time.Second), Tool: "Bash", Status: record.StatusOK, DurationMS: 2000},
	}
}

// whole is the trace of entries' session, as Jaeger holds it when nothing is missing.
func whole() *builder {
	b := newTrace().span(root, "session k1", "runtime", "").
		span(acquire, "acquire", tracing.ServiceOperator, root, "airlock.claim", "ns/c1").
		span(call1, "tools/call Write", recordtrace.Service, root).
		span(file1, "file.write", recordtrace.Service, call1).
		span(call2, "tools/call Bash", recordtrace.Service, root).
		span(proc2, "process", recordtrace.Service, call2)
	return syncSpan(b, sync1, acquire, claimUID, 1, false)
}

func session() Session {
	return Session{TraceID: traceID, Root: root, Claim: "ns/c1", ClaimUID: claimUID, Entries: entries(), SyncBack: true}
}

func TestSession(t *testing.T) {
	tests := map[string]struct {
		tr        *builder
		s         func(*Session)
		wantWhy   string
		wantLost  int
		wantTwice int
	}{
		"the whole trace: both boots' calls, their file and process, acquire, sync-back": {tr: whole()},
		"a call's span missing":       {tr: whole().without(call2), wantWhy: "no span " + call2},
		"a file.write's span missing": {tr: whole().without(file1), wantWhy: "no span " + file1},
		"a process parented elsewhere": {tr: whole().without(proc2).span(proc2, "process", recordtrace.Service, call1),
			wantWhy: "the record says \"" + call2 + "\""},
		"a span of sandboxd the record does not name (invented)": {tr: whole().span("eeeeeeeeeeeeeeee", "tools/call Write", recordtrace.Service, root), wantWhy: "invented"},
		"a call exported by another service":                     {tr: whole().without(call1).span(call1, "tools/call Write", tracing.ServiceOperator, root), wantWhy: "want " + recordtrace.Service},
		"no acquire span":                                        {tr: whole().without(acquire).without(sync1), s: func(s *Session) { s.SyncBack = false }, wantWhy: "no acquire span"},
		"an acquire span of another claim":                       {tr: whole().span("a1a1a1a1a1a1a1a1", "acquire", tracing.ServiceOperator, root, "airlock.claim", "ns/c2"), wantWhy: "of claim \"ns/c2\""},
		"no syncback span":                                       {tr: whole().without(sync1), wantWhy: "no syncback span"},
		"no syncback span, none required":                        {tr: whole().without(sync1), s: func(s *Session) { s.SyncBack = false }},
		"the syncback span under the root, not an acquire span":  {tr: syncSpan(whole().without(sync1), sync1, root, claimUID, 1, false), wantWhy: "not on the claim's acquire span"},
		"no root": {tr: whole().without(root), wantWhy: "not the trace's root"},
		"a call of the record without a span": {tr: whole(), s: func(s *Session) { s.Entries[2].Span, s.Entries[2].Trace = "", "" },
			wantWhy: "has no span"},
		"a call of the record in another trace": {tr: whole(), s: func(s *Session) { s.Entries[2].Trace = "0123456789abcdef0123456789abcdef" }, wantWhy: "not the session's"},
		"a call of the record under another parent": {tr: whole(), s: func(s *Session) { s.Entries[2].Parent = "ffffffffffffffff" },
			wantWhy: "not on the runtime's span"},
		"no record: sandboxd's spans not judged": {tr: whole().without(call2), s: func(s *Session) { s.Entries = nil }},
		// A leader killed at t0+21.5s: what ended in its last batch may be missing.
		"the Bash call and its process lost with a killed leader": {tr: whole().without(call2).without(proc2),
			s: func(s *Session) { s.LossFrom, s.LossTo = t0.Add(6500*time.Millisecond), t0.Add(21500*time.Millisecond) }, wantLost: 2},
		"a call that ended before the loss window is still required": {tr: whole().without(call1),
			s:       func(s *Session) { s.LossFrom, s.LossTo = t0.Add(6500*time.Millisecond), t0.Add(21500*time.Millisecond) },
			wantWhy: "no span " + call1},
		"the acquire lost with the killed replica, for a session active then": {tr: syncSpan(whole().without(acquire).without(sync1), sync1, acquire, claimUID, 1, false),
			s: func(s *Session) { s.LossFrom, s.LossTo = t0.Add(15*time.Second), t0.Add(25*time.Second) }, wantLost: 1},
		"the acquire missing for a session not active then": {tr: syncSpan(whole().without(acquire).without(sync1), sync1, acquire, claimUID, 1, false),
			s: func(s *Session) { s.LossFrom, s.LossTo = t0.Add(time.Hour), t0.Add(2*time.Hour) }, wantWhy: "no acquire span"},
		"a sync-back attempt lost across the kill": {tr: syncSpan(whole().without(sync1), sync2, acquire, claimUID, 2, false),
			s: func(s *Session) { s.SyncBackAcrossKill = true }, wantLost: 1},
		"a call exported twice":     {tr: whole().span(call1, "tools/call Write", recordtrace.Service, root), wantWhy: "twice"},
		"an acquire exported twice": {tr: whole().span(acquire, "acquire", tracing.ServiceOperator, root, "airlock.claim", "ns/c1"), wantWhy: "twice"},
		"a call exported twice by the killed leader and the new one": {tr: whole().span(call2, "tools/call Bash", recordtrace.Service, root),
			s: func(s *Session) { s.LossFrom, s.LossTo = t0.Add(6500*time.Millisecond), t0.Add(21500*time.Millisecond) }, wantTwice: 1},
		"a sync-back attempt missing, no kill across it": {tr: syncSpan(whole().without(sync1), sync2, acquire, claimUID, 2, false), wantWhy: "attempt 1 is missing"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := session()
			if tc.s != nil {
				tc.s(&s)
			}
			res, ok, why := s.Check(tc.tr.tr)
			if tc.wantWhy == "" {
				if !ok || len(res.Lost) != tc.wantLost || len(res.Twice) != tc.wantTwice {
					t.Errorf("ok %v why %q lost %v twice %v, want ok with %d lost, %d twice", ok, why, res.Lost, res.Twice, tc.wantLost, tc.wantTwice)
				}
				return
			}
			if ok || !strings.Contains(why, tc.wantWhy) {
				t.Errorf("ok %v why %q, want it to say %q", ok, why, tc.wantWhy)
			}
		})
	}
	res, ok, _ := session().Check(whole().tr)
	if !ok || res.Calls != 2 || res.Acquires != 1 || res.Sync != 1 {
		t.Errorf("the whole trace: %+v %v, want 2 calls, 1 acquire, 1 sync-back", res, ok)
	}
}
