//go:build e2e && realnode

package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// The split of a close-and-reacquire round (docs/nothing-lost.md): when the test's watches of
// the handle's claim and of its pods saw each step. The object's own timestamps (finishedAt,
// lastTransitionTime) have a resolution of one second, too coarse for the split; the watch
// events arrive on this machine's clock a few milliseconds after the write.

// claimMarks is when one claim (one round) was seen at each step.
type claimMarks struct{ created, reaping, gone, bound time.Time }

// podMarks is when one pod (one round) was seen at each step.
type podMarks struct{ created, scheduled, started, ready, deleting, exited, gone time.Time }

// reacquireTimeline records the claim's and its pods' watch events, one entry per UID, in the
// order they were created.
type reacquireTimeline struct {
	mu     sync.Mutex
	claims []*claimMarks
	pods   []*podMarks
	byUID  map[string]any
}

// mark sets *at to now if it is not set yet.
func mark(at *time.Time, now time.Time) {
	if at.IsZero() {
		*at = now
	}
}

func (tl *reacquireTimeline) claim(ev watch.Event, now time.Time) {
	c, ok := ev.Object.(*airlockv1alpha1.SandboxClaim)
	if !ok {
		return
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	m, _ := tl.byUID[string(c.UID)].(*claimMarks)
	if m == nil {
		m = &claimMarks{created: now}
		tl.byUID[string(c.UID)] = m
		tl.claims = append(tl.claims, m)
	}
	_, reap := c.Annotations[airlockv1alpha1.AnnotationReapRequested]
	switch {
	case ev.Type == watch.Deleted:
		mark(&m.gone, now)
	case reap || c.DeletionTimestamp != nil || c.Status.Phase == airlockv1alpha1.ClaimReaping:
		mark(&m.reaping, now)
	case c.Status.Phase == airlockv1alpha1.ClaimBound:
		mark(&m.bound, now)
	}
}

func (tl *reacquireTimeline) pod(ev watch.Event, now time.Time) {
	p, ok := ev.Object.(*corev1.Pod)
	if !ok {
		return
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	m, _ := tl.byUID[string(p.UID)].(*podMarks)
	if m == nil {
		m = &podMarks{created: now}
		tl.byUID[string(p.UID)] = m
		tl.pods = append(tl.pods, m)
	}
	if ev.Type == watch.Deleted {
		mark(&m.gone, now)
		return
	}
	if p.Spec.NodeName != "" {
		mark(&m.scheduled, now)
	}
	if p.DeletionTimestamp != nil {
		mark(&m.deleting, now)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running != nil {
			mark(&m.started, now)
		}
		if cs.State.Terminated != nil {
			mark(&m.exited, now)
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			mark(&m.ready, now)
		}
	}
}

// watchReacquire records the claim's and its pods' events until ctx is done.
func watchReacquire(ctx context.Context, t *testing.T, ns, claim string) *reacquireTimeline {
	t.Helper()
	tl := &reacquireTimeline{byUID: map[string]any{}}
	cw, err := airlockClient.AirlockV1alpha1().SandboxClaims(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + claim})
	if err != nil {
		t.Fatal(err)
	}
	pw, err := kubeClient.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: airlockv1alpha1.LabelClaim + "=" + claim})
	if err != nil {
		cw.Stop()
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for ev := range cw.ResultChan() {
			tl.claim(ev, time.Now())
		}
	}()
	go func() {
		defer wg.Done()
		for ev := range pw.ResultChan() {
			tl.pod(ev, time.Now())
		}
	}()
	t.Cleanup(func() { cw.Stop(); pw.Stop(); wg.Wait() })
	return tl
}

// splitStep is one step of a round: from the earlier mark to the later.
type splitStep struct {
	name     string
	from, to func(oldC, newC *claimMarks, oldP, newP *podMarks) time.Time
}

var reacquireSteps = []splitStep{
	{"close -> old pod deleting", func(oc, _ *claimMarks, _, _ *podMarks) time.Time { return oc.reaping }, func(_, _ *claimMarks, op, _ *podMarks) time.Time { return op.deleting }},
	{"old pod deleting -> container exited", func(_, _ *claimMarks, op, _ *podMarks) time.Time { return op.deleting }, func(_, _ *claimMarks, op, _ *podMarks) time.Time { return op.exited }},
	{"container exited -> old pod gone", func(_, _ *claimMarks, op, _ *podMarks) time.Time { return op.exited }, func(_, _ *claimMarks, op, _ *podMarks) time.Time { return op.gone }},
	// With the operator's stop the pod object goes before the kubelet reports its container's
	// exit (the two steps above are not seen): this one is the whole of it.
	{"old pod deleting -> old pod gone", func(_, _ *claimMarks, op, _ *podMarks) time.Time { return op.deleting }, func(_, _ *claimMarks, op, _ *podMarks) time.Time { return op.gone }},
	{"old pod gone -> old claim gone", func(_, _ *claimMarks, op, _ *podMarks) time.Time { return op.gone }, func(oc, _ *claimMarks, _, _ *podMarks) time.Time { return oc.gone }},
	{"old claim gone -> new claim", func(oc, _ *claimMarks, _, _ *podMarks) time.Time { return oc.gone }, func(_, nc *claimMarks, _, _ *podMarks) time.Time { return nc.created }},
	{"new claim -> new pod", func(_, nc *claimMarks, _, _ *podMarks) time.Time { return nc.created }, func(_, _ *claimMarks, _, np *podMarks) time.Time { return np.created }},
	{"new pod -> scheduled", func(_, _ *claimMarks, _, np *podMarks) time.Time { return np.created }, func(_, _ *claimMarks, _, np *podMarks) time.Time { return np.scheduled }},
	{"scheduled -> container running", func(_, _ *claimMarks, _, np *podMarks) time.Time { return np.scheduled }, func(_, _ *claimMarks, _, np *podMarks) time.Time { return np.started }},
	{"container running -> pod Ready", func(_, _ *claimMarks, _, np *podMarks) time.Time { return np.started }, func(_, _ *claimMarks, _, np *podMarks) time.Time { return np.ready }},
	{"pod Ready -> claim Bound", func(_, _ *claimMarks, _, np *podMarks) time.Time { return np.ready }, func(_, nc *claimMarks, _, _ *podMarks) time.Time { return nc.bound }},
	{"total: close -> claim Bound", func(oc, _ *claimMarks, _, _ *podMarks) time.Time { return oc.reaping }, func(_, nc *claimMarks, _, _ *podMarks) time.Time { return nc.bound }},
}

// report returns, for every step, the p50 and p90 in milliseconds over the rounds whose old
// and new claim and pod were all seen, and how many rounds that was.
func (tl *reacquireTimeline) report() string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	n := min(len(tl.claims), len(tl.pods))
	var b strings.Builder
	for _, s := range reacquireSteps {
		var ds []float64
		for i := 1; i < n; i++ {
			from := s.from(tl.claims[i-1], tl.claims[i], tl.pods[i-1], tl.pods[i])
			to := s.to(tl.claims[i-1], tl.claims[i], tl.pods[i-1], tl.pods[i])
			if from.IsZero() || to.IsZero() {
				continue
			}
			ds = append(ds, float64(to.Sub(from).Microseconds())/1000)
		}
		fmt.Fprintf(&b, "\n  %-40s p50 %6.0f ms  p90 %6.0f ms  (n=%d)", s.name, percentile(ds, 0.5), percentile(ds, 0.9), len(ds))
	}
	fmt.Fprintf(&b, "\n  (%d claims, %d pods seen)", len(tl.claims), len(tl.pods))
	if n > 2 {
		// One round's marks on the clock, to be matched with the node's containerd and
		// kubelet logs (_output/local-node/).
		oc, nc, op, np := tl.claims[1], tl.claims[2], tl.pods[1], tl.pods[2]
		const f = "15:04:05.000"
		fmt.Fprintf(&b, "\n  round 2 (UTC): close %s, old pod deleting %s, exited %s, gone %s, old claim gone %s, new claim %s, new pod %s, running %s, Ready %s, Bound %s",
			oc.reaping.UTC().Format(f), op.deleting.UTC().Format(f), op.exited.UTC().Format(f), op.gone.UTC().Format(f), oc.gone.UTC().Format(f),
			nc.created.UTC().Format(f), np.created.UTC().Format(f), np.started.UTC().Format(f), np.ready.UTC().Format(f), nc.bound.UTC().Format(f))
	}
	return b.String()
}
