package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	airlockfake "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/fake"
)

func claimIn(ns, name string, phase airlockv1alpha1.ClaimPhase) *airlockv1alpha1.SandboxClaim {
	return &airlockv1alpha1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Status:     airlockv1alpha1.SandboxClaimStatus{Phase: phase},
	}
}

func TestWaitClaimsSettledCountsTheNamespacesGiven(t *testing.T) {
	fake := airlockfake.NewSimpleClientset(
		claimIn("a", "1", airlockv1alpha1.ClaimBound),
		claimIn("a", "2", airlockv1alpha1.ClaimFailed),
		claimIn("b", "1", airlockv1alpha1.ClaimBound),
		claimIn("b", "2", airlockv1alpha1.ClaimBinding),
		// Another namespace's claims are not counted.
		claimIn("other", "1", airlockv1alpha1.ClaimBound),
	)
	// The watcher's start is signalled (client-go examples/fake-client): an update before it could
	// be missed by the fake, which does not replay from a resourceVersion.
	watching := make(chan struct{})
	var once sync.Once
	fake.PrependWatchReactor("sandboxclaims", func(k8stesting.Action) (bool, watch.Interface, error) {
		once.Do(func() { close(watching) })
		return false, nil, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), wait.ForeverTestTimeout)
	defer cancel()
	k := kube{airlock: fake}
	done := make(chan error, 1)
	var bound, failed int
	go func() {
		var err error
		bound, failed, err = k.waitClaimsSettled(ctx, clocktesting.NewFakeClock(time.Now()), time.Minute, []string{"a", "b"}, 4, nil)
		done <- err
	}()
	// The fourth claim becomes Bound after the wait has started.
	select {
	case <-watching:
	case <-ctx.Done():
		t.Fatal("never watched")
	}
	c := claimIn("b", "2", airlockv1alpha1.ClaimBound)
	if _, err := fake.AirlockV1alpha1().SandboxClaims("b").UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if bound != 3 || failed != 1 {
		t.Errorf("%d Bound, %d failed; want 3 and 1", bound, failed)
	}
}

func TestWaitClaimsSettledGivesUpWithoutProgress(t *testing.T) {
	fake := airlockfake.NewSimpleClientset(claimIn("a", "1", airlockv1alpha1.ClaimPending))
	clk := clocktesting.NewFakeClock(time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), wait.ForeverTestTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, _, err := kube{airlock: fake}.waitClaimsSettled(ctx, clk, 3*time.Minute, []string{"a"}, 1, nil)
		done <- err
	}()
	// Wait for the stall timer, then let 3 minutes pass with the claim still Pending.
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		return clk.HasWaiters(), nil
	}); err != nil {
		t.Fatal("the stall timer was never set")
	}
	clk.Step(3 * time.Minute)
	err := <-done
	if err == nil || !strings.Contains(err.Error(), "no progress") {
		t.Fatalf("error %v, want one saying the operator made no progress", err)
	}
	if ctx.Err() != nil {
		t.Fatal("gave up only at the test's timeout")
	}
}
