package sandboxapi

// Per-claim workspaces carry the runtime's UID (docs/decisions.md, "Per-claim workspaces carry the
// runtime's UID"). A claim of a registry sandbox without a mount role or `workspace: session`
// works in `<ns>/sandboxes/<claim>-<8 hex of sha256(runtime UID)>` (workspace.ClaimDirName): a
// runtime deleted and created again under the same name (another UID: someone else) never gets a
// directory that its predecessor's claims of the same names used, whether or not their workspaces
// were recorded for collection.
//
// Upgrade without loss. Earlier versions named it `<ns>/sandboxes/<claim>`, and a workspace kept
// there (its record, a suspended Job named after the directory: workspace.RecordName) is still
// resumed: a new claim gets that legacy directory when the API server has a record of it that
// this runtime, by name and UID, may resume, as the claim controller then takes it. The record is
// read with one request, by name; a read that fails fails the acquire (503), never guessing a
// directory that may hold someone else's files.
//
// That read is made only when a legacy record can exist (mayHaveLegacyRecord): the replica's
// cache of records (Config.KeptRecordCache) shows a Job of its name, or a claim at that legacy
// directory was seen lately (legacySeen; only such a claim writes a record there again, before
// it is deleted, and the Job cache may show it a moment after the claim's deletion). Otherwise
// there is nothing to resume, and an acquire costs no API round trip: a consistent list of Jobs
// on every new claim sat on the path of every cold acquire (issue 40).

import (
	"context"
	"net/http"
	"path"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/client"
	"github.com/airlock-dev/airlock/pkg/workspace"
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
	list, err := r.client.BatchV1().Jobs(namespace).List(ctx, workspace.RecordListOptions(name))
	if err != nil {
		return nil, err
	}
	if record := workspace.RecordIn(list.Items, namespace, name); record != nil {
		return record, nil
	}
	return nil, apierrors.NewNotFound(batchv1.Resource("jobs"), name)
}

// claimWorkspaceDir is the directory of the per-claim workspace of the claim named name, of the
// runtime whose UID is uid.
func claimWorkspaceDir(namespace, name string, uid types.UID) string {
	return path.Join(namespace, "sandboxes", workspace.ClaimDirName(name, uid))
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
	name := workspace.RecordName(legacy)
	if !s.mayHaveLegacyRecord(c.Namespace, c.Name, name) {
		return nil
	}
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

// mayHaveLegacyRecord says whether the record named record of the legacy directory of the claim
// named claim may exist: without a cache of records, always.
func (s *Server) mayHaveLegacyRecord(namespace, claim, record string) bool {
	if s.keptCache == nil {
		return true
	}
	if _, err := s.keptCache.Jobs(namespace).Get(record); !apierrors.IsNotFound(err) {
		return true // cached, or the cache cannot tell
	}
	return s.legacySeen.seen(namespace, claim)
}

// legacySeenTTL is how long a claim at its legacy directory is remembered once last seen: far
// longer than a Job cache takes to show a record written before that claim's deletion.
const legacySeenTTL = 5 * time.Minute

// legacySeen remembers the claims (by namespace and name) last seen at their legacy directory,
// from the claim informer's events: such a claim may write its workspace's record there before it
// is deleted, and a new claim of its name must read it even before the Job cache shows it.
type legacySeen struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	at    map[string]time.Time
}

func newLegacySeen(clk clock.PassiveClock) *legacySeen {
	return &legacySeen{clock: clk, at: map[string]time.Time{}}
}

// observe records obj if it is a claim at its legacy directory, and forgets the expired ones.
func (l *legacySeen) observe(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	c, ok := obj.(*airlockv1alpha1.SandboxClaim)
	if !ok || c.Spec.WorkspaceDir != legacyWorkspaceDir(c.Namespace, c.Name) {
		return
	}
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, at := range l.at {
		if now.Sub(at) > legacySeenTTL {
			delete(l.at, k)
		}
	}
	l.at[c.Namespace+"/"+c.Name] = now
}

// seen says whether the claim was seen at its legacy directory within legacySeenTTL.
func (l *legacySeen) seen(namespace, name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.at[namespace+"/"+name]
	return ok && l.clock.Since(at) <= legacySeenTTL
}

// eventHandler observes every claim the informer adds, changes or deletes.
func (l *legacySeen) eventHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { l.observe(obj) },
		UpdateFunc: func(_, cur any) { l.observe(cur) },
		DeleteFunc: l.observe,
	}
}

// resumableLegacy says whether the record is of a kept workspace in dir that rt, by name and UID,
// may resume, as the claim controller decides it: an operator's record (labelled, owned by
// nothing, named after dir), kept (suspended, not being deleted), resumable, and rt's.
func resumableLegacy(record *batchv1.Job, dir string, rt *airlockv1alpha1.AgentRuntime) bool {
	uid := record.Annotations[airlockv1alpha1.AnnotationKeptRuntimeUID]
	return record.Name == workspace.RecordName(dir) && record.Namespace == rt.Namespace &&
		record.Labels[airlockv1alpha1.LabelKeptWorkspace] == airlockv1alpha1.LabelValueKeptWorkspace &&
		len(record.OwnerReferences) == 0 && record.Annotations[airlockv1alpha1.AnnotationKeptDir] == dir &&
		record.DeletionTimestamp == nil && ptr.Deref(record.Spec.Suspend, false) &&
		record.Annotations[airlockv1alpha1.AnnotationKeptResumable] != airlockv1alpha1.AnnotationValueNotResumable &&
		record.Labels[airlockv1alpha1.LabelRuntime] == rt.Name && uid != "" && uid == string(rt.UID)
}
