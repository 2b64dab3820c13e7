package operator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2/ktesting"
)

// termController is a controller that records each term it runs: when each starts and when
// each has returned, and whether two ever ran at once.
type termController struct {
	started  []chan struct{}
	returned []chan struct{}
	running  atomic.Int32
	overlaps atomic.Int32
	// informers are each term's informer (of any kind: a stand-in for the claim controller's).
	informers []cache.SharedIndexInformer
}

func newTermController(terms int) *termController {
	c := &termController{}
	for range terms {
		c.started = append(c.started, make(chan struct{}))
		c.returned = append(c.returned, make(chan struct{}))
	}
	c.informers = make([]cache.SharedIndexInformer, terms)
	return c
}

func (c *termController) descriptor() controllerDescriptor {
	var terms atomic.Int32
	return controllerDescriptor{name: "term", init: func(ctx context.Context, cc ControllerContext) (func(context.Context) error, error) {
		term := int(terms.Add(1)) - 1
		if term >= len(c.started) {
			return nil, fmt.Errorf("term %d: more terms than the test expects", term+1)
		}
		c.informers[term] = cc.KubeInformers.Apps().V1().Deployments().Informer()
		return func(ctx context.Context) error {
			if c.running.Add(1) > 1 {
				c.overlaps.Add(1)
			}
			close(c.started[term])
			<-ctx.Done()
			c.running.Add(-1)
			close(c.returned[term])
			return nil
		}, nil
	}}
}

// TestLeaderElectionLostCampaignsAgain: when the lease cannot be renewed (the API server refuses
// the lease's updates, as it cannot answer them during an outage), the leading work stops and is
// joined, the operator does not exit, its Sandbox API keeps answering, and once updates succeed
// again the replica leads again with a new term; two terms never run at once.
func TestLeaderElectionLostCampaignsAgain(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kube, airlock := newFakes()
	cfg := newTestConfig(kube, airlock)
	cfg.LeaderElection.LeaderElect = true
	// Short terms, so that a failed renewal is noticed quickly.
	cfg.LeaderElection.LeaseDuration.Duration = 600 * time.Millisecond
	cfg.LeaderElection.RenewDeadline.Duration = 400 * time.Millisecond
	cfg.LeaderElection.RetryPeriod.Duration = 100 * time.Millisecond

	var refuseUpdates atomic.Bool
	refused := make(chan struct{}, 1)
	kube.PrependReactor("update", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if !refuseUpdates.Load() {
			return false, nil, nil
		}
		select {
		case refused <- struct{}{}:
		default:
		}
		return true, nil, errors.New("injected: the API server does not answer lease updates")
	})

	lostBefore := leadershipLostCount(t)
	controller := newTermController(2)
	o, done := startOperator(t, ctx, cfg, controller.descriptor())
	api := serverURL(t, o, "Sandbox API")
	waitFor(t, controller.started[0], "the first term to start")

	refuseUpdates.Store(true)
	waitFor(t, controller.returned[0], "the first term's controller to stop once the lease is lost")
	// The elector campaigns again; its attempts are refused while the outage lasts.
	for range 2 {
		select {
		case <-refused:
		case err := <-done:
			t.Fatalf("the operator exited after losing the lease: %v", err)
		case <-time.After(wait.ForeverTestTimeout):
			t.Fatal("the replica did not campaign again")
		}
	}
	select {
	case err := <-done:
		t.Fatalf("the operator exited after losing the lease: %v", err)
	case <-controller.started[1]:
		t.Fatal("a second term started while the lease could not be written")
	default:
	}
	if status, body := get(t, http.DefaultClient, api+"/readyz"); status != http.StatusOK {
		t.Errorf("Sandbox API /readyz without the lease: %d %q, want 200", status, body)
	}
	if status, _ := get(t, http.DefaultClient, api+"/v1/nothing"); status != http.StatusNotFound {
		t.Errorf("Sandbox API without the lease: %d, want its JSON 404", status)
	}

	refuseUpdates.Store(false)
	waitFor(t, controller.started[1], "the second term to start once the lease can be written again")
	if holder, _ := getLease(t, kube); holder != testIdentity {
		t.Errorf("lease holder in the second term = %q, want %q", holder, testIdentity)
	}
	// The first term's elector run ended (and counted the loss) before the second campaign began.
	if lost := leadershipLostCount(t); lost-lostBefore != 1 {
		t.Errorf("airlock_operator_leadership_lost_total went up by %v, want 1", lost-lostBefore)
	}
	if n := controller.overlaps.Load(); n != 0 {
		t.Errorf("%d terms started while an earlier one still ran", n)
	}
	// The leader's caches are the term's: the first term's were stopped before the second began.
	if first, second := controller.informers[0], controller.informers[1]; first == second || !first.IsStopped() || second.IsStopped() {
		t.Errorf("term informers: the same %v, first stopped %v, second stopped %v; want a new one per term, the first stopped", first == second, first.IsStopped(), second.IsStopped())
	}

	cancel()
	if err := waitForResult(t, done); err != nil {
		t.Errorf("run after cancel: %v, want nil", err)
	}
	waitFor(t, controller.returned[1], "the second term to stop on shutdown")
}

// leadershipLostCount reads airlock_operator_leadership_lost_total from the registry /metrics serves.
func leadershipLostCount(t *testing.T) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "airlock_operator_leadership_lost_total" {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0 // not reported until it is first counted
}
