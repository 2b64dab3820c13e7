package tools

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
)

const secret = "TOP-SECRET-OUTSIDE"

// escapeFixture is a workspace next to an "outside" directory that holds a
// secret, with every kind of way out planted in the workspace.
type escapeFixture struct {
	tb      *Toolbox
	ws      string
	outside string
}

func newEscapeFixture(t *testing.T) *escapeFixture {
	t.Helper()
	top := t.TempDir()
	ws := filepath.Join(top, "ws")
	outside := filepath.Join(top, "outside")
	sandboxdtest.WriteFile(t, filepath.Join(outside, "secret.txt"), secret+"\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "inside.txt"), "inside\n")
	sandboxdtest.WriteFile(t, filepath.Join(ws, "a", "b", "c.txt"), "deep\n")
	sandboxdtest.MustSymlink(t, "../outside/secret.txt", filepath.Join(ws, "file-link"))
	sandboxdtest.MustSymlink(t, filepath.Join(outside, "secret.txt"), filepath.Join(ws, "abs-file-link"))
	sandboxdtest.MustSymlink(t, "../outside", filepath.Join(ws, "dir-link"))
	sandboxdtest.MustSymlink(t, outside, filepath.Join(ws, "abs-dir-link"))
	sandboxdtest.MustSymlink(t, "../../../outside", filepath.Join(ws, "a", "b", "up"))
	sandboxdtest.MustSymlink(t, "b/up", filepath.Join(ws, "a", "chain"))
	sandboxdtest.MustSymlink(t, "/", filepath.Join(ws, "root-link"))
	sandboxdtest.MustSymlink(t, "/proc/self/root", filepath.Join(ws, "proc-link"))
	sandboxdtest.MustSymlink(t, "dangling-out/../../outside/new.txt", filepath.Join(ws, "dangling"))
	if err := syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	tb, err := NewToolbox(ws)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return &escapeFixture{tb: tb, ws: ws, outside: outside}
}

// escapePaths are the file paths every file tool must refuse.
func (f *escapeFixture) escapePaths() []string {
	return []string{
		"../outside/secret.txt",
		"../../" + filepath.Base(filepath.Dir(f.ws)) + "/outside/secret.txt",
		"a/b/../../../outside/secret.txt",
		"./../outside/secret.txt",
		f.outside + "/secret.txt",
		f.ws + "/../outside/secret.txt",
		"/etc/passwd",
		"/proc/self/root" + f.outside + "/secret.txt",
		"file-link",
		"abs-file-link",
		"dir-link/secret.txt",
		"abs-dir-link/secret.txt",
		"a/b/up/secret.txt",
		"a/chain/secret.txt",
		"root-link" + f.outside + "/secret.txt",
		"proc-link" + f.outside + "/secret.txt",
		"fifo",
		"inside.txt\x00../outside/secret.txt",
	}
}

// checkOutsideUntouched fails if anything outside the workspace changed.
func (f *escapeFixture) checkOutsideUntouched(t *testing.T) {
	t.Helper()
	entries, err := os.ReadDir(f.outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "secret.txt" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("outside holds %v, want only secret.txt", names)
	}
	sandboxdtest.CheckFile(t, filepath.Join(f.outside, "secret.txt"), secret+"\n")
}

func TestConfinementOfFileTools(t *testing.T) {
	f := newEscapeFixture(t)
	for _, p := range f.escapePaths() {
		t.Run(fmt.Sprintf("%.60q", p), func(t *testing.T) {
			ctx := t.Context()
			check := func(tool string, text string, err error) {
				t.Helper()
				if err == nil {
					t.Errorf("%s(%.80q) succeeded: %.200s", tool, p, text)
					return
				}
				if strings.Contains(err.Error(), secret) {
					t.Errorf("%s error leaks the secret: %v", tool, err)
				}
			}
			res, out, err := f.tb.read(ctx, ReadInput{FilePath: p})
			check("Read", out.Content, err)
			if res != nil && strings.Contains(resultText(t, res), secret) {
				t.Errorf("Read leaked the secret")
			}
			_, _, err = f.tb.write(ctx, WriteInput{FilePath: p, Content: "pwned\n"})
			check("Write", "", err)
			_, _, err = f.tb.edit(ctx, EditInput{FilePath: p, OldString: secret, NewString: "pwned"})
			check("Edit", "", err)
			_, _, err = f.tb.multiEdit(ctx, MultiEditInput{FilePath: p, Edits: []EditOperation{{OldString: secret, NewString: "pwned"}}})
			check("MultiEdit", "", err)
			_, lout, err := f.tb.ls(ctx, LSInput{Path: p})
			check("LS", fmt.Sprint(lout.Entries), err)
			_, gout, err := f.tb.grep(ctx, GrepInput{Pattern: "SECRET", Path: p, OutputMode: grepContent})
			if err == nil && gout.NumLines > 0 {
				t.Errorf("Grep(path %.80q) found the secret", p)
			}
		})
	}
	// Creating new files through links that lead out.
	for _, p := range []string{"dir-link/new.txt", "abs-dir-link/new.txt", "a/b/up/new.txt", "a/chain/sub/new.txt", "dangling", "../outside/new.txt"} {
		if _, _, err := f.tb.write(t.Context(), WriteInput{FilePath: p, Content: "pwned\n"}); err == nil {
			t.Errorf("Write(%q) succeeded", p)
		}
	}
	f.checkOutsideUntouched(t)
}

func TestConfinementOfSearch(t *testing.T) {
	f := newEscapeFixture(t)
	ctx := t.Context()
	_, gout, err := f.tb.grep(ctx, GrepInput{Pattern: "SECRET", OutputMode: grepContent})
	if err != nil {
		t.Fatal(err)
	}
	if gout.NumLines != 0 {
		t.Errorf("Grep of the workspace found the secret through a link: %+v", gout)
	}
	_, glob, err := f.tb.glob(ctx, GlobInput{Pattern: "**"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range glob.Files {
		if strings.Contains(p, "secret") {
			t.Errorf("Glob listed %s, outside the workspace", p)
		}
	}
	for _, p := range []string{"dir-link", "abs-dir-link", "a/b/up", "a/chain", "root-link/etc", "../outside", f.outside} {
		if _, _, err := f.tb.glob(ctx, GlobInput{Pattern: "*", Path: p}); err == nil {
			t.Errorf("Glob(path %q) succeeded", p)
		}
		if _, out, err := f.tb.ls(ctx, LSInput{Path: p}); err == nil {
			t.Errorf("LS(path %q) succeeded: %v", p, out.Entries)
		}
	}
	// LS of the workspace lists the links as links: it does not follow them.
	_, ls, err := f.tb.ls(ctx, LSInput{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ls.Entries {
		if strings.Contains(e.Path, "secret") || (strings.Contains(e.Path, "link") && e.Type != lsSymlink) {
			t.Errorf("LS listed %+v", e)
		}
	}
	for _, pattern := range []string{"../outside/*", f.outside + "/*", "dir-link/*", "a/b/up/*"} {
		_, out, err := f.tb.glob(ctx, GlobInput{Pattern: pattern})
		if err == nil && len(out.Files) > 0 {
			t.Errorf("Glob(%q) = %v", pattern, out.Files)
		}
	}
}

// TestConfinementRace swaps a directory of the workspace for a symbolic link
// to the outside, and back, while the file tools work in it: in each round
// one swap races with a batch of tool calls. No call ever sees the secret
// and no Write ever lands outside.
func TestConfinementRace(t *testing.T) {
	f := newEscapeFixture(t)
	sandboxdtest.WriteFile(t, filepath.Join(f.outside, "f.txt"), secret+"\n")
	sandboxdtest.WriteFile(t, filepath.Join(f.ws, "d", "f.txt"), "inside\n")
	d := filepath.Join(f.ws, "d")
	saved := filepath.Join(f.ws, "d.saved")

	// toLink makes d a link to the outside; toReal makes it the real
	// directory again. A Write that finds d missing in between may create a
	// new, real d (inside the workspace, which is fine): it is dropped.
	toLink := func() {
		if err := os.Rename(d, saved); err != nil {
			t.Errorf("saving d: %v", err)
			return
		}
		_ = os.Symlink("../outside", d)
	}
	toReal := func() {
		for range 100 {
			os.RemoveAll(d) // the link, or a d a Write created
			if err := os.Rename(saved, d); err == nil {
				return
			}
		}
		t.Errorf("could not restore d")
	}

	var leaks, reads, writes atomic.Int64
	ops := func(w, round int) {
		ctx := t.Context()
		if _, out, err := f.tb.read(ctx, ReadInput{FilePath: "d/f.txt"}); err == nil {
			reads.Add(1)
			if strings.Contains(out.Content, secret) {
				leaks.Add(1)
			}
		}
		if _, _, err := f.tb.write(ctx, WriteInput{FilePath: fmt.Sprintf("d/w%d-%d.txt", w, round), Content: "x"}); err == nil {
			writes.Add(1)
		}
		f.tb.edit(ctx, EditInput{FilePath: "d/f.txt", OldString: "TOP", NewString: "pwned"})
		f.tb.multiEdit(ctx, MultiEditInput{FilePath: "d/f.txt", Edits: []EditOperation{{OldString: "TOP", NewString: "pwned"}}})
		if _, l, err := f.tb.ls(ctx, LSInput{Path: "d"}); err == nil {
			for _, e := range l.Entries {
				if strings.HasSuffix(e.Path, "secret.txt") {
					leaks.Add(1)
				}
			}
		}
		if _, g, err := f.tb.grep(ctx, GrepInput{Pattern: "SECRET", Path: "d"}); err == nil && g.NumLines > 0 {
			leaks.Add(1)
		}
		if _, g, err := f.tb.glob(ctx, GlobInput{Pattern: "**", Path: "d"}); err == nil {
			for _, p := range g.Files {
				if strings.HasSuffix(p, "secret.txt") {
					leaks.Add(1)
				}
			}
		}
	}

	isReal := true
	for round := range 200 {
		var wg sync.WaitGroup
		if isReal {
			wg.Go(toLink)
		} else {
			wg.Go(toReal)
		}
		for w := range 2 {
			wg.Go(func() { ops(w, round) })
		}
		wg.Wait()
		isReal = !isReal
	}
	if !isReal {
		toReal()
	}

	t.Logf("%d successful reads, %d successful writes", reads.Load(), writes.Load())
	if reads.Load() == 0 || writes.Load() == 0 {
		t.Fatal("no tool call got through: the race was not exercised")
	}
	if n := leaks.Load(); n > 0 {
		t.Errorf("%d operations saw the outside", n)
	}
	// Only f.txt and secret.txt may be outside: every Write stayed in.
	entries, _ := os.ReadDir(f.outside)
	for _, e := range entries {
		if e.Name() != "f.txt" && e.Name() != "secret.txt" {
			t.Errorf("a Write landed outside: %s", e.Name())
		}
	}
	sandboxdtest.CheckFile(t, filepath.Join(f.outside, "f.txt"), secret+"\n")
	sandboxdtest.CheckFile(t, filepath.Join(f.outside, "secret.txt"), secret+"\n")
}

// FuzzResolver feeds arbitrary paths to the resolver and the file tools: a
// path is either refused, or resolves to a workspace-relative path whose
// file, once opened, really is inside the workspace.
func FuzzResolver(f *testing.F) {
	for _, seed := range []string{
		"", ".", "..", "../x", "a/../../x", "/etc/passwd", "inside.txt", "a/b/c.txt",
		"file-link", "dir-link/secret.txt", "a/b/up/secret.txt", "a/chain/secret.txt",
		"root-link/etc/passwd", "proc-link/etc/passwd", "fifo", "a\x00b", "//", "./././inside.txt",
		"a/b/../b/c.txt", "dangling", "\xff\xfe", strings.Repeat("../", 50),
	} {
		f.Add(seed)
	}
	top := f.TempDir()
	ws := filepath.Join(top, "ws")
	outside := filepath.Join(top, "outside")
	for _, d := range []string{filepath.Join(ws, "a", "b"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(outside, "secret.txt"), []byte(secret), 0o644)
	os.WriteFile(filepath.Join(ws, "inside.txt"), []byte("inside"), 0o644)
	os.WriteFile(filepath.Join(ws, "a", "b", "c.txt"), []byte("deep"), 0o644)
	os.Symlink("../outside/secret.txt", filepath.Join(ws, "file-link"))
	os.Symlink("../outside", filepath.Join(ws, "dir-link"))
	os.Symlink("../../../outside", filepath.Join(ws, "a", "b", "up"))
	os.Symlink("b/up", filepath.Join(ws, "a", "chain"))
	os.Symlink("/", filepath.Join(ws, "root-link"))
	os.Symlink("/proc/self/root", filepath.Join(ws, "proc-link"))
	os.Symlink("nowhere/../../outside/x", filepath.Join(ws, "dangling"))
	syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644)
	tb, err := NewToolbox(ws)
	if err != nil {
		f.Fatal(err)
	}
	defer tb.Close()
	realWS, err := filepath.EvalSymlinks(ws)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, p string) {
		rel, err := tb.ws.Rel(p)
		if err != nil {
			return
		}
		if rel != "." && !filepath.IsLocal(rel) {
			t.Fatalf("rel(%q) = %q, which is not local", p, rel)
		}
		final, err := tb.ws.ResolveFinal(rel)
		if err == nil && final != "." && !filepath.IsLocal(final) {
			t.Fatalf("resolveFinal(%q) = %q, which is not local", rel, final)
		}
		file, _, err := tb.ws.OpenRegular(rel)
		if err != nil {
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("error leaks the secret: %v", err)
			}
			return
		}
		defer file.Close()
		where, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", file.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		if where != realWS && !strings.HasPrefix(where, realWS+"/") {
			t.Fatalf("path %q opened %s, outside the workspace %s", p, where, realWS)
		}
		if _, out, err := tb.read(t.Context(), ReadInput{FilePath: p}); err == nil && strings.Contains(out.Content, secret) {
			t.Fatalf("Read(%q) returned the secret", p)
		}
	})
}

// FuzzGlobMatcher checks that no pattern panics or hangs the matcher.
func FuzzGlobMatcher(f *testing.F) {
	for _, seed := range []string{"**/*.go", "{a,b}/**/{c,d}*", "[", "{", "}", "\\", "**/**/**", "a/{b,{c,d}}/e"} {
		f.Add(seed, "a/b/c/d.go")
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		m, err := newGlobMatcher(pattern)
		if err != nil {
			return
		}
		m.match(name)
		m.matchFile(name)
	})
}
