package sandboxpod

import (
	"testing"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// TestWarmEligible: a claim in its own per-claim workspace may adopt a warm member, whether the
// directory carries its runtime's UID (as the Sandbox API names it now) or not (as earlier
// versions did); a directory of another runtime UID, another claim, a session or a mount role
// may not. The claims of the Sandbox API had gone cold, every one, when the directory got the UID.
func TestWarmEligible(t *testing.T) {
	ns := sandboxpodtest.Namespace
	claimDir := func(name string) string { return ns + "/sandboxes/" + workspace.ClaimDirName(name, "uid-rt-agent") }
	for name, tc := range map[string]struct {
		dir, mountRole string
		want           bool
	}{
		"its own, with its runtime's UID":     {dir: claimDir("c1"), want: true},
		"its own, as earlier versions had it": {dir: ns + "/sandboxes/c1", want: true},
		"of another runtime UID":              {dir: ns + "/sandboxes/" + workspace.ClaimDirName("c1", "uid-rt-other")},
		"of another claim":                    {dir: claimDir("c2")},
		"a session's":                         {dir: ns + "/sandboxes/sessions/0123456789"},
		"a mount role's":                      {dir: claimDir("c1"), mountRole: "repo"},
	} {
		t.Run(name, func(t *testing.T) {
			claim := sandboxpodtest.Claim("c1", "s1", "", sandboxpodtest.T0)
			claim.Spec.WorkspaceDir, claim.Spec.MountRole = tc.dir, tc.mountRole
			if got := WarmEligible(claim); got != tc.want {
				t.Errorf("WarmEligible(%q, mount role %q) = %v, want %v", tc.dir, tc.mountRole, got, tc.want)
			}
		})
	}
}

// TestWarmWanted: a static count or a warmPolicy keeps a pool; neither, none.
func TestWarmWanted(t *testing.T) {
	for name, tc := range map[string]struct {
		entry airlockv1alpha1.RegistrySandbox
		want  bool
	}{
		"neither":             {},
		"warm: 2":             {entry: airlockv1alpha1.RegistrySandbox{Warm: 2}, want: true},
		"a warmPolicy, min 0": {entry: airlockv1alpha1.RegistrySandbox{WarmPolicy: &airlockv1alpha1.WarmPolicy{Max: 4}}, want: true},
	} {
		if got := WarmWanted(&tc.entry); got != tc.want {
			t.Errorf("%s: WarmWanted = %v, want %v", name, got, tc.want)
		}
	}
}
