package sandboxd

import (
	"context"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/recordlog"
)

// callRecorder is one tool call's toolcall.Recorder: it appends the call's files and processes
// to the session's log (docs/record.md §2.3), each with the call's number.
type callRecorder struct {
	log  *recordlog.Log
	call uint64
}

func (r callRecorder) FileWritten(path string, content []byte) {
	size := int64(len(content))
	r.log.Append(record.Entry{Kind: record.KindFileWrite, Call: r.call, Path: path, Size: &size, SHA256: record.SumHex(content)})
}

func (r callRecorder) ProcessEnded(argv []string, exit int, elapsed time.Duration) {
	r.log.Append(record.Entry{Kind: record.KindProcess, Call: r.call, Argv: argv, Exit: &exit, DurationMS: elapsed.Milliseconds()})
}

// recordCall appends the tool.call entry of a finished call: written when it ends, after its
// files and processes, with the time it started.
func recordCall(log *recordlog.Log, call uint64, tool string, req mcp.Request, status string, start time.Time, elapsed time.Duration) {
	var args []byte
	if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok {
		args = p.Arguments
	}
	log.Append(record.Entry{Time: record.FormatTime(start), Kind: record.KindToolCall, Call: call, Tool: tool,
		ArgsSHA256: record.SumHex(args), Status: status, DurationMS: elapsed.Milliseconds()})
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
