package claim

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/airlock-dev/airlock/pkg/controller/objectcontrol"
)

// blockingJobs is a Job writer whose Create waits, after it has been called, until release is
// closed; entered says a Create is waiting.
type blockingJobs struct {
	objectcontrol.Interface[*batchv1.Job]
	entered chan string
	release chan struct{}
}

func (b blockingJobs) Create(ctx context.Context, job *batchv1.Job) error {
	b.entered <- job.Namespace + "/" + job.Name
	<-b.release
	return b.Interface.Create(ctx, job)
}

// TestSyncTurnSlowCreateHoldsNoWorker: while a turn pass waits on a slow Job create, a claim's
// sync of that namespace asks for its turn and returns (no lock is held across the call), and
// another namespace's turn pass creates its Job; the waiting request is served by the next pass,
// after the slow one, which sees the first Job and makes it wait.
func TestSyncTurnSlowCreateHoldsNoWorker(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t).withDefaults()
	first := reapingClaim("c1", t0.Add(-2*time.Hour), "projects/demo")
	second := reapingClaim("c2", t0.Add(-time.Hour), "projects/demo")
	elsewhere := reapingClaim("c3", t0.Add(-time.Hour), "projects/demo")
	elsewhere.Namespace = "team-b"
	f.claims = append(f.claims, first, second, elsewhere)
	rt, reg := f.runtimes[0].DeepCopy(), f.registries[0].DeepCopy()
	rt.Namespace, reg.Namespace = "team-b", "team-b"
	f.runtimes, f.registries = append(f.runtimes, rt), append(f.registries, reg)
	f.withChildren(first).withChildren(second).withChildren(elsewhere)
	c := f.newController(ctx)
	slow := blockingJobs{Interface: c.children.jobs, entered: make(chan string, 3), release: make(chan struct{})}
	c.children.jobs = slow

	if _, err := c.sync(ctx, keyOf(first)); err != nil {
		t.Fatal(err)
	}
	if n := c.turns.pending(testNamespace); n != 1 {
		t.Fatalf("%d turn requests, want c1's", n)
	}
	done := make(chan error, 1)
	go func() { done <- c.takeSyncTurns(ctx, testNamespace) }()
	if got := <-slow.entered; got != testNamespace+"/c1-sync" {
		t.Fatalf("the pass creates %s, want c1's Job", got)
	}
	// The first pass is inside Create: a claim worker of the namespace is not held.
	if _, err := c.sync(ctx, keyOf(second)); err != nil {
		t.Fatal(err)
	}
	// Another namespace's pass is not held either: its Create is reached (and let through).
	if _, err := c.sync(ctx, keyOf(elsewhere)); err != nil {
		t.Fatal(err)
	}
	if n := c.turns.pending("team-b"); n != 1 {
		t.Fatalf("team-b has %d turn requests, want c3's", n)
	}
	other := make(chan error, 1)
	go func() { other <- c.takeSyncTurns(ctx, "team-b") }()
	if got := <-slow.entered; got != "team-b/c3-sync" {
		t.Fatalf("the other namespace's pass creates %s, want c3's Job", got)
	}
	close(slow.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-other; err != nil {
		t.Fatal(err)
	}
	// c2's request waited for the next pass: c1's Job is running (not yet in the cache).
	if err := c.takeSyncTurns(ctx, testNamespace); err != nil {
		t.Fatal(err)
	}
	if cond := f.syncBackCondition("c2"); cond == nil || cond.Reason != ReasonSyncBackWaiting {
		t.Errorf("c2's SyncBack condition %+v, want it waiting for c1's Job", cond)
	}
	select {
	case got := <-slow.entered:
		t.Errorf("a second Job into the target was created: %s", got)
	default:
	}
}
