package tools

import (
	"context"
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
