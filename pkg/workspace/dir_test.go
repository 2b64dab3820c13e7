package workspace

import (
	"crypto/sha256"
	"encoding/hex"
	"path"
	"regexp"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/airlock-dev/airlock/pkg/claimname"
)

// workspaceDirPattern is the CRD's pattern of spec.workspaceDir.
var workspaceDirPattern = regexp.MustCompile(`^[A-Za-z0-9._/-]+$`)

// TestClaimDirName: two runtime UIDs give two directories for one claim name, one UID always
// the same, and each is one path element of a workspace the operator may remove.
func TestClaimDirName(t *testing.T) {
	name := claimname.For("agent", "session-1", "codegen/default")
	const uidA, uidB types.UID = "9b2f4c1e-0000-4000-8000-000000000001", "9b2f4c1e-0000-4000-8000-000000000002"
	a, b := ClaimDirName(name, uidA), ClaimDirName(name, uidB)
	if a == b {
		t.Errorf("two runtime UIDs give one directory %q", a)
	}
	if again := ClaimDirName(name, uidA); again != a {
		t.Errorf("one UID gives %q and then %q", a, again)
	}
	// The replacement's directory is its own, and still not its predecessor's.
	if r := ClaimDirName(claimname.Replacement(name), uidA); r == a {
		t.Errorf("a claim and its replacement share %q", r)
	}
	if want := name + "-"; len(a) != len(want)+runtimeUIDHashLen || a[:len(want)] != want {
		t.Errorf("ClaimDirName = %q, want %q and %d hex digits", a, want, runtimeUIDHashLen)
	}
	if !regexp.MustCompile(`-[0-9a-f]{8}$`).MatchString(a) {
		t.Errorf("ClaimDirName = %q, want it to end in 8 lowercase hex digits", a)
	}
	longest := claimname.For("a123456789012345678901234567890123456789", "s", "h") + claimname.ReplacementSuffix
	for _, el := range []string{a, b, ClaimDirName(longest, uidA), ClaimDirName(name, "")} {
		dir := path.Join("team-a", "sandboxes", el)
		if path.Base(dir) != el || !workspaceDirPattern.MatchString(dir) || len(el) > 255 {
			t.Errorf("%q is not one valid path element of a workspaceDir", el)
		}
		if err := ValidateRemovable(dir, "team-a/sandboxes"); err != nil {
			t.Errorf("%q: %v", dir, err)
		}
	}
}

// TestSessionDirName: one directory per runtime (name and UID), session and handle, never per
// session alone, nor per session and handle alone (issue 23 item 2: two runtimes of one namespace
// with one session id and handle shared a directory).
func TestSessionDirName(t *testing.T) {
	sum := sha256.Sum256([]byte("agent\x00uid-1\x00s1\x00codegen/default"))
	if got, want := SessionDirName("agent", "uid-1", "s1", "codegen/default"), hex.EncodeToString(sum[:])[:32]; got != want {
		t.Errorf("SessionDirName = %q, want %q", got, want)
	}
	base := SessionDirName("agent", "uid-1", "s1", "codegen/default")
	for name, other := range map[string]string{
		"another handle of the session":            SessionDirName("agent", "uid-1", "s1", "codegen/second"),
		"another runtime, same session and handle": SessionDirName("other", "uid-2", "s1", "codegen/default"),
		"the runtime created again (another UID)":  SessionDirName("agent", "uid-2", "s1", "codegen/default"),
		// The separators keep tuples apart that concatenate alike.
		"session and handle not separated": SessionDirName("agent", "uid-1", "s1c", "odegen/default"),
		"runtime and UID not separated":    SessionDirName("agen", "tuid-1", "s1", "codegen/default"),
	} {
		if other == base {
			t.Errorf("%s: shares the directory %s", name, base)
		}
	}
}
