package toolcall

import (
	"context"
	"time"
)

// Recorder takes what one tool call did, for the session record (docs/record.md): the files it
// wrote and the processes it ran. The composition gives each call its own (WithRecorder); a tool
// finds its call's with RecorderFrom.
type Recorder interface {
	// FileWritten says that the call wrote content to the workspace-relative path.
	FileWritten(path string, content []byte)
	// ProcessEnded says that a process the call started, argv, ended with exit status exit (124
	// on a timeout, -1 when it was killed) after elapsed.
	ProcessEnded(argv []string, exit int, elapsed time.Duration)
	// FilesChanged says that processes the call started ran from since (the kernel's coarse
	// clock, wsscan.Now) until now, and have ended: the files they created or changed in the
	// workspace are the call's too (docs/record.md §2.3).
	FilesChanged(since time.Time)
}

type recorderKey struct{}

// WithRecorder returns ctx with the call's recorder r.
func WithRecorder(ctx context.Context, r Recorder) context.Context {
	return context.WithValue(ctx, recorderKey{}, r)
}

// RecorderFrom returns the call's recorder, or one that records nothing: never nil.
func RecorderFrom(ctx context.Context) Recorder {
	if r, ok := ctx.Value(recorderKey{}).(Recorder); ok && r != nil {
		return r
	}
	return noRecorder{}
}

type noRecorder struct{}

func (noRecorder) FileWritten(string, []byte)                {}
func (noRecorder) ProcessEnded([]string, int, time.Duration) {}
func (noRecorder) FilesChanged(time.Time)                    {}
