package workspace

// Kept workspaces (issue 24 item 4; docs/nothing-lost.md, "Resume without loss").
//
// Once a reaped or closed claim's work is saved (its sync-back Job succeeded, or it has no
// targetPath), its workspace is kept, not removed: the claim controller writes a record of it and
// deletes the claim. The record is a suspended Job, the workspace's cleanup Job (`airlock sync
// --remove-only`), named after the workspace directory (RecordName), with no owner: it survives
// the claim, the runtime, an operator restart and a leader change. Its annotations say whose
// workspace it is (the runtime's name and UID), which directory, and when it was kept.
//
// Resume. A new claim whose workspace is that directory, of the same runtime name and UID
// (ResumableBy), takes the record before its pod is created, and its pod carries the labels that
// say so (ResumedLabels, read back by Resumed). Any other claim on that directory waits for the
// record's collection (pkg/controller/workspacegc), which unsuspends the Job when the runtime's
// workspaceRetention (Retention) has passed since it was kept, or at once when its runtime is gone
// or the workspace cannot be resumed.

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimname"
)

// Annotations of a kept workspace's record and labels of a pod that resumed one, beside the API's
// (airlockv1alpha1.LabelKeptWorkspace, AnnotationKeptRuntimeUID, AnnotationKeptDir,
// AnnotationKeptResumable).
const (
	// AnnotationKeptAt is when the workspace was kept (RFC 3339).
	AnnotationKeptAt = "airlock.dev/kept-at"
	// AnnotationCollected says why a record is being collected (Collected*).
	AnnotationCollected = "airlock.dev/collected"

	// LabelResumedKeptAt is on a pod that resumed a kept workspace: when it was kept (Unix
	// seconds); LabelResumedKeptBy names the claim that left it.
	LabelResumedKeptAt = "airlock.dev/resumed-kept-at"
	LabelResumedKeptBy = "airlock.dev/resumed-kept-by"
)

// Why a record is collected (AnnotationCollected).
const (
	CollectedRetentionPassed = "RetentionPassed"
	CollectedRuntimeGone     = "RuntimeGone"
	CollectedNotResumable    = "NotResumable"
)

// recordBackoffLimit is the backoffLimit of a record's Job once it is unsuspended (collected).
const recordBackoffLimit = 3

// recordPrefix and recordHashLen make the name of a kept workspace's record.
const (
	recordPrefix  = "airlock-kept-"
	recordHashLen = 20
)

// RecordName is the name of the record (a Job) of the kept workspace directory dir: one per
// directory, "airlock-kept-" and the first 20 hex digits of sha256(dir).
func RecordName(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return recordPrefix + hex.EncodeToString(sum[:])[:recordHashLen]
}

// RecordListOptions select the one record named name, by the records' label and the name:
// the operator may list Jobs, not get them, so the claim controller and the Sandbox API read a
// record fresh from the API server with a list of these options (and RecordIn).
func RecordListOptions(name string) metav1.ListOptions {
	return metav1.ListOptions{
		LabelSelector: airlockv1alpha1.LabelKeptWorkspace + "=" + airlockv1alpha1.LabelValueKeptWorkspace,
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(),
	}
}

// RecordIn returns the Job named name in namespace among jobs (a list of RecordListOptions), or
// nil when there is none.
func RecordIn(jobs []batchv1.Job, namespace, name string) *batchv1.Job {
	for i := range jobs {
		if jobs[i].Name == name && jobs[i].Namespace == namespace {
			return &jobs[i]
		}
	}
	return nil
}

// IsRecord says whether the Job is a kept workspace's record (or its collection).
func IsRecord(job *batchv1.Job) bool {
	return job.Labels[airlockv1alpha1.LabelKeptWorkspace] == airlockv1alpha1.LabelValueKeptWorkspace && len(job.OwnerReferences) == 0
}

// RecordIsOurs says whether the record is of the shape this operator writes: a kept workspace's
// record of a directory the operator may remove, named after it, running exactly the cleanup it
// builds for it (the image may be an earlier version's --sync-image). Anything else wearing the
// label (a Job someone else made in the namespace) is neither collected nor taken, nor waited
// for: fail closed.
func RecordIsOurs(job *batchv1.Job) bool {
	dir := job.Annotations[airlockv1alpha1.AnnotationKeptDir]
	if !IsRecord(job) || job.Name != RecordName(dir) ||
		ValidateRemovable(dir, SandboxesDir(job.Namespace)) != nil {
		return false
	}
	if kept, ok := job.Labels[airlockv1alpha1.LabelKeptFor]; ok && (kept == job.Name || !IsMemberDir(job.Namespace, dir)) {
		return false // only a warm member's workspace is kept for another directory
	}
	containers := job.Spec.Template.Spec.Containers
	want := RecordArgs(job.Namespace, dir)
	return len(containers) == 1 && len(job.Spec.Template.Spec.InitContainers) == 0 &&
		len(containers[0].Command) == 0 && slices.Equal(containers[0].Args, want)
}

// RecordArgs are the arguments of the cleanup Job of a kept workspace.
func RecordArgs(namespace, dir string) []string {
	return []string{"sync", "--content-root=" + ContentMountPath, "--from=" + dir, "--remove-only",
		"--sandboxes-dir=" + SandboxesDir(namespace)}
}

// Retention is the runtime's workspaceRetention, defaulted.
func Retention(rt *airlockv1alpha1.AgentRuntime) time.Duration {
	if rt == nil || rt.Spec.Sandbox.WorkspaceRetention == nil || rt.Spec.Sandbox.WorkspaceRetention.Duration < 0 {
		return airlockv1alpha1.DefaultWorkspaceRetention
	}
	return rt.Spec.Sandbox.WorkspaceRetention.Duration
}

// Record returns the record of the claim's workspace: its cleanup Job, suspended.
func Record(claim *airlockv1alpha1.SandboxClaim, contentClaimName string, cfg JobConfig, now time.Time) *batchv1.Job {
	dir := DirOf(claim)
	args := RecordArgs(claim.Namespace, dir)
	annotations := map[string]string{
		airlockv1alpha1.AnnotationKeptRuntimeUID: string(admission.RuntimeUID(claim)),
		airlockv1alpha1.AnnotationKeptDir:        dir,
		AnnotationKeptAt:                         now.UTC().Format(time.RFC3339),
	}
	jobLabels := map[string]string{
		airlockv1alpha1.LabelClaim: claim.Name,
		// The claim's UID and shard: the admission policy holds the Job to that claim's record
		// (its PVC and sync image) while the claim exists, and never to a newer claim's of the
		// same name.
		airlockv1alpha1.LabelClaimUID:      string(claim.UID),
		airlockv1alpha1.LabelClaimShard:    claimname.Shard(claim.Name),
		airlockv1alpha1.LabelRuntime:       claim.Spec.RuntimeName,
		airlockv1alpha1.LabelKeptWorkspace: airlockv1alpha1.LabelValueKeptWorkspace,
		// The registry sandbox: the pool whose resume member may wait on it (ResumeMember).
		airlockv1alpha1.LabelSandbox: claim.Spec.Sandbox,
	}
	if kept := KeptForName(claim); kept != "" {
		jobLabels[airlockv1alpha1.LabelKeptFor] = kept
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:        RecordName(dir),
			Namespace:   claim.Namespace,
			Labels:      jobLabels,
			Annotations: annotations,
		},
		Spec: batchv1.JobSpec{
			Suspend:               ptr.To(true),
			BackoffLimit:          ptr.To[int32](recordBackoffLimit),
			ActiveDeadlineSeconds: ptr.To(int64(SyncDeadline / time.Second)),
			Template:              SyncPodTemplate(RecordName(dir), contentClaimName, cfg, args),
		},
	}
}

// KeptForName is the LabelKeptFor of the record of the claim's workspace: the record name of its
// own directory (spec.workspaceDir) when it works in a warm member's (adopted, or resumed), so
// that the next claim of the same runtime, session and handle finds it; "" otherwise.
func KeptForName(claim *airlockv1alpha1.SandboxClaim) string {
	dir := DirOf(claim)
	if dir == claim.Spec.WorkspaceDir || !IsMemberDir(claim.Namespace, dir) ||
		ValidateRemovable(claim.Spec.WorkspaceDir, SandboxesDir(claim.Namespace)) != nil {
		return ""
	}
	return RecordName(claim.Spec.WorkspaceDir)
}

// KeptForListOptions select the records of warm members' workspaces kept for the directory whose
// record name is name (LabelKeptFor): a claim whose own directory that is resumes one of them.
func KeptForListOptions(name string) metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: labels.SelectorFromSet(KeptForSelector(name)).String()}
}

// KeptForSelector is the label set of KeptForListOptions.
func KeptForSelector(name string) labels.Set {
	return labels.Set{
		airlockv1alpha1.LabelKeptWorkspace: airlockv1alpha1.LabelValueKeptWorkspace,
		airlockv1alpha1.LabelKeptFor:       name,
	}
}

// HeldRecord is the record of the claim's workspace when its sync-back gave up (message: why):
// Record, held (AnnotationHeld), with the target and its versions that a retry copies it into.
func HeldRecord(claim *airlockv1alpha1.SandboxClaim, contentClaimName string, cfg JobConfig, now time.Time, message string, versions int32) *batchv1.Job {
	job := Record(claim, contentClaimName, cfg, now)
	job.Annotations[airlockv1alpha1.AnnotationHeld] = truncate(message, heldMessageMax)
	job.Annotations[airlockv1alpha1.AnnotationHeldTarget] = claim.Spec.TargetPath
	job.Annotations[airlockv1alpha1.AnnotationHeldVersions] = strconv.Itoa(int(versions))
	return job
}

// heldMessageMax bounds the message a held record carries.
const heldMessageMax = 2048

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// IsHeld says whether the record is of a workspace whose sync-back gave up, not released.
func IsHeld(job *batchv1.Job) bool {
	_, held := job.Annotations[airlockv1alpha1.AnnotationHeld]
	return held
}

// HeldVersions is the target versions a held record's retry keeps (DefaultTargetVersions when
// it does not say).
func HeldVersions(job *batchv1.Job) int32 {
	n, err := strconv.Atoi(job.Annotations[airlockv1alpha1.AnnotationHeldVersions])
	if err != nil || n < 1 || n > MaxTargetVersions {
		return DefaultTargetVersions
	}
	return int32(n)
}

// RetryJobName is the name of the Job that retries a held record's sync-back.
func RetryJobName(record string) string {
	return record + "-retry"
}

// RetryTarget is the target a held record's retry copies into, when a person asked for the retry
// (AnnotationHeldAction retry); ok is false for any other record.
func RetryTarget(record *batchv1.Job) (target string, ok bool) {
	if !IsRecord(record) || !IsHeld(record) || record.Annotations[airlockv1alpha1.AnnotationHeldAction] != airlockv1alpha1.HeldActionRetry {
		return "", false
	}
	target = record.Annotations[airlockv1alpha1.AnnotationHeldTarget]
	return target, target != ""
}

// RetryJob is the Job that copies a held record's workspace into its target again (the
// sync-back that gave up, once more): a child of the record, so that it goes with it; its pod
// is a sync-back pod of the claim that kept it (LabelSyncOf), so that no collection runs beside
// it. It does not retry by itself; a person asks again. It runs the record's own image
// (RecordImage), as the claim's sync-back did.
func RetryJob(record *batchv1.Job, contentClaimName string, cfg JobConfig) *batchv1.Job {
	dir := record.Annotations[airlockv1alpha1.AnnotationKeptDir]
	args := append([]string{"sync", "--content-root=" + ContentMountPath, "--from=" + dir,
		"--to=" + record.Annotations[airlockv1alpha1.AnnotationHeldTarget]}, KeepVersionsArgs(HeldVersions(record))...)
	claim := record.Labels[airlockv1alpha1.LabelClaim]
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:            RetryJobName(record.Name),
			Namespace:       record.Namespace,
			Labels:          retryLabels(record, claim),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(record, batchv1.SchemeGroupVersion.WithKind("Job"))},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr.To[int32](0),
			ActiveDeadlineSeconds: ptr.To(int64(SyncDeadline / time.Second)),
			Template:              SyncPodTemplate(claim, contentClaimName, cfg, args),
		},
	}
}

// retryLabels are a retry Job's labels: its record's claim, with its shard (every Job that names a
// claim carries it) and, when the record has it, the claim's UID; and the record it retries.
func retryLabels(record *batchv1.Job, claim string) map[string]string {
	l := map[string]string{
		airlockv1alpha1.LabelClaim:      claim,
		airlockv1alpha1.LabelClaimShard: claimname.Shard(claim),
		airlockv1alpha1.LabelRuntime:    record.Labels[airlockv1alpha1.LabelRuntime],
		airlockv1alpha1.LabelRetryOf:    record.Name,
	}
	if uid := record.Labels[airlockv1alpha1.LabelClaimUID]; uid != "" {
		l[airlockv1alpha1.LabelClaimUID] = uid
	}
	return l
}

// RecordImage is the image the record's Job runs (the claim's frozen sync image, or the
// operator's --sync-image when it was written), or fallback when it has none.
func RecordImage(record *batchv1.Job, fallback string) string {
	if cs := record.Spec.Template.Spec.Containers; len(cs) > 0 && cs[0].Image != "" {
		return cs[0].Image
	}
	return fallback
}

// KeptAt is when the record's workspace was kept (its creation, when the annotation is unreadable).
func KeptAt(record *batchv1.Job) time.Time {
	keptAt, err := time.Parse(time.RFC3339, record.Annotations[AnnotationKeptAt])
	if err != nil {
		return record.CreationTimestamp.Time
	}
	return keptAt
}

// ResumeMember is the resume member the record names (AnnotationResumeMember, its UID): the one
// warm member that may wait on its workspace ("" when none does).
func ResumeMember(record *batchv1.Job) (string, types.UID) {
	return record.Annotations[airlockv1alpha1.AnnotationResumeMember], types.UID(record.Annotations[airlockv1alpha1.AnnotationResumeMemberUID])
}

// NamesResumeMember says whether the record names the pod as its resume member, and the pod was
// started for this very record (its UID) and its directory.
func NamesResumeMember(record *batchv1.Job, pod *corev1.Pod) bool {
	name, uid := ResumeMember(record)
	return name != "" && name == pod.Name && uid == pod.UID &&
		pod.Labels[airlockv1alpha1.LabelResumes] == record.Name &&
		pod.Labels[airlockv1alpha1.LabelResumesUID] == string(record.UID) &&
		pod.Annotations[airlockv1alpha1.AnnotationResumesDir] == record.Annotations[airlockv1alpha1.AnnotationKeptDir]
}

// Resumable says whether the record is one a claim may take now: the operator's, suspended (not
// being collected), not being deleted, resumable, and not held for a retry of its sync-back.
func Resumable(record *batchv1.Job) bool {
	return RecordIsOurs(record) && record.DeletionTimestamp == nil && ptr.Deref(record.Spec.Suspend, false) &&
		record.Annotations[airlockv1alpha1.AnnotationKeptResumable] != airlockv1alpha1.AnnotationValueNotResumable &&
		!(IsHeld(record) && record.Annotations[airlockv1alpha1.AnnotationHeldAction] == airlockv1alpha1.HeldActionRetry)
}

// ResumedLabels are the labels of a pod that resumed the record's workspace.
func ResumedLabels(record *batchv1.Job) map[string]string {
	keptAt := KeptAt(record)
	return map[string]string{
		LabelResumedKeptAt: strconv.FormatInt(keptAt.Unix(), 10),
		LabelResumedKeptBy: record.Labels[airlockv1alpha1.LabelClaim],
	}
}

// ResumableBy says whether the claim may resume the record's workspace: the same runtime, by
// name and UID, and a workspace a claim may resume.
func ResumableBy(record *batchv1.Job, claim *airlockv1alpha1.SandboxClaim) bool {
	return record.Annotations[airlockv1alpha1.AnnotationKeptResumable] != airlockv1alpha1.AnnotationValueNotResumable &&
		record.Labels[airlockv1alpha1.LabelRuntime] == claim.Spec.RuntimeName &&
		record.Annotations[airlockv1alpha1.AnnotationKeptRuntimeUID] != "" &&
		record.Annotations[airlockv1alpha1.AnnotationKeptRuntimeUID] == string(admission.RuntimeUID(claim))
}

// Resumed is the status.resumedWorkspace of a claim whose pod carries the labels of a resumed
// workspace (nil when it does not).
func Resumed(pod *corev1.Pod) *airlockv1alpha1.ResumedWorkspace {
	if pod == nil {
		return nil
	}
	return ResumedOf(pod.Labels)
}

// ResumedOf is the status.resumedWorkspace that a pod's resume labels (ResumedLabels) say (nil
// when they say none).
func ResumedOf(podLabels map[string]string) *airlockv1alpha1.ResumedWorkspace {
	if podLabels[LabelResumedKeptAt] == "" {
		return nil
	}
	secs, err := strconv.ParseInt(podLabels[LabelResumedKeptAt], 10, 64)
	if err != nil {
		return nil
	}
	return &airlockv1alpha1.ResumedWorkspace{KeptAt: metav1.NewTime(time.Unix(secs, 0).UTC()), KeptBy: podLabels[LabelResumedKeptBy]}
}

// conditionReady is the type of a claim's Ready condition (the claim controller's ConditionReady).
const conditionReady = "Ready"

// WaitingForCollection says whether the claim waits for the collection of its workspace's record
// (another owner's kept workspace): Binding, its Ready condition's reason
// WaitingForWorkspaceCollection, as the claim controller writes it.
func WaitingForCollection(claim *airlockv1alpha1.SandboxClaim) bool {
	if claim.Status.Phase != airlockv1alpha1.ClaimBinding {
		return false
	}
	cond := meta.FindStatusCondition(claim.Status.Conditions, conditionReady)
	return cond != nil && cond.Reason == airlockv1alpha1.ReasonWaitingForWorkspaceCollection
}

// WaitsForCollection says whether the claim has no pod on its workspace because it waits for a
// collection (or is not decided yet).
func WaitsForCollection(claim *airlockv1alpha1.SandboxClaim) bool {
	switch claim.Status.Phase {
	case "", airlockv1alpha1.ClaimPending, airlockv1alpha1.ClaimQueued:
		return true
	}
	return WaitingForCollection(claim)
}

// RecordedWhenRuntimeGoes says whether the claim's workspace gets a record when its runtime is
// deleted (garbage collection deletes the claim without sync-back): a claim that may have had a
// pod on it (Binding, Bound, Reaping, Failed, with its frozen record), in a workspace the operator
// may remove.
func RecordedWhenRuntimeGoes(claim *airlockv1alpha1.SandboxClaim) bool {
	return HeldFromCollector(claim) && Removable(claim)
}

// HeldFromCollector says whether garbage collection may not delete the claim
// (manifests/rbac/admission_policy_workspaces.yaml, whose rule this is: keep the two the same):
// a claim that may have had a pod on its workspace (Binding, Bound, Reaping, Failed, with its
// frozen record) and no mount role. The operator deletes such a claim of a runtime being deleted
// itself, once its workspace has a record (RecordedWhenRuntimeGoes): a foreground deletion of the
// runtime while no operator runs would otherwise delete it, and leave its workspace with none.
func HeldFromCollector(claim *airlockv1alpha1.SandboxClaim) bool {
	switch claim.Status.Phase {
	case airlockv1alpha1.ClaimBinding, airlockv1alpha1.ClaimBound, airlockv1alpha1.ClaimReaping, airlockv1alpha1.ClaimFailed:
	default:
		return false
	}
	return claim.Status.Frozen != nil && claim.Spec.MountRole == ""
}

// Records reads the kept workspaces' records of one namespace (a Job lister's namespace).
type Records interface {
	Get(name string) (*batchv1.Job, error)
	List(selector labels.Selector) ([]*batchv1.Job, error)
}

// WouldResume says whether the claim would resume a kept workspace, as far as records shows:
// the record of its own directory, or one kept for it (a warm member's workspace), suspended,
// that the claim may take (ResumableBy).
func WouldResume(records Records, claim *airlockv1alpha1.SandboxClaim) bool {
	name := RecordName(claim.Spec.WorkspaceDir)
	job, err := records.Get(name)
	if err == nil && IsRecord(job) && ptr.Deref(job.Spec.Suspend, false) && ResumableBy(job, claim) {
		return true
	}
	kept, err := records.List(labels.SelectorFromSet(KeptForSelector(name)))
	if err != nil {
		return false
	}
	for _, job := range kept {
		if ptr.Deref(job.Spec.Suspend, false) && ResumableBy(job, claim) {
			return true
		}
	}
	return false
}
