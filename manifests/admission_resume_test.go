package manifests

// Resume members (docs/nothing-lost.md, "Resume members"; docs/security.md): a warm member
// created on a kept workspace. The policy admits the writes the operator makes of them (the
// member, its key Secret, the record naming it, its adoption, its deletion) and refuses a member
// that mounts anything but its own workspace or, for a resume member, a kept workspace of its
// namespace.

import (
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// msgMemberDir is the message of the rule on members' workspaces (a prefix suffices).
const msgMemberDir = "a warm member the airlock operator creates mounts only its own workspace"

// resumeRecord is the record of the claim's kept workspace in dir, as the claim controller keeps it.
func resumeRecord(claim *airlockv1alpha1.SandboxClaim, dir string) *batchv1.Job {
	c := claim.DeepCopy()
	c.Status.WorkspaceDir = dir
	job := workspace.Record(c, "workspace-content", sandboxpod.JobConfig("ghcr.io/airlock-dev/airlock:v0.1.0"), sandboxpodtest.T0)
	job.UID = k8stypes.UID("uid-" + job.Name)
	job.ResourceVersion = "11"
	return job
}

// resumeMember is the resume member the pool starts on kept's workspace.
func resumeMember(record *airlockv1alpha1.FrozenSandbox, kept *batchv1.Job) *corev1.Pod {
	reg := warmRegistry()
	key := sandboxpod.PoolKey(reg.UID, "codegen", record)
	return sandboxpod.ResumeMemberPod(reg, "codegen", key, sandboxpod.MemberName(reg.Name, "codegen"), record, kept)
}

// withSubPath returns pod with every workspace mount's subPath (and the annotation that names a
// resume member's directory, when it has one) set to dir.
func withSubPath(pod *corev1.Pod, dir string, annotation bool) *corev1.Pod {
	return with(pod, func(p *corev1.Pod) {
		for i := range p.Spec.Containers[0].VolumeMounts {
			if m := &p.Spec.Containers[0].VolumeMounts[i]; m.SubPath != "" {
				m.SubPath = dir
			}
		}
		if annotation {
			p.Annotations[airlockv1alpha1.AnnotationResumesDir] = dir
		}
	})
}

// TestPolicyAdmitsResumeMembers: the operator's writes of a resume member and of the record it
// waits on pass.
func TestPolicyAdmitsResumeMembers(t *testing.T) {
	policy, _ := loadPolicy(t)
	p := compile(t, policy)
	record := testRecord()
	claim := testClaim(record)
	ns := sandboxpodtest.Namespace
	kept := resumeRecord(claim, claim.Spec.WorkspaceDir)
	keptFor := resumeRecord(claim, workspace.MemberDir(ns, "tools-codegen-abcdefghijkl"))
	member := resumeMember(record, kept)
	live := admitted(member)
	named := with(kept, func(j *batchv1.Job) {
		j.Annotations[airlockv1alpha1.AnnotationResumeMember] = live.Name
		j.Annotations[airlockv1alpha1.AnnotationResumeMemberUID] = string(live.UID)
	})
	adopted := with(live, func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{sandboxpod.OwnerReference(claim)}
		for k, v := range sandboxpod.PodLabels(claim) {
			p.Labels[k] = v
		}
		for k, v := range workspace.ResumedLabels(kept) {
			p.Labels[k] = v
		}
	})
	tests := map[string]request{
		"a resume member": create(member),
		"a resume member of a warm member's kept workspace": create(resumeMember(record, keptFor)),
		"a resume member with egress":                       create(resumeMember(egressRecord(t), kept)),
		"its key Secret":                                    create(sandboxpod.MemberSecret(live, "key", "")),
		"its record naming it":                              update(kept, named),
		"its adoption":                                      update(live, adopted),
		"its deletion":                                      remove(live),
		"an ordinary member":                                create(memberPod(record)),
	}
	p.expectAdmitted(t, tests)
}

// TestPolicyRefusesMembersOnOtherWorkspaces: a warm member that mounts another workspace than its
// own, and a resume member that mounts anything but a kept workspace of its namespace (another
// namespace's, the sandboxes, sessions or warm directory itself, a session's, a path that climbs
// out, one its annotation does not name, a subPathExpr), or that is not created as an idle
// member saying which record and runtime it waits for, are refused by the rule, and by no other.
func TestPolicyRefusesMembersOnOtherWorkspaces(t *testing.T) {
	policy, _ := loadPolicy(t)
	p := compile(t, policy)
	record := testRecord()
	claim := testClaim(record)
	ns := sandboxpodtest.Namespace
	kept := resumeRecord(claim, claim.Spec.WorkspaceDir)
	member := resumeMember(record, kept)
	tests := map[string]*corev1.Pod{
		"a member on another member's workspace":    withSubPath(memberPod(record), workspace.MemberDir(ns, "tools-codegen-othermember1"), false),
		"a member on a claim's workspace":           withSubPath(memberPod(record), claim.Spec.WorkspaceDir, false),
		"a resume member of another namespace":      withSubPath(member, "other-ns/sandboxes/agent-0123456789-abcdef01", true),
		"a resume member on the sandboxes dir":      withSubPath(member, ns+"/sandboxes", true),
		"a resume member on the sessions dir":       withSubPath(member, ns+"/sandboxes/sessions", true),
		"a resume member on the warm dir":           withSubPath(member, ns+"/sandboxes/warm", true),
		"a resume member on a session's workspace":  withSubPath(member, ns+"/sandboxes/sessions/0123456789abcdef0123456789abcdef", true),
		"a resume member climbing out":              withSubPath(member, ns+"/sandboxes/../../etc", true),
		"a resume member on the content root":       withSubPath(member, "", true),
		"a resume member on a target":               withSubPath(member, "projects/x", true),
		"a resume member on a dir it does not name": withSubPath(member, ns+"/sandboxes/agent-9999999999-abcdef01", false),
		"a resume member with a subPathExpr": with(member, func(p *corev1.Pod) {
			for i := range p.Spec.Containers[0].VolumeMounts {
				if m := &p.Spec.Containers[0].VolumeMounts[i]; m.SubPath != "" {
					m.SubPath, m.SubPathExpr = "", ns+"/sandboxes/$(POD_NAME)"
				}
			}
		}),
		"a resume member without its record's UID": with(member, func(p *corev1.Pod) { delete(p.Labels, airlockv1alpha1.LabelResumesUID) }),
		"a resume member without its runtime's UID": with(member, func(p *corev1.Pod) {
			delete(p.Labels, airlockv1alpha1.LabelResumesRuntimeUID)
		}),
		"a resume member without its directory": with(member, func(p *corev1.Pod) { delete(p.Annotations, airlockv1alpha1.AnnotationResumesDir) }),
		"a resume member created adopted":       with(member, func(p *corev1.Pod) { p.Labels[airlockv1alpha1.LabelClaim] = claim.Name }),
		"a resume member named as another member": with(member, func(p *corev1.Pod) {
			p.Labels[airlockv1alpha1.LabelWarmMember] = "tools-codegen-othermember1"
		}),
		"a claim's pod labelled a resume member": with(claimPod(claim), func(p *corev1.Pod) { p.Labels[airlockv1alpha1.LabelResumes] = kept.Name }),
	}
	for name, pod := range tests {
		t.Run(name, func(t *testing.T) {
			applies, refused := p.admit(t, create(pod))
			if !applies {
				t.Fatal("the policy does not apply")
			}
			if name == "a resume member named as another member" {
				// Not named as itself, it is no member either.
				refused = slices.DeleteFunc(refused, func(m string) bool { return strings.HasPrefix(m, msgNoClaim) })
			}
			if len(refused) != 1 || !strings.HasPrefix(refused[0], msgMemberDir) {
				t.Fatalf("refused by:\n%s\nwant only %q", strings.Join(refused, "\n"), msgMemberDir)
			}
		})
	}
}
