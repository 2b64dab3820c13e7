package sandboxd

import (
	"context"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/recordlog"
	"github.com/airlock-dev/airlock/pkg/traceparent"
)

// callRecorder is one tool call's toolcall.Recorder: it appends the call's files and processes
// to the session's log (docs/record.md §2.3), each with the call's number.
type callRecorder struct {
	log   *recordlog.Log
	call  uint64
	trace callTrace
}

// FileWritten appends a file.write entry; when the call is traced, the entry is a span of its
// own (a random id) whose parent is the call's span.
func (r callRecorder) FileWritten(path string, content []byte) {
	size := int64(len(content))
	e := record.Entry{Kind: record.KindFileWrite, Call: r.call, Path: path, Size: &size, SHA256: record.SumHex(content)}
	if r.trace.traced {
		e.Trace, e.Span, e.Parent = r.trace.ids(traceparent.NewSpanID(), r.trace.span)
	}
	r.log.Append(e)
}

// ProcessEnded appends a process entry, written when it ends with its duration; when the call is
// traced, a span of its own whose parent is the call's span (the process itself was given
// TRACEPARENT of the call's span: processEnv).
func (r callRecorder) ProcessEnded(argv []string, exit int, elapsed time.Duration) {
	e := record.Entry{Kind: record.KindProcess, Call: r.call, Argv: argv, Exit: &exit, DurationMS: elapsed.Milliseconds()}
	if r.trace.traced {
		e.Trace, e.Span, e.Parent = r.trace.ids(traceparent.NewSpanID(), r.trace.span)
	}
	r.log.Append(e)
}

// recordCall appends the tool.call entry of a finished call: written when it ends, after its
// files and processes, with the time it started.
func recordCall(log *recordlog.Log, call uint64, tool string, req mcp.Request, status string, start time.Time, elapsed time.Duration, trace callTrace) {
	var args []byte
	if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok {
		args = p.Arguments
	}
	e := record.Entry{Time: record.FormatTime(start), Kind: record.KindToolCall, Call: call, Tool: tool,
		ArgsSHA256: record.SumHex(args), Status: status, DurationMS: elapsed.Milliseconds()}
	e.Trace, e.Span, e.Parent = trace.ids(trace.span, trace.parent)
	log.Append(e)
}

// endRecord ends the session's log at a shutdown: once the calls in flight have returned (they
// record themselves as they end) or ctx ends, it appends the stopped entry, which ends the
// operator's stream before the HTTP server waits for its connections. The call gate is held
// from then on, as the operator's stop holds it.
func (s *server) endRecord(ctx context.Context) {
	if s.record == nil {
		return // options.withoutRecord: nothing to end
	}
	if s.record.Stopped() {
		return // the operator's stop ended it, and holds the gate
	}
	if _, err := s.gate.Enter(ctx, true); err != nil {
		s.logger.Error(err, "Tool calls still ran when the session's record was ended; their entries are lost")
	}
	s.record.Stop()
}
