package sandboxpodtest

import (
	corev1 "k8s.io/api/core/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// ClassShape is a class's args, volumes and env, as a class author may write them, and whether the
// operator builds a sandbox of it: Refused names the arg or volume the refusal must quote, ""
// for a class the operator builds.
type ClassShape struct {
	Name    string
	Args    []string
	Volumes []airlockv1alpha1.SandboxVolume // nil: the fixtures' (a workspace at /workspace)
	Env     []corev1.EnvVar                 // nil: the fixtures'
	Refused string
}

// Apply returns the fixtures' class "codegen" of the shape.
func (s ClassShape) Apply() *airlockv1alpha1.SandboxClass {
	class := Class("codegen")
	s.ApplyTo(&class.Spec)
	return class
}

// ApplyTo gives spec the shape's args, and its volumes and env where it has them.
func (s ClassShape) ApplyTo(spec *airlockv1alpha1.SandboxClassSpec) {
	spec.Args = s.Args
	if s.Volumes != nil {
		spec.Volumes = s.Volumes
	}
	if s.Env != nil {
		spec.Env = s.Env
	}
}

func envFrom(name string, source *corev1.EnvVarSource) []corev1.EnvVar {
	return []corev1.EnvVar{{Name: "HOME", Value: "/home/agent"}, {Name: name, ValueFrom: source}}
}

func workspaceAt(path string) []airlockv1alpha1.SandboxVolume {
	return []airlockv1alpha1.SandboxVolume{{Name: "workspace", MountPath: path, Workspace: &airlockv1alpha1.WorkspaceVolumeSource{}}}
}

func scratchAt(name, path string) []airlockv1alpha1.SandboxVolume {
	return []airlockv1alpha1.SandboxVolume{
		{Name: "workspace", MountPath: "/workspace", Workspace: &airlockv1alpha1.WorkspaceVolumeSource{}},
		{Name: name, MountPath: path, Scratch: &airlockv1alpha1.ScratchVolumeSource{}},
	}
}

// ClassShapes are the class shapes of issue 23, item 1: the two it reproduced (a class that
// grants tools by repeating --allowed-tools, one that swallows the operator's flags with a bare
// --auth-token-file), the other ways of setting, repeating or swallowing an operator flag, the
// volumes that would put the token or a member's key in reach of the file tools, and the shapes
// a class may take.
func ClassShapes() []ClassShape {
	return []ClassShape{
		{Name: "defaults", Args: nil},
		{Name: "the sample class", Args: []string{"sandboxd", "--listen=:8080", "--workspace=/workspace"}},
		{Name: "another port and logging", Args: []string{"sandboxd", "--listen=:9090", "--v=4", "--vmodule=tools*=5", "--shutdown-grace=30s", "--state-dir=/sandbox-cache/state"}},
		{Name: "workspace elsewhere, its path repeated", Args: []string{"sandboxd", "--workspace=/src"}, Volumes: workspaceAt("/src")},
		{Name: "workspace elsewhere, the default's path", Args: []string{"sandboxd", "--workspace=/workspace"}, Volumes: workspaceAt("/src")},
		{Name: "no workspace volume", Args: []string{"sandboxd"}, Volumes: []airlockv1alpha1.SandboxVolume{}},

		{Name: "grants tools by repeating --allowed-tools", Args: []string{"sandboxd", "--listen=:8080", "--allowed-tools=Bash,Write"}, Refused: "--allowed-tools=Bash,Write"},
		{Name: "swallows the operator's flags with a bare --auth-token-file", Args: []string{"sandboxd", "--auth-token-file"}, Refused: "--auth-token-file"},
		{Name: "--allowed_tools, normalised", Args: []string{"sandboxd", "--allowed_tools=Bash"}, Refused: "--allowed_tools=Bash"},
		{Name: "its own token file", Args: []string{"sandboxd", "--auth-token-file=/tmp/known"}, Refused: "--auth-token-file=/tmp/known"},
		{Name: "a warm key", Args: []string{"sandboxd", "--warm-key-file=/tmp/key"}, Refused: "--warm-key-file=/tmp/key"},
		{Name: "--readonly=false", Args: []string{"sandboxd", "--readonly=false"}, Refused: "--readonly=false"},
		{Name: "--help", Args: []string{"sandboxd", "--help=true"}, Refused: "--help=true"},
		{Name: "the whole filesystem as workspace", Args: []string{"sandboxd", "--workspace=/"}, Refused: "--workspace=/"},
		{Name: "the token's directory as workspace", Args: []string{"sandboxd", "--workspace=/var/run/airlock/auth"}, Refused: "--workspace=/var/run/airlock/auth"},
		{Name: "a bare value-taking flag last", Args: []string{"sandboxd", "--listen"}, Refused: "--listen"},
		{Name: "a bare boolean", Args: []string{"sandboxd", "--readonly"}, Refused: "--readonly"},
		{Name: "the end of flags", Args: []string{"sandboxd", "--"}, Refused: `"--"`},
		{Name: "a positional arg", Args: []string{"sandboxd", "serve"}, Refused: `"serve"`},
		{Name: "a shorthand", Args: []string{"sandboxd", "-h"}, Refused: `"-h"`},
		{Name: "a single-dash long flag", Args: []string{"sandboxd", "-allowed-tools=Bash"}, Refused: "-allowed-tools=Bash"},
		{Name: "another command", Args: []string{"sh", "-c", "sandboxd --allowed-tools=Bash"}, Refused: `"sh"`},
		{Name: "sandboxd twice", Args: []string{"sandboxd", "--listen=:8080", "sandboxd"}, Refused: `"sandboxd"`},

		{Name: "workspace over the token", Volumes: workspaceAt("/var/run/airlock"), Refused: "/var/run/airlock"},
		{Name: "workspace over /var", Volumes: workspaceAt("/var"), Refused: "/var"},
		{Name: "workspace over /run (where /var/run points)", Volumes: workspaceAt("/run"), Refused: "/run"},
		{Name: "scratch under the token's directory", Volumes: scratchAt("tmp", "/var/run/airlock/auth/x"), Refused: "/var/run/airlock/auth/x"},
		{Name: "scratch at the warm key's directory", Volumes: scratchAt("tmp", "/var/run/airlock/warm"), Refused: "/var/run/airlock/warm"},
		{Name: "scratch at /run/airlock/, with a slash", Volumes: scratchAt("tmp", "/run/airlock/"), Refused: "/run/airlock/"},
		{Name: "scratch with a dot segment into the token", Volumes: scratchAt("tmp", "/var/run/x/../airlock"), Refused: "/var/run/x/../airlock"},
		{Name: "the token volume's name", Volumes: scratchAt("airlock-auth-token", "/cache"), Refused: "airlock-auth-token"},
		{Name: "the warm key volume's name", Volumes: scratchAt("airlock-warm-key", "/cache"), Refused: "airlock-warm-key"},
		{Name: "scratch beside the operator's directory", Volumes: scratchAt("tmp", "/var/run/airlockx")},

		{Name: "env reads a Secret", Env: envFrom("GITHUB_TOKEN", &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "deploy-keys"}, Key: "token"}}), Refused: "GITHUB_TOKEN"},
		{Name: "env reads a ConfigMap and the pod's fields", Env: append(
			envFrom("GOPROXY", &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "go"}, Key: "proxy"}}),
			corev1.EnvVar{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}})},
	}
}
