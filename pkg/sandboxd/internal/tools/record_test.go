package tools

import (
	"context"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/toolcall"
)

// memRecorder is a toolcall.Recorder that keeps what it is told.
type memRecorder struct {
	mu    sync.Mutex
	files map[string]string
	procs []string
	scans []time.Time // the since of each FilesChanged
}

func (r *memRecorder) FilesChanged(since time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.scans = append(r.scans, since)
}

func (r *memRecorder) FileWritten(path string, content []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.files == nil {
		r.files = map[string]string{}
	}
	r.files[path] = string(content)
}

func (r *memRecorder) ProcessEnded(argv []string, exit int, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.procs = append(r.procs, strings.Join(argv, " "))
}

// TestRenameSymbolRecordsEveryFileItWrote: a rename across files records each file with what it
// now holds; a refused one records none.
func TestRenameSymbolRecordsEveryFileItWrote(t *testing.T) {
	const other = "package main\n\nvar y = helper()\n"
	answer := `{"changes": {"$ROOT/main.go": [` + renameEdit(2, 5, 11, "assist") + `, ` + renameEdit(4, 18, 24, "assist") + `], "$ROOT/b.go": [` + renameEdit(2, 8, 14, "assist") + `]}}`
	tb, _ := navWorkspace(t, map[string]string{"main.go": navMain, "b.go": other})
	useFakeLSP(t, tb, "ok", map[string]string{"textDocument/rename": answer})
	rec := &memRecorder{}
	ctx := toolcall.WithRecorder(t.Context(), rec)
	if _, _, err := tb.renameSymbol(ctx, RenameSymbolInput{NavPositionInput: at(3, 6), NewName: "assist"}); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for p := range rec.files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	if strings.Join(paths, " ") != "b.go main.go" || rec.files["b.go"] != "package main\n\nvar y = assist()\n" ||
		!strings.Contains(rec.files["main.go"], "func assist()") {
		t.Fatalf("recorded %v", rec.files)
	}

	refused := `{"changes": {"$ROOT/main.go": [` + renameEdit(2, 5, 11, "a") + `, ` + renameEdit(2, 6, 8, "b") + `]}}`
	tb2, _ := navWorkspace(t, map[string]string{"main.go": navMain})
	useFakeLSP(t, tb2, "ok", map[string]string{"textDocument/rename": refused})
	rec2 := &memRecorder{}
	if _, _, err := tb2.renameSymbol(toolcall.WithRecorder(context.Background(), rec2), RenameSymbolInput{NavPositionInput: at(3, 6), NewName: "a"}); err == nil {
		t.Fatal("overlapping edits were applied")
	}
	if len(rec2.files) != 0 {
		t.Errorf("a refused rename recorded %v", rec2.files)
	}
}

// TestProcessToolsAskForTheirFilesScan: Bash and run_script, once their process has ended, ask
// the call's recorder for the files changed since a moment before it started (the kernel's
// coarse clock, at most one tick behind the real one); a tool that runs no process asks for none.
func TestProcessToolsAskForTheirFilesScan(t *testing.T) {
	tb, _ := newScriptWorkspace(t)
	for name, run := range map[string]func(context.Context) error{
		"Bash": func(ctx context.Context) error { _, _, err := tb.bash(ctx, BashInput{Command: "true"}); return err },
		"run_script": func(ctx context.Context) error {
			_, _, err := tb.runScript(ctx, RunScriptInput{Name: "greet"})
			return err
		},
	} {
		rec := &memRecorder{}
		before := time.Now()
		if err := run(toolcall.WithRecorder(t.Context(), rec)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(rec.scans) != 1 || len(rec.procs) != 1 || rec.scans[0].Before(before.Add(-20*time.Millisecond)) || rec.scans[0].After(time.Now()) {
			t.Errorf("%s asked for scans from %v (started at %v), processes %v", name, rec.scans, before, rec.procs)
		}
	}
	rec := &memRecorder{}
	if _, _, err := tb.write(toolcall.WithRecorder(t.Context(), rec), WriteInput{FilePath: "w.txt", Content: "w"}); err != nil {
		t.Fatal(err)
	}
	if len(rec.scans) != 0 {
		t.Errorf("Write asked for a scan: %v", rec.scans)
	}
}

// TestALanguageServerIsRecordedAsTheProcessOfTheCallThatStartedIt: the language server a
// navigation call started is a process entry of that call when it ends (here: the toolbox's
// shutdown, which waits for it), with its argv; a later call that uses the running server
// records no process.
func TestALanguageServerIsRecordedAsTheProcessOfTheCallThatStartedIt(t *testing.T) {
	answer := `{"changes": {"$ROOT/main.go": [` + renameEdit(2, 5, 11, "assist") + `, ` + renameEdit(4, 18, 24, "assist") + `]}}`
	tb, _ := navWorkspace(t, map[string]string{"main.go": navMain})
	useFakeLSP(t, tb, "ok", map[string]string{"textDocument/rename": answer})
	first, second := &memRecorder{}, &memRecorder{}
	if _, _, err := tb.renameSymbol(toolcall.WithRecorder(t.Context(), first), RenameSymbolInput{NavPositionInput: at(3, 6), NewName: "assist"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tb.renameSymbol(toolcall.WithRecorder(t.Context(), second), RenameSymbolInput{NavPositionInput: at(3, 6), NewName: "helper"}); err != nil {
		t.Fatal(err)
	}
	if err := tb.nav.close(t.Context()); err != nil {
		t.Fatal(err)
	}
	first.mu.Lock()
	defer first.mu.Unlock()
	second.mu.Lock()
	defer second.mu.Unlock()
	exe, _ := os.Executable()
	if len(first.procs) != 1 || !strings.HasPrefix(first.procs[0], exe) {
		t.Fatalf("the starting call's processes %q, want the language server (%s)", first.procs, exe)
	}
	if len(second.procs) != 0 {
		t.Errorf("a call that used the running server recorded %q", second.procs)
	}
}

// TestSnapshotRestoreAsksForItsFilesScan: snapshot_restore writes the workspace back, and asks
// the call's recorder for the files changed since a moment before its restore began, as a
// process-running call does.
func TestSnapshotRestoreAsksForItsFilesScan(t *testing.T) {
	tb, ws := newTestToolbox(t)
	if err := os.WriteFile(ws+"/a.txt", []byte("a1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tb.snapshotCreate(t.Context(), SnapshotCreateInput{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ws+"/a.txt", []byte("a2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := &memRecorder{}
	before := time.Now()
	if _, _, err := tb.snapshotRestore(toolcall.WithRecorder(t.Context(), rec), SnapshotRestoreInput{ID: "s1"}); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.scans) != 1 || rec.scans[0].After(time.Now()) || rec.scans[0].Before(before.Add(-time.Second)) {
		t.Fatalf("scans asked %v, want one since a moment before the restore (%v)", rec.scans, before)
	}
}
