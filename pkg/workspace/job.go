package workspace

// The sync-back Job (SPEC section 3, "Reaping"): `airlock sync` (pkg/syncback) copies a Reaping
// claim's workspace into its targetPath and, when the operator may remove it, removes it once the
// copy is in place; a claim with nothing to save gets the same Job with --remove-only. A kept
// workspace's record (record.go) is a Job of the same pod.

import (
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

const (
	// ContentMountPath is where a workspace's Jobs mount the content PVC.
	ContentMountPath = "/content"
	// contentVolumeName is the content PVC's volume in a workspace's Jobs.
	contentVolumeName = "content"
	// syncContainerName is the sync-back container's name.
	syncContainerName = "sync"
	// SyncDeadline bounds one attempt of a workspace's Job (activeDeadlineSeconds), whatever
	// happens to its pod.
	SyncDeadline = 30 * time.Minute
)

// JobConfig is what every Job of a workspace is built with: the image of `airlock sync`
// (--sync-image), and the security contexts its pod and container run with: the sandbox's
// restricted ones (sandboxpod.RestrictedPodSecurityContext and
// RestrictedContainerSecurityContext), so that the copy reads and writes the workspace as the
// sandbox's user. They are functions so that every Job gets contexts of its own.
type JobConfig struct {
	Image             string
	PodSecurity       func() *corev1.PodSecurityContext
	ContainerSecurity func() *corev1.SecurityContext
}

// SyncImage is the image of the claim's workspace Jobs: the one its record froze at admission,
// or, for a record frozen before airlock froze it, fallback (the operator's --sync-image).
func SyncImage(claim *airlockv1alpha1.SandboxClaim, fallback string) string {
	if claim.Status.Frozen != nil && claim.Status.Frozen.SyncImage != "" {
		return claim.Status.Frozen.SyncImage
	}
	return fallback
}

// SyncJobName is the name of the claim's sync-back Job.
func SyncJobName(claim *airlockv1alpha1.SandboxClaim) string {
	return claim.Name + "-sync"
}

// Removable says whether the claim's workspace is one the operator made and may remove: no mount
// role, and a workspaceDir of the shape the operator gives workspaces.
func Removable(claim *airlockv1alpha1.SandboxClaim) bool {
	return claim.Spec.MountRole == "" && ValidateRemovable(DirOf(claim), SandboxesDir(claim.Namespace)) == nil
}

// SyncJobArgs are the arguments of the claim's sync-back Job: copy the workspace into the
// targetPath and, with removeWorkspace, remove it once the copy is in place; for a claim without a
// targetPath (then always with removeWorkspace) only remove it. A copy keeps versions (defaulted:
// TargetVersions) previous contents of the target.
func SyncJobArgs(claim *airlockv1alpha1.SandboxClaim, removeWorkspace bool, versions int32) []string {
	args := []string{"sync", "--content-root=" + ContentMountPath, "--from=" + DirOf(claim)}
	if claim.Spec.TargetPath == "" {
		return append(args, "--remove-only", "--sandboxes-dir="+SandboxesDir(claim.Namespace))
	}
	args = append(args, "--to="+claim.Spec.TargetPath)
	args = append(args, KeepVersionsArgs(versions)...)
	if removeWorkspace {
		return append(args, "--remove-source", "--sandboxes-dir="+SandboxesDir(claim.Namespace))
	}
	return args
}

// DefaultTargetVersions and MaxTargetVersions bound a registry entry's targetVersions.
const (
	DefaultTargetVersions = airlockv1alpha1.DefaultTargetVersions
	MaxTargetVersions     = 1000
)

// TargetVersions is versions, or DefaultTargetVersions when it is not in 1..MaxTargetVersions.
func TargetVersions(versions int32) int32 {
	if versions < 1 || versions > MaxTargetVersions {
		return DefaultTargetVersions
	}
	return versions
}

// KeepVersionsArgs is the `airlock sync` flag that keeps versions previous contents of the target:
// none for the default (what `airlock sync` keeps without it, so that a --sync-image of a version
// before the flag keeps working with the default).
func KeepVersionsArgs(versions int32) []string {
	if v := TargetVersions(versions); v != DefaultTargetVersions {
		return []string{"--keep-versions=" + strconv.Itoa(int(v))}
	}
	return nil
}

// EntryTargetVersions is the registry entry's targetVersions, defaulted (an entry that is gone:
// the default).
func EntryTargetVersions(entry *airlockv1alpha1.RegistrySandbox) int32 {
	if entry == nil || entry.TargetVersions == nil {
		return DefaultTargetVersions
	}
	return TargetVersions(*entry.TargetVersions)
}

// SyncJob returns the claim's sync-back Job, with meta (the claim's child: its name SyncJobName,
// its labels and the claim as controller): `airlock sync` (the image's entrypoint is airlock)
// copying the workspace into targetPath inside the content PVC, and removing the workspace
// afterwards when removeWorkspace is set (SyncJobArgs). It does not retry by itself
// (backoffLimit 0): the claim controller retries with its own backoff. An attempt ends by
// SyncDeadline (activeDeadlineSeconds) whatever happens to its pod.
func SyncJob(meta metav1.ObjectMeta, claim *airlockv1alpha1.SandboxClaim, contentClaimName string, cfg JobConfig, attempt int, removeWorkspace bool, versions int32) *batchv1.Job {
	meta.Annotations = map[string]string{airlockv1alpha1.AnnotationSyncAttempt: strconv.Itoa(attempt)}
	if meta.Labels == nil {
		meta.Labels = map[string]string{}
	}
	// The claim's UID: the admission policy holds the Job to that claim's record only.
	meta.Labels[airlockv1alpha1.LabelClaimUID] = string(claim.UID)
	return &batchv1.Job{
		ObjectMeta: meta,
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr.To[int32](0),
			ActiveDeadlineSeconds: ptr.To(int64(SyncDeadline / time.Second)),
			Template:              SyncPodTemplate(claim.Name, contentClaimName, cfg, SyncJobArgs(claim, removeWorkspace, versions)),
		},
	}
}

// SyncPodTemplate is the pod of a Job that runs `airlock sync` (the image's entrypoint) with
// args on the content volume: restricted, no ServiceAccount token, no retry of its own. syncOf
// labels the pod (LabelSyncOf) with what it syncs or removes: the claim, or a kept workspace's
// record.
func SyncPodTemplate(syncOf, contentClaimName string, cfg JobConfig, args []string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{airlockv1alpha1.LabelSyncOf: syncOf}},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			EnableServiceLinks:           ptr.To(false),
			SecurityContext:              cfg.PodSecurity(),
			Containers: []corev1.Container{{
				Name:                     syncContainerName,
				Image:                    cfg.Image,
				Args:                     args,
				VolumeMounts:             []corev1.VolumeMount{{Name: contentVolumeName, MountPath: ContentMountPath}},
				SecurityContext:          cfg.ContainerSecurity(),
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
			Volumes: []corev1.Volume{{Name: contentVolumeName, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: contentClaimName},
			}}},
		},
	}
}

// JobCondition returns the Job's condition of the type that is True, or nil.
func JobCondition(job *batchv1.Job, condType batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range job.Status.Conditions {
		if c := &job.Status.Conditions[i]; c.Type == condType && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

// JobFinished says whether the Job has completed or failed.
func JobFinished(job *batchv1.Job) bool {
	return JobCondition(job, batchv1.JobComplete) != nil || JobCondition(job, batchv1.JobFailed) != nil
}
