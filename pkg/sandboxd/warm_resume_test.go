package sandboxd

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/airlock-dev/airlock/pkg/claimtoken/warmtoken"
	"github.com/airlock-dev/airlock/pkg/isolation"
	"github.com/airlock-dev/airlock/pkg/sandboxd/internal/sandboxdtest"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// keptWorkspace writes a workspace as a closed session may leave it: sources of languages whose
// servers sandboxd can start (Go, Python, TypeScript), a git directory, caches, an empty
// directory, a symlink, an executable and a read-only file, nested directories.
func keptWorkspace(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "kept")
	files := map[string]string{
		"go.mod":                      "module example.com/kept\n\ngo 1.22\n",
		"main.go":                     "package main\n\nfunc main() { println(\"kept\") }\n",
		"pkg/util/util.go":            "package util\n\nfunc Kept() int { return 1 }\n",
		"app.py":                      "print('kept')\n",
		"pyproject.toml":              "[project]\nname = \"kept\"\n",
		"package.json":                "{\"name\": \"kept\", \"version\": \"1.0.0\"}\n",
		"tsconfig.json":               "{}\n",
		"src/index.ts":                "export const kept = 1;\n",
		".git/HEAD":                   "ref: refs/heads/main\n",
		".git/config":                 "[core]\n\tbare = false\n",
		"node_modules/left/index.js":  "module.exports = 1;\n",
		".cache/go-build/00/entry":    "cached\n",
		"notes/journal.txt":           "round-0\nround-1\n",
		"deep/a/b/c/d/e/f/leaf.txt":   strings.Repeat("leaf\n", 1000),
		"bin/run.sh":                  "#!/bin/sh\necho kept\n",
		"readonly.txt":                "do not touch\n",
		"space and ünïcode name.txt":  "name\n",
		"large.bin":                   strings.Repeat("\x00\x01\x02\x03", 1<<16),
		".airlock-snapshot-lookalike": "not sandboxd's\n",
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "bin/run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "readonly.txt"), 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("notes/journal.txt", filepath.Join(dir, "journal-link")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// treeDigest describes every entry under dir, the directory itself included: its path, type and
// permissions, modification time (to the nanosecond), size, and the SHA-256 of a file's bytes or
// a symlink's target. Two equal digests mean nothing was written, created, removed, renamed or
// chmodded (a directory's mtime changes with every entry made or removed in it).
func treeDigest(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := os.Lstat(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		desc := fmt.Sprintf("%s %d %d", info.Mode(), info.ModTime().UnixNano(), info.Size())
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			desc += " -> " + target
		case info.Mode().IsRegular():
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			desc += " sha256:" + hex.EncodeToString(sum[:])
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// diffDigests lists what differs between two digests.
func diffDigests(before, after map[string]string) []string {
	var diff []string
	for k, v := range before {
		if w, ok := after[k]; !ok {
			diff = append(diff, "removed "+k)
		} else if w != v {
			diff = append(diff, fmt.Sprintf("changed %s: %s -> %s", k, v, w))
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			diff = append(diff, "created "+k)
		}
	}
	sort.Strings(diff)
	return diff
}

// TestWarmMemberLeavesAKeptWorkspaceAsItIs (docs/nothing-lost.md, "Resume members"): a warm member
// started on a kept workspace (a resume member) changes nothing in it until it is adopted, by
// content hash, mode and modification time of every entry: not at its start (the state store is
// outside the workspace, no language server starts before a tool call), not while it answers the
// kubelet's probes and refuses every request without a valid token (MCP, /metrics, /isolation,
// /record, /stop), not while the operator reads its evidence, and not at its shutdown (its
// deletion when its window passes or a cold resume replaces it).
func TestWarmMemberLeavesAKeptWorkspaceAsItIs(t *testing.T) {
	ws := keptWorkspace(t)
	before := treeDigest(t, ws)
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	key := sandboxdtest.WarmMemberKey(t, 0)
	cfg := Config{WarmKeyFile: writeWarmKey(t, key), Workspace: ws, StateDir: t.TempDir()}
	s, err := newServer(cfg, defaultOptions(), logger)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	addr, stop := serveOn(t, s)
	url := "http://" + addr
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, url+path, nil); code != http.StatusOK {
			t.Fatalf("GET %s = %d %q", path, code, body)
		}
	}
	wantRefused(t, url, nil)
	wantRefused(t, url, bearer("garbage"))
	forged := sandboxdtest.AdoptionToken(t, sandboxdtest.WarmMemberKey(t, 1), "claim-forged", toolnames.Write, toolnames.Bash)
	wantRefused(t, url, bearer(forged))
	evidenceToken, err := warmtoken.EvidenceToken(key)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, body := getIsolation(t, url, bearer(evidenceToken)); code != http.StatusOK {
		t.Errorf("GET %s with the evidence token = %d %q", isolation.Path, code, body)
	}
	if a := s.guard.Adopted(); a != "" {
		t.Fatalf("adopted by %q before any adoption token", a)
	}
	if diff := diffDigests(before, treeDigest(t, ws)); len(diff) > 0 {
		t.Errorf("the kept workspace changed while the member waited:\n%s", strings.Join(diff, "\n"))
	}
	if err := stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	s.close()
	if diff := diffDigests(before, treeDigest(t, ws)); len(diff) > 0 {
		t.Errorf("the kept workspace changed by the member's start and shutdown:\n%s", strings.Join(diff, "\n"))
	}
}
