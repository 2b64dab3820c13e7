package sandboxpod

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/egress/policy"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
	"github.com/airlock-dev/airlock/pkg/toolnames"
)

// TestFreeze: the record spells out every default of the class and the entry; an entry that
// allows every tool is written as the full list of sandboxd's tools.
func TestFreeze(t *testing.T) {
	class := &airlockv1alpha1.SandboxClass{
		ObjectMeta: metav1.ObjectMeta{Name: "bare", Generation: 7},
		Spec:       airlockv1alpha1.SandboxClassSpec{Image: "example.com/sandbox:v1"},
	}
	entry := &airlockv1alpha1.RegistrySandbox{Name: "codegen", Class: "bare"}
	got := Freeze(class, entry)
	var all []airlockv1alpha1.ToolName
	for _, name := range toolnames.All() {
		all = append(all, airlockv1alpha1.ToolName(name))
	}
	want := &airlockv1alpha1.FrozenSandbox{
		ClassGeneration:    7,
		Image:              "example.com/sandbox:v1",
		Args:               []string{"sandboxd", "--listen=:8080"}, // the operator passes --workspace
		Ports:              []airlockv1alpha1.SandboxPort{{Name: "mcp", Port: 8080}},
		WorkspaceClaimName: "workspace-content",
		WorkspacePath:      "/workspace",
		AllowedTools:       all,
		StartupTimeout:     metav1.Duration{Duration: 5 * time.Minute},
		// A class without resources is bounded by the defaults (resources.go).
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{"cpu": resource.MustParse("100m"), "memory": resource.MustParse("256Mi"), "ephemeral-storage": resource.MustParse("512Mi")},
			Limits:   corev1.ResourceList{"cpu": resource.MustParse("2"), "memory": resource.MustParse("4Gi"), "ephemeral-storage": resource.MustParse("10Gi")},
		},
	}
	if diff := cmp.Diff(want, got, quantityEqual); diff != "" {
		t.Errorf("record of a bare class and an entry allowing every tool (-want +got):\n%s", diff)
	}

	// The record shares nothing with the class or the entry: editing them later changes nothing.
	full := sandboxpodtest.Class("codegen")
	full.Spec.AllowedServices = []airlockv1alpha1.ServiceReference{{Namespace: "infra", Name: "proxy"}}
	fullEntry := &sandboxpodtest.Registry("tools", "").Spec.Sandboxes[0]
	record := Freeze(full, fullEntry)
	before := record.DeepCopy()
	full.Spec.Args[0] = "edited"
	full.Spec.Env[0].Value = "edited"
	full.Spec.AllowedServices[0].Name = "edited"
	fullEntry.AllowedTools[0] = "Write"
	if diff := cmp.Diff(before, record); diff != "" {
		t.Errorf("record changed with its class and entry (-before +after):\n%s", diff)
	}
}

// TestClassConflict: a class volume that takes the name or the mount path of the claim's token,
// or of a warm member's key, makes the class unbuildable, for claims and members alike.
func TestClassConflict(t *testing.T) {
	tests := map[string]struct {
		volume airlockv1alpha1.SandboxVolume
		want   string // a part of the message; "" for none
	}{
		"token volume's name":      {airlockv1alpha1.SandboxVolume{Name: TokenVolumeName, MountPath: "/x"}, "the claim's token"},
		"token's mount path":       {airlockv1alpha1.SandboxVolume{Name: "x", MountPath: TokenMountPath}, "the claim's token"},
		"member key volume's name": {airlockv1alpha1.SandboxVolume{Name: memberKeyVolumeName, MountPath: "/x"}, "warm member's key"},
		"member key's mount path":  {airlockv1alpha1.SandboxVolume{Name: "x", MountPath: MemberKeyMountPath}, "warm member's key"},
		"a volume of its own":      {airlockv1alpha1.SandboxVolume{Name: "x", MountPath: "/x"}, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			class := sandboxpodtest.Class("codegen")
			class.Spec.Volumes = append(class.Spec.Volumes, tc.volume)
			got := ClassConflict(class)
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("ClassConflict = %q, want %q", got, tc.want)
			}
		})
	}
	if got := ClassConflict(sandboxpodtest.Class("codegen")); got != "" {
		t.Errorf("the fixtures' class conflicts: %q", got)
	}
}

// TestEveryClassFieldReachesTheRecord: every field of SandboxClassSpec either reaches the frozen
// record (set on the class, found in the record) or is listed here as deliberately left out, so
// that a field added to the class cannot be silently dropped at admission (or silently read from
// the live class under a running sandbox).
func TestEveryClassFieldReachesTheRecord(t *testing.T) {
	runtimeClass := "gvisor"
	size := resource.MustParse("1Gi")
	// reaches sets a field on the class and checks that the record carries it.
	reaches := map[string]func(spec *airlockv1alpha1.SandboxClassSpec) func(r *airlockv1alpha1.FrozenSandbox) bool{
		"Image": func(s *airlockv1alpha1.SandboxClassSpec) func(*airlockv1alpha1.FrozenSandbox) bool {
			s.Image = "example.com/other:v2"
			return func(r *airlockv1alpha1.FrozenSandbox) bool { return r.Image == "example.com/other:v2" }
		},
		"Args": func(s *airlockv1alpha1.SandboxClassSpec) func(*airlockv1alpha1.FrozenSandbox) bool {
			s.Args = []string{"sandboxd", "--listen=:9090"}
			return func(r *airlockv1alpha1.FrozenSandbox) bool {
				return cmp.Equal(r.Args, []string{"sandboxd", "--listen=:9090"})
			}
		},
		"Ports": func(s *airlockv1alpha1.SandboxClassSpec) func(*airlockv1alpha1.FrozenSandbox) bool {
			s.Ports = []airlockv1alpha1.SandboxPort{{Name: "alt", Port: 9090}}
			return func(r *airlockv1alpha1.FrozenSandbox) bool { return len(r.Ports) == 1 && r.Ports[0].Port == 9090 }
		},
		"Env": func(s *airlockv1alpha1.SandboxClassSpec) func(*airlockv1alpha1.FrozenSandbox) bool {
			s.Env = []corev1.EnvVar{{Name: "GOFLAGS", Value: "-mod=mod"}}
			return func(r *airlockv1alpha1.FrozenSandbox) bool { return len(r.Env) == 1 && r.Env[0].Value == "-mod=mod" }
		},
		"Resources": func(s *airlockv1alpha1.SandboxClassSpec) func(*airlockv1alpha1.FrozenSandbox) bool {
			s.Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: size}}
			return func(r *airlockv1alpha1.FrozenSandbox) bool {
				got := r.Resources.Limits[corev1.ResourceMemory]
				return got.Cmp(size) == 0
			}
		},
		"RuntimeClassName": func(s *airlockv1alpha1.SandboxClassSpec) func(*airlockv1alpha1.FrozenSandbox) bool {
			s.RuntimeClassName = &runtimeClass
			return func(r *airlockv1alpha1.FrozenSandbox) bool {
				return r.RuntimeClassName != nil && *r.RuntimeClassName == runtimeClass
			}
		},
		"Isolation": func(s *airlockv1alpha1.SandboxClassSpec) func(*airlockv1alpha1.FrozenSandbox) bool {
			s.Isolation = &airlockv1alpha1.SandboxIsolation{Kernel: airlockv1alpha1.KernelDedicated}
			return NeedsDedicatedKernel
		},
		"Volumes": func(s *airlockv1alpha1.SandboxClassSpec) func(*airlockv1alpha1.FrozenSandbox) bool {
			s.Volumes = append(s.Volumes, airlockv1alpha1.SandboxVolume{Name: "tmp", MountPath: "/tmp", Scratch: &airlockv1alpha1.ScratchVolumeSource{}})
			return func(r *airlockv1alpha1.FrozenSandbox) bool {
				return slices.ContainsFunc(r.Volumes, func(v airlockv1alpha1.SandboxVolume) bool { return v.Name == "tmp" })
			}
		},
		"WorkspaceClaimName": func(s *airlockv1alpha1.SandboxClassSpec) func(*airlockv1alpha1.FrozenSandbox) bool {
			s.WorkspaceClaimName = "other-content"
			return func(r *airlockv1alpha1.FrozenSandbox) bool { return r.WorkspaceClaimName == "other-content" }
		},
		"AllowedServices": func(s *airlockv1alpha1.SandboxClassSpec) func(*airlockv1alpha1.FrozenSandbox) bool {
			s.AllowedServices = []airlockv1alpha1.ServiceReference{{Namespace: "infra", Name: "proxy"}}
			return func(r *airlockv1alpha1.FrozenSandbox) bool {
				return len(r.AllowedServices) == 1 && r.AllowedServices[0].Name == "proxy"
			}
		},
		"Egress": func(s *airlockv1alpha1.SandboxClassSpec) func(*airlockv1alpha1.FrozenSandbox) bool {
			s.Egress = &airlockv1alpha1.SandboxEgress{
				Hosts:       []airlockv1alpha1.EgressHost{{Host: "proxy.golang.org", Ports: []airlockv1alpha1.EgressPort{443}, AllowPrivate: true}},
				Credentials: []airlockv1alpha1.EgressCredential{{Host: "github.com", Port: 443, Header: "Authorization", SecretName: "gh"}},
			}
			return func(r *airlockv1alpha1.FrozenSandbox) bool {
				return r.Egress != nil && cmp.Equal(r.Egress.Hosts, s.Egress.Hosts) && cmp.Equal(r.Egress.Credentials, s.Egress.Credentials) &&
					r.Egress.Gateway.Address == "" // the gateway is the operator's, frozen by the claim controller
			}
		},
		"StartupTimeout": func(s *airlockv1alpha1.SandboxClassSpec) func(*airlockv1alpha1.FrozenSandbox) bool {
			s.StartupTimeout = &metav1.Duration{Duration: 42 * time.Second}
			return func(r *airlockv1alpha1.FrozenSandbox) bool { return r.StartupTimeout.Duration == 42*time.Second }
		},
	}
	// leftOut are the class fields the record deliberately does not carry, and why.
	leftOut := map[string]string{}
	fields := reflect.TypeFor[airlockv1alpha1.SandboxClassSpec]()
	for i := range fields.NumField() {
		name := fields.Field(i).Name
		check, ok := reaches[name]
		if !ok {
			if _, ok := leftOut[name]; !ok {
				t.Errorf("SandboxClassSpec.%s neither reaches the frozen record (add it to Freeze and to this test) nor is marked as left out", name)
			}
			continue
		}
		class := sandboxpodtest.Class("codegen")
		carried := check(&class.Spec)
		if record := Freeze(class, &sandboxpodtest.Registry("tools", "").Spec.Sandboxes[0]); !carried(record) {
			t.Errorf("SandboxClassSpec.%s set on the class does not reach the record %+v", name, record)
		}
		delete(reaches, name)
	}
	for name := range reaches {
		t.Errorf("the test checks %s, which SandboxClassSpec does not have", name)
	}
}

// recordWrittenBefore is status.frozen as the operator at 54d722f (the last one before
// pkg/sandboxpod) wrote it for the fixtures' class and registry entry, and poolKeyBefore the pool
// key it gave that record for the registry uid-reg-tools. poolKeyToday is the key of today's
// record of them: the record changed once, deliberately, when the operator's flags moved before
// the class's (issue 23: WorkspacePath, and the class's --workspace left out), so that a member
// built in the older layout is stale and replaced while idle, never adopted by a claim whose pod
// is built in the new one.
const (
	recordWrittenBefore = `{"classGeneration":0,"image":"ghcr.io/airlock-dev/airlock-sandbox:v0.1.0","args":["sandboxd","--listen=:8080","--workspace=/workspace"],"ports":[{"name":"mcp","port":8080}],"env":[{"name":"HOME","value":"/sandbox-cache/home"}],"resources":{"limits":{"cpu":"2","ephemeral-storage":"10Gi","memory":"4Gi"},"requests":{"cpu":"100m","ephemeral-storage":"512Mi","memory":"256Mi"}},"volumes":[{"name":"workspace","mountPath":"/workspace","workspace":{}},{"name":"cache","mountPath":"/sandbox-cache","scratch":{"sizeLimit":"4Gi"}}],"workspaceClaimName":"workspace-content","allowedTools":["Read","Bash"],"startupTimeout":"5m0s"}`
	poolKeyBefore       = "1f9e73f9eae04ab8c8be"
	poolKeyToday        = "a202b03b7e873c832f2d"
)

// TestPoolKeyStable: a record an older operator wrote keeps its pool key when read by this one,
// and today's Freeze of the same class and entry gives today's key (a frozen field added without
// omitempty would change every key, on every upgrade).
func TestPoolKeyStable(t *testing.T) {
	var old airlockv1alpha1.FrozenSandbox
	if err := json.Unmarshal([]byte(recordWrittenBefore), &old); err != nil {
		t.Fatal(err)
	}
	if got := PoolKey("uid-reg-tools", "codegen", &old); got != poolKeyBefore {
		t.Errorf("pool key of a record written before = %s, want %s", got, poolKeyBefore)
	}
	today := Freeze(sandboxpodtest.Class("codegen"), &sandboxpodtest.Registry("tools", "").Spec.Sandboxes[0])
	if got := PoolKey("uid-reg-tools", "codegen", today); got != poolKeyToday {
		t.Errorf("pool key of today's record = %s, want %s", got, poolKeyToday)
	}
	// The older record is built as it was frozen: its args, then the operator's flags.
	if got, want := MemberArgs(&old), []string{"sandboxd", "--listen=:8080", "--workspace=/workspace", "--warm-key-file=" + MemberKeyFile}; !slices.Equal(got, want) {
		t.Errorf("member args of a record written before = %q, want %q", got, want)
	}
	if got, want := ClaimArgs(&old), []string{"sandboxd", "--listen=:8080", "--workspace=/workspace", "--allowed-tools=Read,Bash", "--auth-token-file=" + TokenFile}; !slices.Equal(got, want) {
		t.Errorf("claim args of a record written before = %q, want %q", got, want)
	}
	// A claim's record holds the sync image it froze; its pool's members run no Job, and a
	// claim adopts only members of its record's key: the image is not part of it.
	withImage := today.DeepCopy()
	withImage.SyncImage = "example.com/airlock-sync:v2"
	if got := PoolKey("uid-reg-tools", "codegen", withImage); got != poolKeyToday {
		t.Errorf("pool key of today's record with a sync image = %s, want %s", got, poolKeyToday)
	}
	if today.SyncImage != "" || withImage.SyncImage == "" {
		t.Error("PoolKey changed the record it was given")
	}
	if got := PoolKey("uid-reg-other", "codegen", today); got == poolKeyBefore {
		t.Error("the pool key does not depend on the registry's UID")
	}
	// Every field the record had then; any other must be omitted when empty.
	before := map[string]bool{"ClassGeneration": true, "Image": true, "Args": true, "Ports": true, "Env": true,
		"Resources": true, "RuntimeClassName": true, "Volumes": true, "WorkspaceClaimName": true,
		"AllowedTools": true, "AllowedServices": true, "StartupTimeout": true}
	fields := reflect.TypeFor[airlockv1alpha1.FrozenSandbox]()
	for i := range fields.NumField() {
		f := fields.Field(i)
		tag := f.Tag.Get("json")
		if !before[f.Name] && !strings.Contains(tag, ",omitempty") && !strings.Contains(tag, ",omitzero") {
			t.Errorf("FrozenSandbox.%s (json %q) is new and not omitted when empty: every pool key would change on upgrade", f.Name, tag)
		}
	}
}

// TestDefaulted: a record written without the defaults (by an operator before records spelled
// them out) builds the pod a complete record builds, and is not changed; a complete record is
// used as it is.
func TestDefaulted(t *testing.T) {
	complete := Freeze(sandboxpodtest.Class("codegen"), &sandboxpodtest.Registry("tools", "").Spec.Sandboxes[0])
	if Defaulted(complete) != complete {
		t.Error("a complete record is copied")
	}
	bare := complete.DeepCopy()
	bare.Args, bare.Ports, bare.WorkspaceClaimName, bare.StartupTimeout = nil, nil, "", metav1.Duration{}
	kept := bare.DeepCopy()
	claim := sandboxpodtest.Claim("c1", "s1", airlockv1alpha1.ClaimBinding, sandboxpodtest.T0)
	want := ClaimPod(claim, Defaulted(Freeze(&airlockv1alpha1.SandboxClass{Spec: airlockv1alpha1.SandboxClassSpec{
		Image: complete.Image, Env: complete.Env, Volumes: complete.Volumes, Resources: complete.Resources,
	}}, &sandboxpodtest.Registry("tools", "").Spec.Sandboxes[0])))
	got := ClaimPod(claim, bare)
	if diff := cmp.Diff(want.Spec, got.Spec); diff != "" {
		t.Errorf("pod of a record without defaults (-defaulted +got):\n%s", diff)
	}
	if diff := cmp.Diff(kept, bare); diff != "" {
		t.Errorf("building changed the record (-before +after):\n%s", diff)
	}
	if StartupTimeout(bare) != DefaultStartupTimeout || len(Ports(bare)) != 1 || Ports(bare)[0].Port != 8080 {
		t.Errorf("startup timeout %s, ports %v: want the defaults", StartupTimeout(bare), Ports(bare))
	}
}

// TestClassConflictAsksTheCompiler: a class whose egress the gateway's compiler refuses cannot be
// built, with the compiler's reason; a class without egress, or with a host list the compiler
// takes, can.
func TestClassConflictAsksTheCompiler(t *testing.T) {
	class := sandboxpodtest.Class("codegen")
	if got := ClassConflict(class); got != "" {
		t.Errorf("a class without egress: %q", got)
	}
	class.Spec.Egress = &airlockv1alpha1.SandboxEgress{Hosts: []airlockv1alpha1.EgressHost{{Host: "*.com", Ports: []airlockv1alpha1.EgressPort{443}}}}
	want := policy.CheckClass(class.Spec.Egress)
	if want == nil {
		t.Fatal("the compiler took a wildcard of a top-level domain")
	}
	if got := ClassConflict(class); !strings.Contains(got, want.Error()) {
		t.Errorf("ClassConflict = %q, want the compiler's reason %q", got, want)
	}
	class.Spec.Egress = &airlockv1alpha1.SandboxEgress{Hosts: []airlockv1alpha1.EgressHost{{Host: "proxy.golang.org", Ports: []airlockv1alpha1.EgressPort{443}}}}
	if got := ClassConflict(class); got != "" {
		t.Errorf("a host list the compiler takes: %q", got)
	}
}
