package workspace

// The rules on workspace directories: what a path of the content volume may be, when two overlap,
// and which directories the operator may remove (docs/decisions.md, "Workspaces are collected").
// A mount role's directory is the runtime's, never removed; anything not of the shape the operator
// gives workspaces is refused.

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// ValidatePath checks that p names a directory strictly below the content root: relative, clean,
// and without ".." segments. The error says what is wrong, not which flag or field carried p.
func ValidatePath(p string) error {
	switch {
	case p == "":
		return errors.New("must be set")
	case filepath.IsAbs(p):
		return fmt.Errorf("must be a path relative to the content root, not absolute (%q)", p)
	case slices.Contains(strings.Split(filepath.ToSlash(p), "/"), ".."):
		return fmt.Errorf("must not contain \"..\" segments (%q)", p)
	case filepath.Clean(p) != p:
		return fmt.Errorf("must be a clean path (%q, not %q)", filepath.Clean(p), p)
	case p == ".":
		return errors.New("must name a directory below the content root, not the root itself")
	}
	return nil
}

// Overlaps reports whether one of two valid paths (see ValidatePath) is the other or lies inside it.
func Overlaps(a, b string) bool {
	return a == b || isUnder(a, b) || isUnder(b, a)
}

// isUnder reports whether p lies strictly inside dir.
func isUnder(p, dir string) bool {
	return strings.HasPrefix(p, dir+string(filepath.Separator))
}

// ValidateRemovable checks that dir is a workspace that the operator may remove: a valid path (see
// ValidatePath) of the shape `<sandboxesDir>/<name>` or `<sandboxesDir>/sessions/<name>`, where
// sandboxesDir is a valid path whose last element is "sandboxes" (`<namespace>/sandboxes`).
func ValidateRemovable(dir, sandboxesDir string) error {
	if err := ValidateSandboxesDir(sandboxesDir); err != nil {
		return fmt.Errorf("sandboxes directory %w", err)
	}
	if err := ValidatePath(dir); err != nil {
		return err
	}
	rel, ok := strings.CutPrefix(dir, sandboxesDir+string(filepath.Separator))
	if !ok {
		return fmt.Errorf("%q is not inside %q: only a workspace the operator made may be removed", dir, sandboxesDir)
	}
	parts := strings.Split(rel, string(filepath.Separator))
	switch {
	case len(parts) == 1 && parts[0] != SessionsDir && parts[0] != WarmDir:
	case len(parts) == 2 && (parts[0] == SessionsDir || parts[0] == WarmDir):
	default:
		return fmt.Errorf("%q is not a workspace of %q (<name>, %s/<name> or %s/<name>)", dir, sandboxesDir, SessionsDir, WarmDir)
	}
	if strings.HasPrefix(filepath.Base(dir), ".") {
		return fmt.Errorf("%q is not a workspace: its name starts with a dot", dir)
	}
	return nil
}

// ValidateSandboxesDir checks that p is a namespace's workspaces directory: a valid path (see
// ValidatePath) whose last element is "sandboxes".
func ValidateSandboxesDir(p string) error {
	if err := ValidatePath(p); err != nil {
		return err
	}
	if filepath.Base(p) != "sandboxes" {
		return fmt.Errorf("must end in /sandboxes (%q)", p)
	}
	return nil
}
