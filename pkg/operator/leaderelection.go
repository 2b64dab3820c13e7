package operator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// errLeaderElectionLost ends a campaign that lost the lease it held without being asked to (its
// renewals failed for the renew deadline: the API server was away, or refused them). The leading
// work has stopped and been joined by then; runWithLeaderElection campaigns again.
var errLeaderElectionLost = errors.New("leader election lost")

// leaderHealthzTimeout is how long past its lease's expiry a leader that failed to renew still
// passes /healthz (as in kube-controller-manager).
const leaderHealthzTimeout = 20 * time.Second

// runWithLeaderElection runs lead whenever this replica holds the lease, until ctx is done (it
// returns nil) or lead fails (it returns lead's error). A lost lease does not end it: the term's
// work is stopped and joined, and the replica campaigns again with a fresh elector, so one
// process never runs two terms' work at once, and what else it serves (the Sandbox API, the
// probes) carries on through an API server outage. In every case lead's context is cancelled and
// lead has returned before the lease is released or campaigned for again.
func runWithLeaderElection(ctx context.Context, cfg *Config, watchdog *leaderelection.HealthzAdaptor, recorder record.EventRecorder, lead func(ctx context.Context) error) error {
	logger := klog.FromContext(ctx)
	lease := klog.KRef(cfg.LeaderElection.ResourceNamespace, cfg.LeaderElection.ResourceName)
	for term := 1; ; term++ {
		err := campaign(ctx, cfg, watchdog, recorder, lead)
		if !errors.Is(err, errLeaderElectionLost) {
			return err
		}
		if ctx.Err() != nil {
			return nil // lost as shutdown began: nothing left to lead
		}
		logger.Info("Lost the lease; the leading work has stopped, campaigning again", "lease", lease, "identity", cfg.Identity, "campaign", term+1)
	}
}

// campaign runs one elector: it campaigns for the lease and runs lead while holding it. It returns
// nil once ctx is done and the lease has been released, errLeaderElectionLost if the lease was
// lost, or lead's error if lead failed. In every case lead's context is cancelled and lead has
// returned before campaign returns or the lease is released.
func campaign(ctx context.Context, cfg *Config, watchdog *leaderelection.HealthzAdaptor, recorder record.EventRecorder, lead func(ctx context.Context) error) error {
	logger := klog.FromContext(ctx)
	lease := klog.KRef(cfg.LeaderElection.ResourceNamespace, cfg.LeaderElection.ResourceName)

	// workCtx ends the leading work. The elector has a context of its own, ended only after the
	// work has returned, because it releases the lease as soon as its context ends.
	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	electionCtx, stopElection := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElection()

	t := &term{logger: logger, lease: lease, identity: cfg.Identity, workCtx: workCtx, stopWork: stopWork, lead: lead, failed: make(chan struct{})}
	elector, err := newElector(cfg, watchdog, recorder, t)
	if err != nil {
		return fmt.Errorf("configuring leader election: %w", err)
	}
	watchdog.SetLeaderElection(elector)

	logger.Info("Starting leader election", "lease", lease, "identity", cfg.Identity)
	electionDone := make(chan struct{})
	go func() {
		defer close(electionDone)
		elector.Run(electionCtx)
	}()

	var result error
	select {
	case <-ctx.Done():
		t.giveUp.Store(true)
	case <-t.failed:
		t.giveUp.Store(true)
	case <-electionDone:
		// Run returns before its context ends only when a held lease could not be renewed.
		result = errLeaderElectionLost
	}
	t.stopLeading()
	stopElection()
	<-electionDone

	t.mu.Lock()
	defer t.mu.Unlock()
	return errors.Join(result, t.leadErr)
}

// newElector returns an elector of the lease that runs t's leading work while it holds the lease,
// and stops it before the lease is released (releaseGuardLock).
func newElector(cfg *Config, watchdog *leaderelection.HealthzAdaptor, recorder record.EventRecorder, t *term) (*leaderelection.LeaderElector, error) {
	lock := &releaseGuardLock{
		Interface: &resourcelock.LeaseLock{
			LeaseMeta: metav1.ObjectMeta{Namespace: t.lease.Namespace, Name: t.lease.Name},
			Client:    cfg.LeaderElectionClient.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{
				Identity:      cfg.Identity,
				EventRecorder: recorder,
			},
		},
		beforeRelease: t.stopLeading,
	}
	return leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   cfg.LeaderElection.LeaseDuration.Duration,
		RenewDeadline:   cfg.LeaderElection.RenewDeadline.Duration,
		RetryPeriod:     cfg.LeaderElection.RetryPeriod.Duration,
		WatchDog:        watchdog,
		ReleaseOnCancel: true,
		Name:            cfg.LeaderElection.ResourceName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: t.run,
			// The elector calls this even when this replica never led.
			OnStoppedLeading: t.stopped,
			OnNewLeader: func(identity string) {
				if identity != cfg.Identity {
					t.logger.Info("New leader elected", "lease", t.lease, "leader", identity)
				}
			},
		},
	})
}

// term is one campaign's leading work: whether a term may still start, the running term's end,
// and how it ended.
type term struct {
	logger   klog.Logger
	lease    klog.ObjectRef
	identity string
	workCtx  context.Context
	stopWork context.CancelFunc
	lead     func(ctx context.Context) error
	// failed is closed when lead returned an error (leadErr).
	failed chan struct{}

	mu       sync.Mutex
	stopping bool          // no term may start any more
	termDone chan struct{} // closed when the leading work has returned; nil if it never started
	leadErr  error
	leading  atomic.Bool // this replica has held the lease
	giveUp   atomic.Bool // this replica asked to stop leading
}

// run is the elector's OnStartedLeading: it runs lead until the term or the campaign ends.
func (t *term) run(termCtx context.Context) {
	t.mu.Lock()
	if t.stopping {
		t.mu.Unlock()
		return
	}
	done := make(chan struct{})
	t.termDone = done
	t.leading.Store(true)
	t.mu.Unlock()
	defer close(done)

	t.logger.Info("Started leading", "lease", t.lease, "identity", t.identity)
	ctx, cancel := context.WithCancel(t.workCtx)
	defer cancel()
	defer context.AfterFunc(termCtx, cancel)()
	if err := t.lead(ctx); err != nil {
		t.mu.Lock()
		t.leadErr = err
		t.mu.Unlock()
		close(t.failed)
	}
}

// stopped is the elector's OnStoppedLeading, called even when this replica never led.
func (t *term) stopped() {
	switch {
	case !t.leading.Load():
	case t.giveUp.Load():
		t.logger.Info("Stopped leading", "lease", t.lease)
	default:
		leadershipLost.Inc()
		t.logger.Error(nil, "Leader election lost", "lease", t.lease)
	}
}

// stopLeading cancels the leading work and waits for it to return. It may be called more than
// once, from the elector's goroutine (before a release) and from campaign's.
func (t *term) stopLeading() {
	t.mu.Lock()
	t.stopping = true
	done := t.termDone
	t.mu.Unlock()
	t.stopWork()
	if done != nil {
		<-done
	}
}

// releaseGuardLock stops the leading work before the elector writes the release of the lease
// (a record without holder), whatever made it release: ReleaseOnCancel releases as soon as the
// renew loop ends, which can be before the elector cancels the leading work's context.
type releaseGuardLock struct {
	resourcelock.Interface
	beforeRelease func()
}

func (l *releaseGuardLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if ler.HolderIdentity == "" {
		l.beforeRelease()
	}
	return l.Interface.Update(ctx, ler)
}
