package sandboxpod

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxflags"
)

// sandboxd's flags are the operator's where they decide what the sandbox may do (SPEC section 2:
// a class "grants no tools"; docs/decisions.md, "A class cannot change what the operator
// decides"). A class's args are sandboxd and flags written --name=value, none of them the
// operator's (sandboxflags.Operator); the operator passes its own right after the subcommand:
//
//	sandboxd --workspace=<the workspace volume's mountPath> --allowed-tools=<the record's> --readonly=false --auth-token-file=<the token> <the class's flags>
//
// (a warm member: --warm-key-file instead of the tools, --readonly and the token; sandboxd
// refuses those beside it). Nothing before them can take them as its value, and sandboxd refuses
// an operator flag given twice, so a class flag after them cannot add to them or unset them. The CRD's rules refuse such args too; this check is the admission's,
// for a class the API server stored before those rules existed.
//
// A record frozen before this layout (its WorkspacePath empty) is built as it was: its args, then
// the operator's flags. A pod that runs is never rebuilt with other args (the claim controller
// would replace it under its agent), and what a claim runs is decided once.

// DefaultWorkspacePath is the directory sandboxd serves in a class without a workspace volume
// (the image's /workspace).
const DefaultWorkspacePath = "/workspace"

// operatorDirs hold what the operator mounts into a sandbox (the claim's token, a warm member's
// key, the egress CA): no class volume may be mounted at, over or under them. /run is where
// /var/run points in most images.
var operatorDirs = []string{"/var/run/airlock", "/run/airlock"}

// classFlag is a flag as a class's args may write it: --name=value.
var classFlag = regexp.MustCompile(`^--[A-Za-z0-9][-_A-Za-z0-9]*=`)

// WorkspacePath is the directory sandboxd serves in a sandbox of the class's volumes: the
// workspace volume's mountPath, else DefaultWorkspacePath.
func WorkspacePath(volumes []airlockv1alpha1.SandboxVolume) string {
	for _, v := range volumes {
		if v.Workspace != nil {
			return v.MountPath
		}
	}
	return DefaultWorkspacePath
}

// ClaimArgs are the container args of the claim's sandbox: sandboxd with the operator's flags
// (the workspace, an explicit --allowed-tools list, never empty: freeze writes every tool out,
// --readonly=false, and the token file), then the record's args. A record of the older layout
// gets no --readonly (its pod runs with the args it was given).
func ClaimArgs(record *airlockv1alpha1.FrozenSandbox) []string {
	tools := make([]string, len(record.AllowedTools))
	for i, t := range record.AllowedTools {
		tools[i] = string(t)
	}
	flags := []string{"--" + sandboxflags.AllowedTools + "=" + strings.Join(tools, ",")}
	if record.WorkspacePath != "" {
		flags = append(flags, "--"+sandboxflags.ReadOnly+"=false")
	}
	return withOperatorFlags(record, append(flags, "--"+sandboxflags.AuthTokenFile+"="+TokenFile)...)
}

// MemberArgs are a warm member's container args: sandboxd with the workspace and the member's
// key file (no token and no tool list, both come with the adopting claim's token:
// docs/decisions.md, "Warm members: the token is the adoption"), then the record's args.
func MemberArgs(record *airlockv1alpha1.FrozenSandbox) []string {
	return withOperatorFlags(record, "--"+sandboxflags.WarmKeyFile+"="+MemberKeyFile)
}

// withOperatorFlags returns the record's args with the operator's flags: right after the
// subcommand, the workspace first, for a record that has its WorkspacePath; after the args, as
// they were frozen, for an older one.
func withOperatorFlags(record *airlockv1alpha1.FrozenSandbox, flags ...string) []string {
	args := Defaulted(record).Args
	if record.WorkspacePath == "" || len(args) == 0 {
		return append(slices.Clone(args), flags...)
	}
	out := make([]string, 0, len(args)+len(flags)+1)
	out = append(out, args[0], "--"+sandboxflags.Workspace+"="+record.WorkspacePath)
	out = append(out, flags...)
	return append(out, args[1:]...)
}

// frozenArgs are the class's args as a record keeps them: without a --workspace, which the class
// may only write as the operator would (argsConflict) and the operator passes itself.
func frozenArgs(args []string) []string {
	if len(args) == 0 {
		args = defaultArgs
	}
	out := make([]string, 0, len(args))
	for _, a := range args {
		if name, ok := flagName(a); ok && name == sandboxflags.Workspace {
			continue
		}
		out = append(out, a)
	}
	return out
}

// flagName is the name of the flag a --name=value arg sets, as sandboxd's flag set reads it
// (underscores are dashes there).
func flagName(arg string) (string, bool) {
	if !classFlag.MatchString(arg) {
		return "", false
	}
	name, _, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
	return strings.ReplaceAll(name, "_", "-"), true
}

// argsConflict says why the class's args would change what the operator decides, or "": they
// must be sandboxd, then flags written --name=value (a bare flag or value could take the next
// arg, the operator's flag, as its own; -- would make the rest positional), and none of them an
// operator flag, except a --workspace that says what the operator passes anyway.
func argsConflict(class *airlockv1alpha1.SandboxClass) string {
	args := class.Spec.Args
	if len(args) == 0 {
		return ""
	}
	if args[0] != sandboxflags.Subcommand {
		return fmt.Sprintf("SandboxClass %q: args[0] is %q: a sandbox's args begin with %s", class.Name, args[0], sandboxflags.Subcommand)
	}
	workspace := WorkspacePath(class.Spec.Volumes)
	for i, a := range args[1:] {
		name, ok := flagName(a)
		switch {
		case !ok:
			return fmt.Sprintf("SandboxClass %q: args[%d] %q is not a flag written --name=value: it could take the operator's flags for its own", class.Name, i+1, a)
		case name == sandboxflags.Workspace:
			if a != "--workspace="+workspace && a != "--workspace="+DefaultWorkspacePath {
				return fmt.Sprintf("SandboxClass %q: args[%d] %q: --workspace is the operator's, always the workspace volume's mountPath (%s)", class.Name, i+1, a, workspace)
			}
		case slices.Contains(sandboxflags.Operator(), name):
			return fmt.Sprintf("SandboxClass %q: args[%d] %q: --%s is the operator's (the registry entry grants the tools; the operator passes the token and key)", class.Name, i+1, a, name)
		}
	}
	return ""
}

// volumesConflict says why a class volume would take what the operator mounts, or "": its name
// (the token's or a warm member's key's volume), or a mount path at, over or under the
// operator's directories, where Read and Grep in a workspace mounted there would reach the
// claim's token or a member's key.
func volumesConflict(class *airlockv1alpha1.SandboxClass) string {
	for _, v := range class.Spec.Volumes {
		if v.Name == TokenVolumeName || v.Name == memberKeyVolumeName {
			return fmt.Sprintf("SandboxClass %q: volume name %q is the operator's (the claim's token or a warm member's key)", class.Name, v.Name)
		}
		mountPath := path.Clean(v.MountPath)
		for _, dir := range operatorDirs {
			if pathsOverlap(mountPath, dir) {
				return fmt.Sprintf("SandboxClass %q: volume %q is mounted at %s, at, over or under %s, where the operator mounts the claim's token, a warm member's key and the egress CA", class.Name, v.Name, v.MountPath, dir)
			}
		}
	}
	return ""
}
