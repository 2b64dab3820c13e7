package v1alpha1

// Well-known labels and annotations of a kept workspace's record (docs/nothing-lost.md, "Resume
// without loss"): a suspended Job with no owner, named after the workspace directory
// (workspace.RecordName), written by the claim controller and read by the Sandbox API, which
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
	// workspace garbage collection left when it deleted a claim with its runtime).
	AnnotationKeptResumable = "airlock.dev/resumable"
	// AnnotationValueNotResumable is the value of AnnotationKeptResumable that says so.
	AnnotationValueNotResumable = "false"
	// LabelKeptFor is on the record of a workspace that is not its claim's spec.workspaceDir (the
	// workspace of a warm member the claim adopted): the record name of the claim's own
	// directory, by which the next claim of the same runtime, session and handle finds it.
	LabelKeptFor = "airlock.dev/kept-for"
	// LabelRetryOf is on a held record's retry Job: the record's name (the Job is its controller
	// child). The admission policy holds the retry to that record's PVC and image.
	LabelRetryOf = "airlock.dev/retry-of"

	// AnnotationResumeMember is on a kept workspace's record while a resume member waits on it
	// (docs/nothing-lost.md, "Resume members"): the member's name; AnnotationResumeMemberUID its
	// pod's UID. The pool controller writes it, conditional on the record's resourceVersion,
	// before it creates the member's key Secret (without which the member's container never
	// starts): so a claim that takes the record, or a collection that unsuspends it, either saw
	// the member named here or made the pool's write fail and the member never start.
	AnnotationResumeMember    = "airlock.dev/resume-member"
	AnnotationResumeMemberUID = "airlock.dev/resume-member-uid"

	// AnnotationHeld is on the record of a workspace whose sync-back gave up: why (the last
	// failure). A held workspace is never collected, by its retention or otherwise, until a
	// person releases it or a retry saves it (AnnotationHeldAction).
	AnnotationHeld = "airlock.dev/held"
	// AnnotationHeldTarget is the targetPath a held workspace's sync-back copies it into.
	AnnotationHeldTarget = "airlock.dev/held-target"
	// AnnotationHeldVersions is the target's versions (the registry entry's targetVersions) a
	// held workspace's retry keeps.
	AnnotationHeldVersions = "airlock.dev/held-target-versions"
	// AnnotationHeldAction is what a person asks of a held workspace, on its record Job:
	// HeldActionRetry (copy it into its target again; on success it is kept as any other) or
	// HeldActionRelease (keep it as any other now: resumed, or collected past the retention).
	AnnotationHeldAction = "airlock.dev/held-action"
	HeldActionRetry      = "retry"
	HeldActionRelease    = "release"
)

// FinalizerWorkspaces is the operator's finalizer on an AgentRuntime: its deletion (and with it,
// by garbage collection, its claims') waits until every workspace of its claims has a record,
// so that a runtime deleted while the operator is down leaves no workspace nobody collects
// (docs/nothing-lost.md). Without the operator, remove it by hand to delete a runtime.
const FinalizerWorkspaces = "airlock.dev/workspaces"
