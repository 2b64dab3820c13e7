package sandboxapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimname"
	"github.com/airlock-dev/airlock/pkg/client"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// uidHash is the first 8 hex digits of sha256(uid), computed here apart from the code under test.
func uidHash(uid string) string {
	sum := sha256.Sum256([]byte(uid))
	return hex.EncodeToString(sum[:])[:8]
}

// keptRecord is the record of a kept workspace in dir of the runtime name/uid, as the claim
// controller writes it (workspace.Record).
func keptRecord(dir, runtimeName, runtimeUID string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: workspace.RecordName(dir), Namespace: testNS, UID: "uid-record",
			Labels: map[string]string{
				airlockv1alpha1.LabelClaim: "agent-earlier", airlockv1alpha1.LabelRuntime: runtimeName,
				airlockv1alpha1.LabelKeptWorkspace: airlockv1alpha1.LabelValueKeptWorkspace,
			},
			Annotations: map[string]string{
				airlockv1alpha1.AnnotationKeptRuntimeUID: runtimeUID, airlockv1alpha1.AnnotationKeptDir: dir,
				"airlock.dev/kept-at": t0.Add(-10 * time.Minute).Format(time.RFC3339),
			},
		},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true)},
	}
}

// addJobs puts Jobs into the fake API server and the replica's cache of records.
func (f *fixture) addJobs(jobs ...*batchv1.Job) {
	f.t.Helper()
	f.addJobsUncached(jobs...)
	for _, j := range jobs {
		mustAdd(f.t, f.jobs, j)
	}
}

// addJobsUncached puts Jobs into the fake API server only: the cache has not shown them yet.
func (f *fixture) addJobsUncached(jobs ...*batchv1.Job) {
	f.t.Helper()
	for _, j := range jobs {
		if _, err := f.kube.BatchV1().Jobs(j.Namespace).Create(context.Background(), j, metav1.CreateOptions{}); err != nil {
			f.t.Fatal(err)
		}
	}
}

// jobLists counts the Job lists the Sandbox API sent to the API server.
func (f *fixture) jobLists() int {
	n := 0
	for _, a := range f.kube.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "jobs" {
			n++
		}
	}
	return n
}

// TestAcquireListsNoJobs: an acquire that creates a claim, with no record of its legacy directory
// in the replica's cache and no claim seen there, reads nothing from the API server: before issue
// 40 every such acquire listed Jobs (a consistent list) before creating its claim.
func TestAcquireListsNoJobs(t *testing.T) {
	f := newFixture(t, baseObjects()...)
	name := claimname.For(testRuntime, testSession, testHandle)
	if got, want := f.acquiredDir(), testNS+"/sandboxes/"+name+"-"+uidHash("rt-uid"); got != want {
		t.Errorf("workspace %q, want %q", got, want)
	}
	if n := f.jobLists(); n != 0 {
		t.Errorf("%d Job lists on the API server, want none", n)
	}
}

// TestLegacyRecordNotCachedYet: a record the replica's cache does not show yet is still read, and
// resumed, when a claim of that name was seen at the legacy directory (it kept its workspace
// there a moment ago, and was deleted); without such a claim, the uncached record is not looked
// for.
func TestLegacyRecordNotCachedYet(t *testing.T) {
	name := claimname.For(testRuntime, testSession, testHandle)
	legacy := testNS + "/sandboxes/" + name
	t.Run("a claim at the legacy directory seen and deleted", func(t *testing.T) {
		f := newFixture(t, baseObjects()...)
		f.addJobsUncached(keptRecord(legacy, testRuntime, "rt-uid"))
		earlier := existingClaim(testSession, testHandle, airlockv1alpha1.ClaimReaping)
		earlier.Spec.WorkspaceDir = legacy
		f.claimEvents.fire(nil, earlier)
		f.claimEvents.fire(earlier, nil)
		if got := f.acquiredDir(); got != legacy {
			t.Errorf("workspace %q, want the legacy kept one %q", got, legacy)
		}
		if n := f.jobLists(); n != 1 {
			t.Errorf("%d Job lists on the API server, want 1", n)
		}
	})
	t.Run("seen too long ago", func(t *testing.T) {
		f := newFixture(t, baseObjects()...)
		f.addJobsUncached(keptRecord(legacy, testRuntime, "rt-uid"))
		earlier := existingClaim(testSession, testHandle, airlockv1alpha1.ClaimReaping)
		earlier.Spec.WorkspaceDir = legacy
		f.claimEvents.fire(earlier, nil)
		f.clock.Step(legacySeenTTL + time.Second)
		if got := f.acquiredDir(); got == legacy {
			t.Errorf("workspace %q: an uncached record looked for long after its claim", got)
		}
		if n := f.jobLists(); n != 0 {
			t.Errorf("%d Job lists on the API server, want none", n)
		}
	})
}

// acquiredDir acquires testHandle (wait 0) and returns the created claim's workspace directory.
func (f *fixture) acquiredDir() string {
	f.t.Helper()
	if rec := f.acquire(0); rec.Code != http.StatusAccepted {
		f.t.Fatalf("acquire: status %d: %s", rec.Code, rec.Body.String())
	}
	return f.apiClaim(claimname.For(testRuntime, testSession, testHandle)).Spec.WorkspaceDir
}

// TestClaimWorkspaceCarriesRuntimeUID: a per-claim workspace is <ns>/sandboxes/<claim>-<8 hex of
// sha256(runtime UID)>; the runtime deleted and created again under its name (another UID) gets
// another directory for the claim of the same name, which its predecessor's files, recorded or
// not, are never in.
func TestClaimWorkspaceCarriesRuntimeUID(t *testing.T) {
	name := claimname.For(testRuntime, testSession, testHandle)
	first := newFixture(t, baseObjects()...).acquiredDir()
	if want := testNS + "/sandboxes/" + name + "-" + uidHash("rt-uid"); first != want {
		t.Errorf("workspace %q, want %q", first, want)
	}
	again := newRuntime(func(rt *airlockv1alpha1.AgentRuntime) { rt.UID = "rt-uid-created-again" })
	second := newFixture(t, again, newRegistry(), newClass("codegen")).acquiredDir()
	if second == first || second != testNS+"/sandboxes/"+name+"-"+uidHash("rt-uid-created-again") {
		t.Errorf("the runtime created again: workspace %q (the first runtime's %q)", second, first)
	}
}

// TestClaimWorkspaceResumesLegacyRecord: a kept workspace at the directory earlier versions gave
// the claim (<ns>/sandboxes/<claim>) is resumed there when its record is this runtime's (name and
// UID), kept and resumable; any other record, or none, gives the UID's directory.
func TestClaimWorkspaceResumesLegacyRecord(t *testing.T) {
	name := claimname.For(testRuntime, testSession, testHandle)
	legacy, current := testNS+"/sandboxes/"+name, testNS+"/sandboxes/"+name+"-"+uidHash("rt-uid")
	tests := map[string]struct {
		record  func() *batchv1.Job // nil: none
		wantDir string
	}{
		"no record": {wantDir: current},
		"this runtime's record": {
			record: func() *batchv1.Job { return keptRecord(legacy, testRuntime, "rt-uid") }, wantDir: legacy},
		"the record of the runtime before it (another UID)": {
			record: func() *batchv1.Job { return keptRecord(legacy, testRuntime, "uid-of-the-deleted-runtime") }, wantDir: current},
		"a record without a runtime UID": {
			record: func() *batchv1.Job { return keptRecord(legacy, testRuntime, "") }, wantDir: current},
		"another runtime's name with this UID": {
			record: func() *batchv1.Job { return keptRecord(legacy, "other", "rt-uid") }, wantDir: current},
		"not resumable (a warm member's, or a claim garbage collection deleted)": {
			record: func() *batchv1.Job {
				j := keptRecord(legacy, testRuntime, "rt-uid")
				j.Annotations[airlockv1alpha1.AnnotationKeptResumable] = airlockv1alpha1.AnnotationValueNotResumable
				return j
			}, wantDir: current},
		"being collected (not suspended)": {
			record: func() *batchv1.Job {
				j := keptRecord(legacy, testRuntime, "rt-uid")
				j.Spec.Suspend = nil
				return j
			}, wantDir: current},
		"being deleted": {
			record: func() *batchv1.Job {
				j := keptRecord(legacy, testRuntime, "rt-uid")
				j.DeletionTimestamp, j.Finalizers = ptr.To(metav1.NewTime(t0)), []string{"test"}
				return j
			}, wantDir: current},
		"owned (not the operator's record)": {
			record: func() *batchv1.Job {
				j := keptRecord(legacy, testRuntime, "rt-uid")
				j.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "u"}}
				return j
			}, wantDir: current},
		"without the label": {
			record: func() *batchv1.Job {
				j := keptRecord(legacy, testRuntime, "rt-uid")
				delete(j.Labels, airlockv1alpha1.LabelKeptWorkspace)
				return j
			}, wantDir: current},
		"of another directory under the legacy record's name": {
			record: func() *batchv1.Job {
				j := keptRecord(legacy, testRuntime, "rt-uid")
				j.Annotations[airlockv1alpha1.AnnotationKeptDir] = testNS + "/sandboxes/elsewhere"
				return j
			}, wantDir: current},
		"this runtime's record of another directory only": {
			record: func() *batchv1.Job { return keptRecord(testNS+"/sandboxes/agent-0123456789", testRuntime, "rt-uid") }, wantDir: current},
	}
	for tname, tc := range tests {
		t.Run(tname, func(t *testing.T) {
			f := newFixture(t, baseObjects()...)
			if tc.record != nil {
				f.addJobs(tc.record())
			}
			if got := f.acquiredDir(); got != tc.wantDir {
				t.Errorf("workspace %q, want %q", got, tc.wantDir)
			}
		})
	}
}

// TestClaimWorkspaceLegacyReplacementAndEager: the replacement of a Failed claim, and an eager
// claim of sessions/open, resume a legacy kept workspace of their own names as an acquire's claim
// does.
func TestClaimWorkspaceLegacyReplacementAndEager(t *testing.T) {
	t.Run("replacement", func(t *testing.T) {
		old := existingClaim(testSession, testHandle, airlockv1alpha1.ClaimFailed)
		replName := claimname.Replacement(old.Name)
		f := newFixture(t, append(baseObjects(), old)...)
		f.addJobs(keptRecord(testNS+"/sandboxes/"+replName, testRuntime, "rt-uid"))
		if rec := f.acquire(0); rec.Code != http.StatusAccepted {
			t.Fatalf("acquire: status %d: %s", rec.Code, rec.Body.String())
		}
		if got := f.apiClaim(replName).Spec.WorkspaceDir; got != testNS+"/sandboxes/"+replName {
			t.Errorf("the replacement's workspace %q, want its legacy kept one", got)
		}
	})
	t.Run("eager", func(t *testing.T) {
		registry := newRegistry(airlockv1alpha1.RegistrySandbox{Name: "lint", Class: "codegen", Allocation: airlockv1alpha1.AllocationEager})
		f := newFixture(t, newRuntime(), registry, newClass("codegen"))
		name := claimname.For(testRuntime, testSession, "lint/"+eagerInstance)
		f.addJobs(keptRecord(testNS+"/sandboxes/"+name, testRuntime, "rt-uid"))
		if rec := f.do("/v1/sessions/open", tokenAgent, sessionBody(testSession)); rec.Code != http.StatusOK {
			t.Fatalf("open: status %d: %s", rec.Code, rec.Body.String())
		}
		if got := f.apiClaim(name).Spec.WorkspaceDir; got != testNS+"/sandboxes/"+name {
			t.Errorf("the eager claim's workspace %q, want its legacy kept one", got)
		}
	})
}

// failingRecords is a KeptRecords whose reads fail.
type failingRecords struct{ err error }

func (r failingRecords) KeptRecord(context.Context, string, string) (*batchv1.Job, error) {
	return nil, r.err
}

// cacheLegacyRecord puts a record of the legacy directory of the acquire's claim into the
// replica's cache only, so that the acquire reads it from the API server (KeptRecords).
func (f *fixture) cacheLegacyRecord() {
	f.t.Helper()
	mustAdd(f.t, f.jobs, keptRecord(testNS+"/sandboxes/"+claimname.For(testRuntime, testSession, testHandle), testRuntime, "rt-uid"))
}

// TestClaimWorkspaceRecordReadFails: when the record, which the cache shows, cannot be read (the
// API server down, or the read forbidden), the acquire fails with 503 and creates no claim: no
// directory is guessed.
func TestClaimWorkspaceRecordReadFails(t *testing.T) {
	forbidden := apierrors.NewForbidden(batchv1.Resource("jobs"), "", errors.New("RBAC: list jobs is not allowed"))
	t.Run("a KeptRecords that fails", func(t *testing.T) {
		f := newFixtureWithOptions(t, fixtureOptions{keptRecords: failingRecords{err: errors.New("connection refused")}}, baseObjects()...)
		f.cacheLegacyRecord()
		e := wantError(t, f.acquire(0), http.StatusServiceUnavailable, client.CodeUnavailable, "")
		t.Logf("answer: %s", e.Message)
		if n := len(actionsOf(f.airlock.Actions(), "create")); n != 0 {
			t.Errorf("%d claims created", n)
		}
	})
	t.Run("the API server's list forbidden", func(t *testing.T) {
		f := newFixture(t, baseObjects()...)
		f.cacheLegacyRecord()
		f.kube.PrependReactor("list", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, forbidden })
		wantError(t, f.acquire(0), http.StatusServiceUnavailable, client.CodeUnavailable, "")
		if n := len(actionsOf(f.airlock.Actions(), "create")); n != 0 {
			t.Errorf("%d claims created", n)
		}
	})
}

// TestAPIKeptRecordsReadsByName: the API server's records are read by name, with the record's
// label: a record of another directory is not taken for it, and none is NotFound.
func TestAPIKeptRecordsReadsByName(t *testing.T) {
	f := newFixture(t, baseObjects()...)
	mine, other := keptRecord(testNS+"/sandboxes/a", testRuntime, "rt-uid"), keptRecord(testNS+"/sandboxes/b", testRuntime, "rt-uid")
	f.addJobs(other, mine)
	r := apiKeptRecords{client: f.kube}
	got, err := r.KeptRecord(context.Background(), testNS, mine.Name)
	if err != nil || got.Name != mine.Name {
		t.Errorf("KeptRecord(%s) = %v, %v", mine.Name, got, err)
	}
	if _, err := r.KeptRecord(context.Background(), testNS, workspace.RecordName(testNS+"/sandboxes/c")); !apierrors.IsNotFound(err) {
		t.Errorf("a record that is not there: %v, want NotFound", err)
	}
	var lists []k8stesting.ListActionImpl
	for _, a := range f.kube.Actions() {
		if l, ok := a.(k8stesting.ListActionImpl); ok && l.GetResource().Resource == "jobs" {
			lists = append(lists, l)
		}
	}
	if len(lists) != 2 || lists[0].ListRestrictions.Fields.String() != "metadata.name="+mine.Name ||
		lists[0].ListRestrictions.Labels.String() != airlockv1alpha1.LabelKeptWorkspace+"=true" {
		t.Errorf("lists %+v, want two, by name and label", lists)
	}
}

// fixedRecords is a KeptRecords that answers one record whatever the name asked.
type fixedRecords struct{ job *batchv1.Job }

func (r fixedRecords) KeptRecord(context.Context, string, string) (*batchv1.Job, error) {
	return r.job.DeepCopy(), nil
}

// TestClaimWorkspaceRecordOfAnotherName: a record named other than the legacy directory's, even
// one that says it is of that directory and this runtime's, is not resumed.
func TestClaimWorkspaceRecordOfAnotherName(t *testing.T) {
	legacy := testNS + "/sandboxes/" + claimname.For(testRuntime, testSession, testHandle)
	j := keptRecord(legacy, testRuntime, "rt-uid")
	j.Name = workspace.RecordName(testNS + "/sandboxes/elsewhere")
	f := newFixtureWithOptions(t, fixtureOptions{keptRecords: fixedRecords{job: j}}, baseObjects()...)
	f.cacheLegacyRecord() // the answer is read
	if got := f.acquiredDir(); got == legacy {
		t.Errorf("workspace %q: a record of another name was resumed", got)
	}
}
