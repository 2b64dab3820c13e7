package v1alpha1

// Well-known labels and annotations of a kept workspace's record (docs/nothing-lost.md, "Resume
// without loss"): a suspended Job with no owner, named after the workspace directory
// (claimname.KeptRecordName), written by the claim controller and read by the Sandbox API, which
// gives a claim the directory of a kept workspace of its runtime made by an earlier version
// (docs/decisions.md, "Per-claim workspaces carry the runtime's UID").
const (
	// LabelKeptWorkspace marks a kept workspace's record (LabelValueKeptWorkspace).
	LabelKeptWorkspace = "airlock.dev/kept-workspace"
	// LabelValueKeptWorkspace is the value of LabelKeptWorkspace.
	LabelValueKeptWorkspace = "true"
	// AnnotationKeptRuntimeUID is the UID of the runtime whose workspace it is.
	AnnotationKeptRuntimeUID = "airlock.dev/runtime-uid"
	// AnnotationKeptDir is the workspace directory inside the content PVC.
	AnnotationKeptDir = "airlock.dev/workspace-dir"
	// AnnotationKeptResumable is AnnotationValueNotResumable for a workspace no claim resumes (a
	// warm member's).
	AnnotationKeptResumable = "airlock.dev/resumable"
	// AnnotationValueNotResumable is the value of AnnotationKeptResumable that says so.
	AnnotationValueNotResumable = "false"
)
