package sandboxpod

import (
	"strings"
	"testing"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
)

// TestClassShapes: the operator refuses, naming the arg or the volume, every class shape that
// would set, repeat or swallow one of its flags or put its mounts in the file tools' reach, and
// builds the others (pkg/cmd's TestBuiltArgsParseToTheRecord parses what it builds of each).
func TestClassShapes(t *testing.T) {
	for _, shape := range sandboxpodtest.ClassShapes() {
		t.Run(shape.Name, func(t *testing.T) {
			got := ClassConflict(shape.Apply())
			switch {
			case shape.Refused == "" && got != "":
				t.Errorf("refused: %s", got)
			case shape.Refused != "" && !strings.Contains(got, shape.Refused):
				t.Errorf("ClassConflict = %q, want a refusal naming %s", got, shape.Refused)
			}
		})
	}
}

// TestOperatorFlagsFirst: the operator's flags follow the subcommand, the workspace first; the
// class's --workspace is left out of the record; a class without a workspace volume serves
// /workspace; a warm member gets its key and no token or tools.
func TestOperatorFlagsFirst(t *testing.T) {
	class := sandboxpodtest.Class("codegen")
	class.Spec.Args = []string{"sandboxd", "--workspace=/src", "--listen=:9090"}
	class.Spec.Volumes = class.Spec.Volumes[:1]
	class.Spec.Volumes[0].MountPath = "/src"
	entry := &sandboxpodtest.Registry("tools", "").Spec.Sandboxes[0]
	record := Freeze(class, entry)
	if record.WorkspacePath != "/src" || strings.Join(record.Args, " ") != "sandboxd --listen=:9090" {
		t.Errorf("record: workspace %q, args %q", record.WorkspacePath, record.Args)
	}
	want := "sandboxd --workspace=/src --allowed-tools=Read,Bash --readonly=false --auth-token-file=" + TokenFile + " --listen=:9090"
	if got := strings.Join(ClaimArgs(record), " "); got != want {
		t.Errorf("claim args %q, want %q", got, want)
	}
	want = "sandboxd --workspace=/src --warm-key-file=" + MemberKeyFile + " --listen=:9090"
	if got := strings.Join(MemberArgs(record), " "); got != want {
		t.Errorf("member args %q, want %q", got, want)
	}
	class.Spec.Volumes = []airlockv1alpha1.SandboxVolume{}
	if got := Freeze(class, entry).WorkspacePath; got != DefaultWorkspacePath {
		t.Errorf("workspace path without a workspace volume = %q, want %q", got, DefaultWorkspacePath)
	}
}
