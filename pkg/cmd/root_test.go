//go:build !sandboxd_only

package cmd

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// runAirlock runs the airlock command with args as main does, and returns its exit code and
// outputs.
func runAirlock(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := NewAirlockCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	code = Run(cmd)
	return code, out.String(), errOut.String()
}

func TestVersionCommand(t *testing.T) {
	code, stdout, stderr := runAirlock(t, "version")
	if code != 0 || stderr != "" {
		t.Fatalf("airlock version: exit %d, stderr %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("airlock version printed %d lines, want 4:\n%s", len(lines), stdout)
	}
	wantPrefixes := []string{"Version: dev", "Commit: ", "Go version: " + runtime.Version(), "Platform: " + runtime.GOOS + "/" + runtime.GOARCH}
	for i, want := range wantPrefixes {
		if !strings.HasPrefix(lines[i], want) {
			t.Errorf("line %d = %q, want it to start with %q", i+1, lines[i], want)
		}
	}
	if strings.TrimPrefix(lines[1], "Commit: ") == "" {
		t.Errorf("empty commit: %q", lines[1])
	}
}

func TestOperatorRejectsZeroWorkers(t *testing.T) {
	code, stdout, stderr := runAirlock(t, "operator", "--workers=0")
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	if want := "Error: invalid value for --workers: must be at least 1\n"; stderr != want {
		t.Errorf("stderr = %q, want exactly %q (one line, no usage)", stderr, want)
	}
	if stdout != "" {
		t.Errorf("stdout = %q, want nothing", stdout)
	}
}

func TestEveryInvalidValueIsOneLine(t *testing.T) {
	code, _, stderr := runAirlock(t, "operator", "--workers=0", "--kube-api-qps=0", "--leader-elect-resource-lock=endpoints")
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	want := []string{
		"Error: invalid value for --workers: must be at least 1",
		`Error: invalid value for --leader-elect-resource-lock: must be "leases", the only lock airlock supports`,
		"Error: invalid value for --kube-api-qps: must be greater than 0",
	}
	if got := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n"); !slices.Equal(got, want) {
		t.Errorf("stderr lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestFlagParseErrorPrintsUsage(t *testing.T) {
	code, _, stderr := runAirlock(t, "operator", "--workers=many")
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	if !strings.HasPrefix(stderr, "Usage:\n  airlock operator [flags]\n") {
		t.Errorf("stderr does not start with the operator's usage:\n%s", stderr)
	}
	if !strings.HasSuffix(stderr, "Error: invalid argument \"many\" for \"--workers\" flag: strconv.ParseInt: parsing \"many\": invalid syntax\n") {
		t.Errorf("stderr does not end with the parse error:\n%s", stderr)
	}
}

func TestUnknownFlagPrintsUsage(t *testing.T) {
	code, _, stderr := runAirlock(t, "sync", "--frm=ws")
	if code != 1 || !strings.Contains(stderr, "Usage:\n  airlock sync [flags]") || !strings.HasSuffix(stderr, "Error: unknown flag: --frm\n") {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 1, the sync usage and the error", code, stderr)
	}
}

func TestPositionalArgumentsAreRejected(t *testing.T) {
	for _, sub := range []string{"operator", "sandboxd", "sync", "version"} {
		t.Run(sub, func(t *testing.T) {
			code, _, stderr := runAirlock(t, sub, "extra")
			want := `Error: "airlock ` + sub + `" takes no arguments, got ["extra"]` + "\n"
			if code != 1 || stderr != want {
				t.Errorf("exit %d, stderr %q; want exit 1 and %q", code, stderr, want)
			}
		})
	}
}

func TestUnknownCommand(t *testing.T) {
	code, _, stderr := runAirlock(t, "operatr")
	if code != 1 || !strings.Contains(stderr, `Error: unknown command "operatr" for "airlock"`) || !strings.Contains(stderr, "operator") {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 1, the error and a suggestion", code, stderr)
	}
}

func TestHelpIsSectioned(t *testing.T) {
	tests := map[string][]string{
		"operator": {"Sandbox API flags:", "Health and metrics flags:", "Controllers flags:", "Leader election flags:", "Kubernetes client flags:", "Logs flags:", "Global flags:"},
		"sandboxd": {"Sandboxd flags:", "Logs flags:", "Global flags:"},
		"sync":     {"Sync flags:", "Logs flags:", "Global flags:"},
	}
	for sub, sections := range tests {
		t.Run(sub, func(t *testing.T) {
			code, stdout, stderr := runAirlock(t, sub, "--help")
			if code != 0 || stderr != "" {
				t.Fatalf("exit %d, stderr %q", code, stderr)
			}
			last := -1
			for _, section := range sections {
				i := strings.Index(stdout, "\n"+section+"\n")
				if i < 0 {
					t.Errorf("help lacks the section %q:\n%s", section, stdout)
					continue
				}
				if i < last {
					t.Errorf("section %q is out of order", section)
				}
				last = i
			}
		})
	}
}

func TestSyncCommandCopies(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "ns", "sandboxes", "c1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "ns", "sandboxes", "c1", "main.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runAirlock(t, "sync", "--content-root="+root, "--from=ns/sandboxes/c1", "--to=ns/projects/web")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	got, err := os.ReadFile(filepath.Join(root, "ns", "projects", "web", "main.go"))
	if err != nil || string(got) != "package main\n" {
		t.Errorf("copied file: %q, %v", got, err)
	}
}

func TestSyncCommandRejectsEscapingPaths(t *testing.T) {
	code, _, stderr := runAirlock(t, "sync", "--content-root="+t.TempDir(), "--from=../etc", "--to=/tmp/x")
	want := "Error: invalid value for --from: must not contain \"..\" segments (\"../etc\")\n" +
		"Error: invalid value for --to: must be a path relative to the content root, not absolute (\"/tmp/x\")\n"
	if code != 1 || stderr != want {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 1 and:\n%s", code, stderr, want)
	}
}

// TestSyncCommandRemoves: with --remove-source the workspace is gone and its
// copy in place; with --remove-only it is gone and nothing is copied.
func TestSyncCommandRemoves(t *testing.T) {
	root := t.TempDir()
	for _, ws := range []string{"c1", "c2"} {
		if err := os.MkdirAll(filepath.Join(root, "ns", "sandboxes", ws), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "ns", "sandboxes", ws, "main.go"), []byte("package "+ws+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, _, stderr := runAirlock(t, "sync", "--content-root="+root, "--from=ns/sandboxes/c1", "--to=ns/projects/web",
		"--remove-source", "--sandboxes-dir=ns/sandboxes")
	if code != 0 {
		t.Fatalf("--remove-source: exit %d, stderr:\n%s", code, stderr)
	}
	if got, err := os.ReadFile(filepath.Join(root, "ns", "projects", "web", "main.go")); err != nil || string(got) != "package c1\n" {
		t.Errorf("copied file: %q, %v", got, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "ns", "sandboxes", "c1")); !os.IsNotExist(err) {
		t.Errorf("the workspace is still there after --remove-source: %v", err)
	}

	code, _, stderr = runAirlock(t, "sync", "--content-root="+root, "--from=ns/sandboxes/c2", "--remove-only", "--sandboxes-dir=ns/sandboxes")
	if code != 0 {
		t.Fatalf("--remove-only: exit %d, stderr:\n%s", code, stderr)
	}
	if _, err := os.Lstat(filepath.Join(root, "ns", "sandboxes", "c2")); !os.IsNotExist(err) {
		t.Errorf("the workspace is still there after --remove-only: %v", err)
	}
	entries, err := os.ReadDir(filepath.Join(root, "ns", "sandboxes"))
	if err != nil || len(entries) != 0 {
		t.Errorf("ns/sandboxes holds %v (%v), want nothing", entries, err)
	}
}

// TestSyncCommandRefusesToRemoveOutsideSandboxes: a project (or a mount role's directory) is never
// removed, and the refusal is one clear line before anything is touched.
func TestSyncCommandRefusesToRemoveOutsideSandboxes(t *testing.T) {
	root := t.TempDir()
	keep := filepath.Join(root, "ns", "projects", "web", "keep.txt")
	if err := os.MkdirAll(filepath.Dir(keep), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keep, []byte("keep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runAirlock(t, "sync", "--content-root="+root, "--from=ns/projects/web", "--remove-only", "--sandboxes-dir=ns/sandboxes")
	want := "Error: invalid value for --from: cannot be removed: \"ns/projects/web\" is not inside \"ns/sandboxes\": only a workspace the operator made may be removed\n"
	if code != 1 || stderr != want {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 1 and:\n%s", code, stderr, want)
	}
	if got, err := os.ReadFile(keep); err != nil || string(got) != "keep\n" {
		t.Errorf("the project changed: %q, %v", got, err)
	}
}
