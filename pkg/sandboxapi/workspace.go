package sandboxapi

// Per-claim workspaces carry the runtime's UID (docs/decisions.md, "Per-claim workspaces carry the
// runtime's UID"). A claim of a registry sandbox without a mount role or `workspace: session`
// works in `<ns>/sandboxes/<claim>-<8 hex of sha256(runtime UID)>` (claimname.ClaimWorkspace): a
// runtime deleted and created again under the same name (another UID: someone else) never gets a
// directory that its predecessor's claims of the same names used, whether or not their workspaces
// were recorded for collection.
//
// Upgrade without loss. Earlier versions named it `<ns>/sandboxes/<claim>`, and a workspace kept
// there (its record, a suspended Job named after the directory: claimname.KeptRecordName) is still
// resumed: a new claim gets that legacy directory when the API server has a record of it that
// this runtime, by name and UID, may resume, as the claim controller then takes it. The record is
// read with one request, by name; a read that fails fails the acquire (503), never guessing a
// directory that may hold someone else's files.

import (
	"context"
	"net/http"
	"path"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimname"
	"github.com/airlock-dev/airlock/pkg/client"
)

// KeptRecords reads the record of a kept workspace from the API server (the Sandbox API has no
// Job informer).
type KeptRecords interface {
	// KeptRecord returns the record named name in namespace, or a NotFound error when there is
	// none.
	KeptRecord(ctx context.Context, namespace, name string) (*batchv1.Job, error)
}

// NewKeptRecords reads records from the API server with client: a list by name, as the claim
// controller reads them (the operator may list Jobs, not get them).
func NewKeptRecords(client kubernetes.Interface) KeptRecords { return apiKeptRecords{client: client} }

type apiKeptRecords struct{ client kubernetes.Interface }

func (r apiKeptRecords) KeptRecord(ctx context.Context, namespace, name string) (*batchv1.Job, error) {
	list, err := r.client.BatchV1().Jobs(namespace).List(ctx, claimname.KeptRecordListOptions(name))
	if err != nil {
		return nil, err
	}
	if record := claimname.KeptRecordIn(list.Items, namespace, name); record != nil {
		return record, nil
	}
	return nil, apierrors.NewNotFound(batchv1.Resource("jobs"), name)
}

// claimWorkspaceDir is the directory of the per-claim workspace of the claim named name, of the
// runtime whose UID is uid.
func claimWorkspaceDir(namespace, name string, uid types.UID) string {
	return path.Join(namespace, "sandboxes", claimname.ClaimWorkspace(name, uid))
}

// legacyWorkspaceDir is the directory earlier versions gave the claim named name.
func legacyWorkspaceDir(namespace, name string) string {
	return path.Join(namespace, "sandboxes", name)
}

// chooseWorkspace gives the new claim c of rt, when its workspace is a per-claim one, the legacy
// directory if a kept workspace there is rt's to resume; otherwise c keeps its directory.
func (s *Server) chooseWorkspace(ctx context.Context, c *airlockv1alpha1.SandboxClaim, rt *airlockv1alpha1.AgentRuntime) error {
	if c.Spec.WorkspaceDir != claimWorkspaceDir(c.Namespace, c.Name, rt.UID) {
		return nil // a mount role's or a session's
	}
	legacy := legacyWorkspaceDir(c.Namespace, c.Name)
	name := claimname.KeptRecordName(legacy)
	record, err := s.keptRecords.KeptRecord(ctx, c.Namespace, name)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return errorf(http.StatusServiceUnavailable, client.CodeUnavailable,
			"cannot tell whether claim %s resumes a kept workspace: reading its record %s: %v; try again", c.Name, name, err)
	}
	logger := klog.FromContext(ctx)
	if !resumableLegacy(record, legacy, rt) {
		logger.V(2).Info("Not resuming a kept workspace at the legacy directory: not this runtime's to resume",
			"record", klog.KObj(record), "workspaceDir", legacy, "recordRuntimeUID", record.Annotations[airlockv1alpha1.AnnotationKeptRuntimeUID])
		return nil
	}
	logger.V(2).Info("The claim resumes a kept workspace at its legacy directory", "record", klog.KObj(record), "workspaceDir", legacy)
	c.Spec.WorkspaceDir = legacy
	return nil
}

// resumableLegacy says whether the record is of a kept workspace in dir that rt, by name and UID,
// may resume, as the claim controller decides it: an operator's record (labelled, owned by
// nothing, named after dir), kept (suspended, not being deleted), resumable, and rt's.
func resumableLegacy(record *batchv1.Job, dir string, rt *airlockv1alpha1.AgentRuntime) bool {
	uid := record.Annotations[airlockv1alpha1.AnnotationKeptRuntimeUID]
	return record.Name == claimname.KeptRecordName(dir) && record.Namespace == rt.Namespace &&
		record.Labels[airlockv1alpha1.LabelKeptWorkspace] == airlockv1alpha1.LabelValueKeptWorkspace &&
		len(record.OwnerReferences) == 0 && record.Annotations[airlockv1alpha1.AnnotationKeptDir] == dir &&
		record.DeletionTimestamp == nil && ptr.Deref(record.Spec.Suspend, false) &&
		record.Annotations[airlockv1alpha1.AnnotationKeptResumable] != airlockv1alpha1.AnnotationValueNotResumable &&
		record.Labels[airlockv1alpha1.LabelRuntime] == rt.Name && uid != "" && uid == string(rt.UID)
}
