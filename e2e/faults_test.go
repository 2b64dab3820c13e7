//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/claim"
)

// The fault suites (issue 24, item 5; docs/nothing-lost.md, "The fault suite"): a faultMonitor
// watches a namespace's claims and pods from before the first session to after the last fault,
// and records every moment one of the promises is broken:
//
//   - limits: never more live admitted claims of a session than its runtime's maxPerSession, of
//     the registry sandbox than its maxInstances, never more Binding+Bound claims of a runtime
//     than its maxConcurrent (SPEC section 3), at every event a watch delivers;
//   - one writer: never two pods that are not terminated (sandbox pods, or a sandbox pod and a
//     sync-back or cleanup Job's pod) on one workspace directory of the content volume (SPEC
//     section 5), at every pod event;
//   - says why: a claim that waits (Pending, Queued, Binding, Reaping) longer than the bound the
//     suite derives from the class's timeouts carries the reason in a condition a person can read.
//
// Watches end (an API server stalled, a watch timed out): the monitor watches again from the
// last resourceVersion it saw, and lists again when that is too old.

// faultLimits are the limits a faultMonitor holds the namespace's claims to.
type faultLimits struct {
	maxPerSession, maxConcurrent map[string]int // by runtime name
	maxInstances                 map[string]int // by registry sandbox (all runtimes share one registry)
}

type faultMonitor struct {
	ns       string
	limits   faultLimits
	whyBound time.Duration // how long a claim may wait in silence

	mu          sync.Mutex
	claims      map[string]*airlockv1alpha1.SandboxClaim
	since       map[types.UID]time.Time // when the claim was first seen in its current phase
	sincePhase  map[types.UID]airlockv1alpha1.ClaimPhase
	pods        map[types.UID]*corev1.Pod
	violations  []string
	reported    map[string]bool // violations already recorded (one per key)
	claimEvents int
	podEvents   int
	relists     int
	claimsSeen  map[types.UID]bool
	podsSeen    map[types.UID]bool
	maxAdmitted int               // the most live admitted claims of the namespace seen at once
	maxRunning  int               // the most Binding+Bound claims of the namespace seen at once
	lostSeen    map[string]string // claim -> the PodLost reason last seen True
	// workspaces are the claims' workspace directories by UID, kept after their deletion.
	workspaces map[types.UID]string
	uidByName  map[string]types.UID // the last claim of each name seen
}

func newFaultMonitor(ns string, limits faultLimits, whyBound time.Duration) *faultMonitor {
	return &faultMonitor{
		ns: ns, limits: limits, whyBound: whyBound,
		claims: map[string]*airlockv1alpha1.SandboxClaim{}, since: map[types.UID]time.Time{},
		sincePhase: map[types.UID]airlockv1alpha1.ClaimPhase{}, pods: map[types.UID]*corev1.Pod{},
		reported: map[string]bool{}, claimsSeen: map[types.UID]bool{}, podsSeen: map[types.UID]bool{},
		lostSeen: map[string]string{}, workspaces: map[types.UID]string{}, uidByName: map[string]types.UID{},
	}
}

// workspaceOf returns the workspace directory of the last claim named name the watch saw, deleted
// since or not ("" for none): a claim whose pod the operator's stop released may be gone a moment
// after its session closed.
func (m *faultMonitor) workspaceOf(name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.workspaces[m.uidByName[name]]
}

// start watches the namespace's claims and pods until ctx ends; the returned function waits for
// both watches to have stopped.
func (m *faultMonitor) start(ctx context.Context) (wait func()) {
	var wg sync.WaitGroup
	claims := airlockClient.AirlockV1alpha1().SandboxClaims(m.ns)
	pods := kubeClient.CoreV1().Pods(m.ns)
	wg.Go(func() { relistWatch(ctx, listOf(claims.List), watchFrom(claims.Watch), m.resetClaims, m.claimEvent) })
	wg.Go(func() { relistWatch(ctx, listOf(pods.List), watchFrom(pods.Watch), m.resetPods, m.podEvent) })
	return wg.Wait
}

// listOf lists everything of a typed client's List as relistWatch wants it: the items and the
// list's resourceVersion.
func listOf[L runtime.Object](list func(context.Context, metav1.ListOptions) (L, error)) func(context.Context) ([]runtime.Object, string, error) {
	return func(ctx context.Context) ([]runtime.Object, string, error) {
		l, err := list(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, "", err
		}
		objs, err := meta.ExtractList(l)
		if err != nil {
			return nil, "", err
		}
		acc, err := meta.ListAccessor(l)
		if err != nil {
			return nil, "", err
		}
		return objs, acc.GetResourceVersion(), nil
	}
}

// watchFrom watches with a typed client's Watch from a resourceVersion.
func watchFrom(w func(context.Context, metav1.ListOptions) (watch.Interface, error)) func(context.Context, string) (watch.Interface, error) {
	return func(ctx context.Context, rv string) (watch.Interface, error) {
		return w(ctx, metav1.ListOptions{ResourceVersion: rv})
	}
}

// relistWatch lists, then watches from the list's resourceVersion, and watches again from the
// last resourceVersion seen whenever a watch ends; it lists again (reset replaces the state)
// when a watch cannot be started or reports an error (410 Gone: too old a resourceVersion), as
// an informer does. It returns when ctx ends.
func relistWatch(ctx context.Context,
	list func(context.Context) ([]runtime.Object, string, error),
	watchFrom func(context.Context, string) (watch.Interface, error),
	reset func([]runtime.Object), event func(watch.EventType, runtime.Object)) {
	rv := ""
	for ctx.Err() == nil {
		if rv == "" {
			objs, listRV, err := list(ctx)
			if err != nil {
				retryPause(ctx) // the API server is not answering (stalled): try again
				continue
			}
			reset(objs)
			rv = listRV
		}
		w, err := watchFrom(ctx, rv)
		if err != nil {
			rv = ""
			retryPause(ctx)
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				rv = "" // 410 Gone, most likely: list again
				break
			}
			if acc, err := meta.Accessor(ev.Object); err == nil && ev.Type != watch.Bookmark {
				rv = acc.GetResourceVersion()
				event(ev.Type, ev.Object)
			}
		}
		w.Stop()
	}
}

// retryPause is the pause before a list or watch is tried again after an error (a client's
// backoff, not a synchronisation).
func retryPause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(200 * time.Millisecond):
	}
}

func (m *faultMonitor) resetClaims(objs []runtime.Object) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.relists++
	m.claims = map[string]*airlockv1alpha1.SandboxClaim{}
	for _, o := range objs {
		c := o.(*airlockv1alpha1.SandboxClaim)
		m.claims[c.Name] = c
		m.observeClaim(c)
	}
	m.checkClaims("relist")
}

func (m *faultMonitor) claimEvent(t watch.EventType, o runtime.Object) {
	c, ok := o.(*airlockv1alpha1.SandboxClaim)
	if !ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.claimEvents++
	if t == watch.Deleted {
		delete(m.claims, c.Name)
	} else {
		m.claims[c.Name] = c
		m.observeClaim(c)
	}
	m.checkClaims(fmt.Sprintf("%s %s", t, c.Name))
}

// observeClaim notes when the claim entered its phase, and its PodLost reason.
func (m *faultMonitor) observeClaim(c *airlockv1alpha1.SandboxClaim) {
	m.claimsSeen[c.UID] = true
	m.workspaces[c.UID] = c.Spec.WorkspaceDir
	m.uidByName[c.Name] = c.UID
	if p, ok := m.sincePhase[c.UID]; !ok || p != c.Status.Phase {
		m.sincePhase[c.UID] = c.Status.Phase
		m.since[c.UID] = time.Now()
	}
	if cond := meta.FindStatusCondition(c.Status.Conditions, airlockv1alpha1.ConditionPodLost); cond != nil && cond.Status == metav1.ConditionTrue {
		m.lostSeen[c.Name] = cond.Reason
	}
}

// replacedClaims are the claims another claim replaces (spec.replaces), as admission counts
// them: such a Failed claim is not live, whatever its status.replacedBy says yet.
func replacedClaims(claims map[string]*airlockv1alpha1.SandboxClaim) map[string]bool {
	out := map[string]bool{}
	for _, c := range claims {
		if c.Spec.Replaces != "" && c.DeletionTimestamp == nil && c.Status.Phase != airlockv1alpha1.ClaimRefused {
			out[c.Spec.Replaces] = true
		}
	}
	return out
}

// admittedLive says whether a claim holds a place against maxPerSession and maxInstances: it was
// admitted or queued (Pending claims are undecided asks), is not being deleted, and is not a
// Failed claim that was replaced.
func admittedLive(c *airlockv1alpha1.SandboxClaim, replaced map[string]bool) bool {
	if c.DeletionTimestamp != nil {
		return false
	}
	switch c.Status.Phase {
	case airlockv1alpha1.ClaimQueued, airlockv1alpha1.ClaimBinding, airlockv1alpha1.ClaimBound, airlockv1alpha1.ClaimReaping:
		return true
	case airlockv1alpha1.ClaimFailed:
		return c.Status.ReplacedBy == "" && !replaced[c.Name]
	}
	return false
}

// checkClaims checks the limits and the silent waits against the claims as they are now.
func (m *faultMonitor) checkClaims(after string) {
	replaced := replacedClaims(m.claims)
	perSession, perSandbox, running := map[string]int{}, map[string]int{}, map[string]int{}
	admitted, runningAll := 0, 0
	for _, c := range m.claims {
		if admittedLive(c, replaced) {
			perSession[c.Spec.RuntimeName+"/"+c.Spec.Session]++
			perSandbox[c.Spec.Sandbox]++
			admitted++
		}
		if c.DeletionTimestamp == nil && (c.Status.Phase == airlockv1alpha1.ClaimBinding || c.Status.Phase == airlockv1alpha1.ClaimBound) {
			running[c.Spec.RuntimeName]++
			runningAll++
		}
	}
	m.maxAdmitted, m.maxRunning = max(m.maxAdmitted, admitted), max(m.maxRunning, runningAll)
	for key, n := range perSession {
		rt := strings.SplitN(key, "/", 2)[0]
		if limit, ok := m.limits.maxPerSession[rt]; ok && n > limit {
			m.violate("maxPerSession "+key, fmt.Sprintf("session %s: %d live admitted claims > maxPerSession %d (after %s)", key, n, limit, after))
		}
	}
	for sb, n := range perSandbox {
		if limit, ok := m.limits.maxInstances[sb]; ok && n > limit {
			m.violate("maxInstances "+sb, fmt.Sprintf("sandbox %s: %d live admitted claims > maxInstances %d (after %s)", sb, n, limit, after))
		}
	}
	for rt, n := range running {
		if limit, ok := m.limits.maxConcurrent[rt]; ok && n > limit {
			m.violate("maxConcurrent "+rt, fmt.Sprintf("runtime %s: %d Binding+Bound claims > maxConcurrent %d (after %s)", rt, n, limit, after))
		}
	}
	m.checkSilentLocked(time.Now())
}

// checkSilent records every claim that has waited longer than whyBound without saying why.
func (m *faultMonitor) checkSilent() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.checkSilentLocked(time.Now())
}

func (m *faultMonitor) checkSilentLocked(now time.Time) {
	for _, c := range m.claims {
		if !waitingPhase(c.Status.Phase) || c.DeletionTimestamp != nil {
			continue
		}
		waited := now.Sub(m.since[c.UID])
		if waited <= m.whyBound || saysWhy(c) {
			continue
		}
		m.violate("silent "+string(c.UID)+"/"+string(c.Status.Phase), fmt.Sprintf("claim %s has been %s for %s (bound %s) without saying why: reason %q message %q conditions %s",
			c.Name, c.Status.Phase, waited.Round(time.Second), m.whyBound, c.Status.Reason, c.Status.Message, conditionSummary(c.Status.Conditions)))
	}
}

// waitingPhase says whether a claim in phase is waiting for something (not running, not ended).
func waitingPhase(p airlockv1alpha1.ClaimPhase) bool {
	switch p {
	case "", airlockv1alpha1.ClaimPending, airlockv1alpha1.ClaimQueued, airlockv1alpha1.ClaimBinding, airlockv1alpha1.ClaimReaping:
		return true
	}
	return false
}

// saysWhy says whether a waiting claim tells a person why it waits: Queued for a slot (its
// reason says which limit), a pod that cannot run (PodLost True, with a message naming the pod
// and its Node), or a sync-back that waits or fails (the SyncBack condition with a reason and a
// message).
func saysWhy(c *airlockv1alpha1.SandboxClaim) bool {
	if c.Status.Phase == airlockv1alpha1.ClaimQueued && c.Status.Reason != "" {
		return true
	}
	if cond := meta.FindStatusCondition(c.Status.Conditions, airlockv1alpha1.ConditionPodLost); cond != nil && cond.Status == metav1.ConditionTrue && cond.Message != "" {
		return true
	}
	if c.Status.Phase == airlockv1alpha1.ClaimReaping {
		if cond := meta.FindStatusCondition(c.Status.Conditions, claim.ConditionSyncBack); cond != nil && cond.Status != metav1.ConditionTrue && cond.Reason != "" && cond.Message != "" {
			return true
		}
	}
	return false
}

func conditionSummary(conds []metav1.Condition) string {
	var parts []string
	for _, c := range conds {
		parts = append(parts, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func (m *faultMonitor) resetPods(objs []runtime.Object) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.relists++
	m.pods = map[types.UID]*corev1.Pod{}
	for _, o := range objs {
		p := o.(*corev1.Pod)
		m.pods[p.UID] = p
		m.podsSeen[p.UID] = true
	}
	for _, p := range m.pods {
		m.checkOneWriter(p, "relist")
	}
}

func (m *faultMonitor) podEvent(t watch.EventType, o runtime.Object) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.podEvents++
	if t == watch.Deleted {
		delete(m.pods, p.UID)
		return
	}
	m.pods[p.UID] = p
	m.podsSeen[p.UID] = true
	m.checkOneWriter(p, string(t))
}

// podWorkspace is the workspace directory a pod of the claims writes or reads: a sandbox pod's
// subPath of the content volume, a sync-back or cleanup Job pod's --from. "" for other pods.
func podWorkspace(p *corev1.Pod) string {
	if p.Labels[airlockv1alpha1.LabelSyncOf] != "" {
		for _, c := range p.Spec.Containers {
			for _, a := range c.Args {
				if from, ok := strings.CutPrefix(a, "--from="); ok {
					return path.Clean(from)
				}
			}
		}
		return ""
	}
	if p.Labels[airlockv1alpha1.LabelClaim] == "" {
		return ""
	}
	pvcs := map[string]bool{}
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			pvcs[v.Name] = true
		}
	}
	for _, c := range p.Spec.Containers {
		for _, vm := range c.VolumeMounts {
			if pvcs[vm.Name] && vm.SubPath != "" {
				return path.Clean(vm.SubPath)
			}
		}
	}
	return ""
}

func podTerminated(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// checkOneWriter records a violation when p, not terminated, shares its workspace with another
// pod that is not terminated either.
func (m *faultMonitor) checkOneWriter(p *corev1.Pod, after string) {
	ws := podWorkspace(p)
	if ws == "" || podTerminated(p) {
		return
	}
	for _, q := range m.pods {
		if q.UID == p.UID || podTerminated(q) || podWorkspace(q) != ws {
			continue
		}
		a, b := string(p.UID), string(q.UID)
		if a > b {
			a, b = b, a
		}
		m.violate("writers "+a+" "+b, fmt.Sprintf("two pods on workspace %s: %s (%s, node %q, deleting %v) and %s (%s, node %q, deleting %v) (at %s of the first)",
			ws, p.Name, p.Status.Phase, p.Spec.NodeName, p.DeletionTimestamp != nil, q.Name, q.Status.Phase, q.Spec.NodeName, q.DeletionTimestamp != nil, after))
	}
}

func (m *faultMonitor) violate(key, msg string) {
	if m.reported[key] {
		return
	}
	m.reported[key] = true
	m.violations = append(m.violations, time.Now().UTC().Format("15:04:05.000")+" "+msg)
}

// addViolation records a violation found outside the watches (an acquire's answer).
func (m *faultMonitor) addViolation(key, msg string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.violate(key, msg)
}

func (m *faultMonitor) allViolations() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.violations...)
}

// snapshot returns copies of the claims as the watch sees them now.
func (m *faultMonitor) snapshot() []*airlockv1alpha1.SandboxClaim {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*airlockv1alpha1.SandboxClaim, 0, len(m.claims))
	for _, c := range m.claims {
		out = append(out, c.DeepCopy())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// podsOn returns the claims' pods (sandbox pods) the watch sees on node.
func (m *faultMonitor) podsOn(node string) []*corev1.Pod {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*corev1.Pod
	for _, p := range m.pods {
		if p.Spec.NodeName == node && p.Labels[airlockv1alpha1.LabelClaim] != "" {
			out = append(out, p.DeepCopy())
		}
	}
	return out
}

// lostReasons returns the PodLost reasons seen True, by claim.
func (m *faultMonitor) lostReasons() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]string{}
	for k, v := range m.lostSeen {
		out[k] = v
	}
	return out
}

func (m *faultMonitor) summary() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return fmt.Sprintf("%d claims and %d pods seen over %d claim and %d pod events (%d relists); at most %d live admitted claims and %d Binding+Bound at once",
		len(m.claimsSeen), len(m.podsSeen), m.claimEvents, m.podEvents, m.relists, m.maxAdmitted, m.maxRunning)
}
