package sandboxd

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/confine"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/recordlog"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/wsscan"
	"github.com/airlock-dev/airlock/pkg/traceparent"
)

// callRecorder is one tool call's toolcall.Recorder: it appends the call's files and processes
// to the session's log (docs/record.md §2.3), each with the call's number.
type callRecorder struct {
	log   *recordlog.Log
	call  uint64
	trace callTrace
	// ws is the workspace the call's processes may have written (nil: not scanned, in tests of
	// the middleware alone); scan bounds each scan.
	ws   *confine.Resolver
	scan wsscan.Limits
	seen *seenFiles

	mu sync.Mutex
	// since is when the earliest of the call's foreground processes started (zero: none ran);
	// the call's end scans once from it (end).
	since time.Time
	ended bool
}

// FileWritten appends a file.write entry; when the call is traced, the entry is a span of its
// own (a random id) whose parent is the call's span.
func (r *callRecorder) FileWritten(path string, content []byte) {
	size := int64(len(content))
	sum := record.SumHex(content)
	r.appendSpan(record.Entry{Kind: record.KindFileWrite, Call: r.call, Path: path, Size: &size, SHA256: sum})
	if r.ws != nil && r.seen != nil {
		if fi, err := r.ws.Root().Lstat(path); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				r.seen.seenAs(wsscan.File{Path: path, SHA256: sum, Ctime: st.Ctim.Nano()})
			}
		}
	}
}

// ProcessEnded appends a process entry, written when it ends with its duration; when the call is
// traced, a span of its own whose parent is the call's span (the process itself was given
// TRACEPARENT of the call's span: processEnv).
func (r *callRecorder) ProcessEnded(argv []string, exit int, elapsed time.Duration) {
	r.appendSpan(record.Entry{Kind: record.KindProcess, Call: r.call, Argv: argv, Exit: &exit, DurationMS: elapsed.Milliseconds()})
}

// appendSpan appends e; when the call is traced, e is a span of its own (a random id) whose
// parent is the call's span.
func (r *callRecorder) appendSpan(e record.Entry) {
	if r.trace.traced {
		e.Trace, e.Span, e.Parent = r.trace.ids(traceparent.NewSpanID(), r.trace.span)
	}
	r.log.Append(e)
}

// FilesChanged takes note that the call's processes ran from since: while the call runs, the
// call's end scans the workspace once, from the earliest such moment (a test tool that runs many
// processes costs one scan); after it (a background shell that outlived its call), it scans now.
func (r *callRecorder) FilesChanged(since time.Time) {
	r.mu.Lock()
	if !r.ended {
		if r.since.IsZero() || since.Before(r.since) {
			r.since = since
		}
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	r.scanFrom(since)
}

// end is the call's end, before its tool.call entry: the files its foreground processes (and
// the background shells that ended meanwhile) created or changed.
func (r *callRecorder) end() {
	r.mu.Lock()
	r.ended = true
	since := r.since
	r.mu.Unlock()
	if !since.IsZero() {
		r.scanFrom(since)
	}
}

// scanFrom appends a file.write entry for each regular file of the workspace whose ctime is at or
// after since, within the scan's bounds; past them, one file.write entry without a path whose
// count says how many files were only counted, and whose message says why (never a silent drop).
func (r *callRecorder) scanFrom(since time.Time) {
	if r.ws == nil {
		return
	}
	res := wsscan.Changed(r.ws, since, r.scan, r.seen.seenAs)
	for _, f := range res.Files {
		size := f.Size
		r.appendSpan(record.Entry{Kind: record.KindFileWrite, Call: r.call, Path: f.Path, Size: &size, SHA256: f.SHA256})
	}
	if res.Counted == 0 && !res.Cut {
		return
	}
	var notes []string
	if res.Counted > 0 {
		notes = append(notes, fmt.Sprintf("%d more files created or changed by this call's processes were counted, not recorded (at most %d files and %d bytes hashed per scan, or unreadable when hashed)",
			res.Counted, r.scan.Files, r.scan.Bytes))
	}
	if res.Cut {
		notes = append(notes, fmt.Sprintf("the workspace's walk stopped at %d entries: files beyond were not looked at", r.scan.Walk))
	}
	r.appendSpan(record.Entry{Kind: record.KindFileWrite, Call: r.call, Count: uint64(res.Counted), Message: strings.Join(notes, "; ")})
}

// seenFiles is what the record last said of each file it recorded (by a file tool or a scan):
// its ctime and SHA-256. A scan finds every file changed in the clock tick of its start (wsscan):
// a file recorded in that tick before it, by another call, is found again, and is skipped when
// its ctime and content are what was recorded (a file changed again has another ctime, or, in
// the same tick on a file system without fine-grained timestamps, other content). Bounded: past
// maxSeenFiles it starts again, empty (a duplicate entry is then possible, a missing one not).
type seenFiles struct {
	mu sync.Mutex
	m  map[string]wsscan.File
}

const maxSeenFiles = 8192

func newSeenFiles() *seenFiles { return &seenFiles{m: map[string]wsscan.File{}} }

// seenAs says whether f (its path, ctime and SHA-256) is what the record last said of its path,
// and if not, notes it as said now. A nil seenFiles has seen nothing and notes nothing.
func (s *seenFiles) seenAs(f wsscan.File) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if was, ok := s.m[f.Path]; ok && was.Ctime == f.Ctime && was.SHA256 == f.SHA256 {
		return true
	}
	if len(s.m) >= maxSeenFiles {
		clear(s.m)
	}
	s.m[f.Path] = wsscan.File{Path: f.Path, SHA256: f.SHA256, Ctime: f.Ctime}
	return false
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
