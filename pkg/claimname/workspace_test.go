package claimname

import (
	"path"
	"regexp"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/airlock-dev/airlock/pkg/syncback"
)

// workspaceDirPattern is the CRD's pattern of spec.workspaceDir.
var workspaceDirPattern = regexp.MustCompile(`^[A-Za-z0-9._/-]+$`)

// TestClaimWorkspace: two runtime UIDs give two directories for one claim name, one UID always
// the same, and each is one path element of a workspace the operator may remove.
func TestClaimWorkspace(t *testing.T) {
	name := For("agent", "session-1", "codegen/default")
	const uidA, uidB types.UID = "9b2f4c1e-0000-4000-8000-000000000001", "9b2f4c1e-0000-4000-8000-000000000002"
	a, b := ClaimWorkspace(name, uidA), ClaimWorkspace(name, uidB)
	if a == b {
		t.Errorf("two runtime UIDs give one directory %q", a)
	}
	if again := ClaimWorkspace(name, uidA); again != a {
		t.Errorf("one UID gives %q and then %q", a, again)
	}
	// The replacement's directory is its own, and still not its predecessor's.
	if r := ClaimWorkspace(Replacement(name), uidA); r == a {
		t.Errorf("a claim and its replacement share %q", r)
	}
	if want := name + "-"; len(a) != len(want)+runtimeUIDHashLen || a[:len(want)] != want {
		t.Errorf("ClaimWorkspace = %q, want %q and %d hex digits", a, want, runtimeUIDHashLen)
	}
	if !regexp.MustCompile(`-[0-9a-f]{8}$`).MatchString(a) {
		t.Errorf("ClaimWorkspace = %q, want it to end in 8 lowercase hex digits", a)
	}
	longest := For("a123456789012345678901234567890123456789", "s", "h") + ReplacementSuffix
	for _, el := range []string{a, b, ClaimWorkspace(longest, uidA), ClaimWorkspace(name, "")} {
		dir := path.Join("team-a", "sandboxes", el)
		if path.Base(dir) != el || !workspaceDirPattern.MatchString(dir) || len(el) > 255 {
			t.Errorf("%q is not one valid path element of a workspaceDir", el)
		}
		if err := syncback.ValidateRemovable(dir, "team-a/sandboxes"); err != nil {
			t.Errorf("%q: %v", dir, err)
		}
	}
}
