package claim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// fakeRecords is the session records' side, recording what the claim controller asks.
type fakeRecords struct {
	mu       sync.Mutex
	events   []string
	moves    []string // from -> owner kind/name/uid
	stored   []string // the claims whose records were asked to be stored (WaitStored)
	moveErr  error
	released func() int
}

func (f *fakeRecords) WaitStopped(_ context.Context, uid types.UID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	if f.released != nil {
		n = f.released()
	}
	// What was released before the record read the stopped entry.
	f.events = append(f.events, fmt.Sprintf("wait %s after %d releases", uid, n))
	return true
}

func (f *fakeRecords) WaitStored(_ context.Context, claim *airlockv1alpha1.SandboxClaim) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stored = append(f.stored, string(claim.UID))
	return true
}

func (f *fakeRecords) MoveRecords(_ context.Context, _ string, from types.UID, owner metav1.OwnerReference) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.moveErr != nil {
		return f.moveErr
	}
	f.moves = append(f.moves, string(from)+" -> "+owner.Kind+"/"+owner.Name+"/"+string(owner.UID))
	return nil
}

// TestStopWaitsForTheRecordBeforeTheRelease: once sandboxd said it stopped, the record is asked
// to read the stopped entry before the pod is deleted at once.
func TestStopWaitsForTheRecordBeforeTheRelease(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := reapingClaim("c1", t0.Add(-time.Hour), "")
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	f.pods = append(f.pods, terminatingPod(claim, func(p *corev1.Pod) { p.DeletionTimestamp = nil }))
	c := f.newController(ctx)
	rel := &recordingRelease{lostPodControl: c.lostPods}
	c.lostPods = rel
	c.SetOperatorPeer(testOperatorPeer)
	c.stops.client = &fakeStopper{}
	records := &fakeRecords{released: func() int { rel.mu.Lock(); defer rel.mu.Unlock(); return len(rel.released) }}
	c.SetSessionRecords(records)
	if _, err := syncClaim(ctx, c, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	c.waitForStops()
	if want := "wait " + string(claim.UID) + " after 0 releases"; len(records.events) != 1 || records.events[0] != want {
		t.Fatalf("record asked %v, want %q", records.events, want)
	}
	if len(rel.released) != 1 {
		t.Errorf("released %v, want the pod released after the record's read", rel.released)
	}
}

// TestKeepMovesTheRecordsToTheJob: a kept workspace's Job becomes the owner of the claim's
// records before the claim is deleted; a failed move fails the keep (the claim is not deleted).
func TestKeepMovesTheRecordsToTheJob(t *testing.T) {
	for name, tc := range map[string]struct {
		moveErr     error
		wantDeleted bool
	}{
		"moved, then the claim deleted": {wantDeleted: true},
		"a failed move keeps the claim": {moveErr: errors.New("conflict")},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			claim := reapingClaim("c1", t0.Add(-2*time.Hour), "")
			f.claims = append(f.claims, claim)
			f.withChildren(claim)
			c := f.newController(ctx)
			f.kubeClient.PrependReactor("create", "jobs", func(a core.Action) (bool, runtime.Object, error) {
				job := a.(core.CreateAction).GetObject().(*batchv1.Job)
				job.UID = "uid-kept-job"
				return false, nil, nil
			})
			records := &fakeRecords{moveErr: tc.moveErr}
			c.SetSessionRecords(records)
			_, err := syncClaim(ctx, c, keyOf(claim))
			if (err != nil) == tc.wantDeleted {
				t.Fatalf("sync: %v", err)
			}
			if tc.wantDeleted {
				want := string(claim.UID) + " -> Job/" + recordNameOf(claim) + "/uid-kept-job"
				if len(records.moves) != 1 || records.moves[0] != want {
					t.Errorf("moves %v, want [%s]", records.moves, want)
				}
			}
			// The record is stored before it moves (a record not stored yet would be written
			// after the claim is gone, owned by it).
			if len(records.stored) != 1 || records.stored[0] != string(claim.UID) {
				t.Errorf("records asked to be stored %v, want [%s] before the move", records.stored, claim.UID)
			}
			if got := countActions(f, "delete sandboxclaims c1"); (got == 1) != tc.wantDeleted {
				t.Errorf("claim deleted %d times, want deleted: %v", got, tc.wantDeleted)
			}
		})
	}
}

// TestResumeMovesTheRecordsToTheClaim: a resume moves the kept Job's records to the resuming
// claim before it deletes the Job.
func TestResumeMovesTheRecordsToTheClaim(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	claim := binding("c1", t0.Add(-time.Second))
	record := keptRecord(claim, "c1", "uid-rt-agent", t0.Add(-time.Hour))
	f.claims = append(f.claims, claim)
	f.withChildren(claim)
	f.jobs = append(f.jobs, record)
	c := f.newController(ctx)
	records := &fakeRecords{}
	c.SetSessionRecords(records)
	if _, err := c.sync(ctx, keyOf(claim)); err != nil {
		t.Fatal(err)
	}
	want := string(record.UID) + " -> SandboxClaim/c1/" + string(claim.UID)
	if len(records.moves) != 1 || records.moves[0] != want {
		t.Errorf("moves %v, want [%s]", records.moves, want)
	}
	if countActions(f, "delete jobs "+record.Name) != 1 {
		t.Error("the kept Job was not deleted after the move")
	}
}

func recordNameOf(claim *airlockv1alpha1.SandboxClaim) string {
	return workspace.RecordName(claim.Spec.WorkspaceDir)
}
