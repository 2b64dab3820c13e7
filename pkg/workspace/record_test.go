package workspace

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// TestRecordLookup: the list options select the record by its label and its name, and of a
// list only the Job of that name and namespace is the record (a list answered by a server that
// ignored the field selector, or a fake, may hold others).
func TestRecordLookup(t *testing.T) {
	name := RecordName("team-a/sandboxes/c1-0123abcd")
	if !strings.HasPrefix(name, "airlock-kept-") || len(name) != len("airlock-kept-")+20 {
		t.Errorf("RecordName = %q, want airlock-kept- and 20 hex digits", name)
	}
	opts := RecordListOptions(name)
	sel, err := labels.Parse(opts.LabelSelector)
	if err != nil || !sel.Matches(labels.Set{"airlock.dev/kept-workspace": "true"}) || sel.Matches(labels.Set{}) {
		t.Errorf("label selector %q (%v) does not select exactly the records' label", opts.LabelSelector, err)
	}
	fsel, err := fields.ParseSelector(opts.FieldSelector)
	if err != nil || !fsel.Matches(fields.Set{"metadata.name": name}) || fsel.Matches(fields.Set{"metadata.name": name + "x"}) {
		t.Errorf("field selector %q (%v) does not select exactly the name", opts.FieldSelector, err)
	}
	job := func(ns, n string) batchv1.Job {
		return batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n}}
	}
	jobs := []batchv1.Job{job("team-b", name), job("team-a", name+"x"), job("team-a", name)}
	if got := RecordIn(jobs, "team-a", name); got != &jobs[2] {
		t.Errorf("RecordIn = %v, want the third Job", got)
	}
	if got := RecordIn(jobs[:2], "team-a", name); got != nil {
		t.Errorf("RecordIn = %v of Jobs of other names and namespaces, want nil", got.ObjectMeta)
	}
}

// warmClaim is a claim of namespace ns, in its own directory, that adopted the warm member m.
func warmClaim(ns, m string) *airlockv1alpha1.SandboxClaim {
	return &airlockv1alpha1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: ns},
		Spec:       airlockv1alpha1.SandboxClaimSpec{RuntimeName: "agent", RuntimeUID: "uid-agent", WorkspaceDir: ns + "/sandboxes/c1-0123abcd"},
		Status:     airlockv1alpha1.SandboxClaimStatus{Warm: &airlockv1alpha1.WarmAdoption{Member: m, WorkspaceDir: MemberDir(ns, m)}},
	}
}

// TestWarmRecordKeptFor (issue 39): the record of a warm member's workspace is resumable and
// kept for the claim's own directory (LabelKeptFor); a claim resuming it works in the member's
// directory (status.workspaceDir), and keeps it again for its own. A record that says it is kept
// for another directory is the operator's only for a warm member's workspace.
func TestWarmRecordKeptFor(t *testing.T) {
	cfg := JobConfig{Image: "img", PodSecurity: func() *corev1.PodSecurityContext { return nil }, ContainerSecurity: func() *corev1.SecurityContext { return nil }}
	claim := warmClaim("team-a", "tools-codegen-aaaaaaaaaaaa")
	record := Record(claim, "workspace-content", cfg, time.Unix(0, 0))
	own := RecordName(claim.Spec.WorkspaceDir)
	if record.Labels[airlockv1alpha1.LabelKeptFor] != own || !RecordIsOurs(record) || record.Annotations[airlockv1alpha1.AnnotationKeptResumable] != "" {
		t.Errorf("record labels %v annotations %v ours %v, want kept for %s, resumable, the operator's", record.Labels, record.Annotations, RecordIsOurs(record), own)
	}
	resuming := claim.DeepCopy()
	resuming.Status.Warm = nil
	resuming.Status.WorkspaceDir = MemberDir("team-a", "tools-codegen-aaaaaaaaaaaa")
	if DirOf(resuming) != resuming.Status.WorkspaceDir || KeptForName(resuming) != own || !ResumableBy(record, resuming) {
		t.Errorf("resuming claim: dir %q kept-for %q resumable %v", DirOf(resuming), KeptForName(resuming), ResumableBy(record, resuming))
	}
	cold := claim.DeepCopy()
	cold.Status.Warm = nil
	if KeptForName(cold) != "" {
		t.Errorf("a claim in its own directory is kept for %q, want none", KeptForName(cold))
	}
	if _, ok := Record(cold, "workspace-content", cfg, time.Unix(0, 0)).Labels[airlockv1alpha1.LabelKeptFor]; ok {
		t.Error("a claim's own workspace's record says it is kept for another directory")
	}
	forged := Record(cold, "workspace-content", cfg, time.Unix(0, 0))
	forged.Labels[airlockv1alpha1.LabelKeptFor] = RecordName("team-a/sandboxes/someone-else")
	if RecordIsOurs(forged) {
		t.Error("a record of a claim's own directory kept for another directory is taken for the operator's")
	}
	if !IsMemberDir("team-a", "team-a/sandboxes/warm/m1") || IsMemberDir("team-a", "team-a/sandboxes/m1") ||
		IsMemberDir("team-a", "team-b/sandboxes/warm/m1") || IsMemberDir("team-a", "team-a/sandboxes/warm/m1/x") {
		t.Error("IsMemberDir says wrong")
	}
}

// TestHeldRecord: a held record is the workspace's record with why, its target and versions.
func TestHeldRecord(t *testing.T) {
	cfg := JobConfig{Image: "img", PodSecurity: func() *corev1.PodSecurityContext { return nil }, ContainerSecurity: func() *corev1.SecurityContext { return nil }}
	claim := warmClaim("team-a", "m1")
	claim.Status.Warm = nil
	claim.Spec.TargetPath = "out/web"
	held := HeldRecord(claim, "workspace-content", cfg, time.Unix(0, 0), strings.Repeat("x", 5000), 12)
	if !IsHeld(held) || !RecordIsOurs(held) || len(held.Annotations[airlockv1alpha1.AnnotationHeld]) != heldMessageMax ||
		held.Annotations[airlockv1alpha1.AnnotationHeldTarget] != "out/web" || HeldVersions(held) != 12 {
		t.Errorf("held record %v", held.Annotations)
	}
	held.Annotations[airlockv1alpha1.AnnotationHeldVersions] = "0"
	if HeldVersions(held) != DefaultTargetVersions {
		t.Errorf("HeldVersions of 0 = %d, want the default", HeldVersions(held))
	}
	if IsHeld(Record(claim, "workspace-content", cfg, time.Unix(0, 0))) {
		t.Error("a kept record is held")
	}
}
