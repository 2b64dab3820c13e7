//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/client"
	"github.com/airlock-dev/airlock/pkg/controller/claim"
)

// The timeouts the suite's bounds are derived from (docs/nothing-lost.md): the class's
// startupTimeout (set by the suite), a sandbox pod's grace period, how long past its deadline a
// terminating pod counts as stuck (podStuckGrace), how often a lost pod is looked at again
// (lostPodRecheck), and the operators' lease.
const (
	faultStartupTimeout = 20 * time.Second
	faultPodGrace       = corev1.DefaultTerminationGracePeriodSeconds * time.Second
	faultPodStuckGrace  = time.Minute
	faultLostRecheck    = 30 * time.Second
	faultLease          = 6 * time.Second
	faultOutage         = 2*faultLease - time.Second
	// faultBusySlack is what a busy machine adds to each wait: informer lag, a queue of syncs.
	faultBusySlack = 30 * time.Second
)

// faultWhyBound is how long a claim may wait without saying why: a pod deleted is gone within
// its grace period, or counts as stuck podStuckGrace later, or its Node is found lost at the next
// recheck; a Binding claim fails at its startupTimeout; an API server outage and a failover
// (a lease) delay every write. Past it, the claim says why (faultMonitor.checkSilent).
const faultWhyBound = faultPodGrace + faultPodStuckGrace + faultLostRecheck + faultOutage + faultLease + faultBusySlack

// faultLoad is the sessions' traffic: every session of every runtime, through whichever operator
// replica is up, and what the answers were.
type faultLoad struct {
	ns      string
	monitor *faultMonitor
	tokens  map[string]string // runtime -> its ServiceAccount's token

	mu       sync.Mutex
	ops      []*apiOperator
	next     int
	answers  map[string]int
	sessions int
	acquires int
}

// op returns the next operator replica that is up (round robin).
func (l *faultLoad) op() *apiOperator {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	return l.ops[l.next%len(l.ops)]
}

// setOps replaces the replicas the load goes to (before one is killed, after one is started).
func (l *faultLoad) setOps(ops ...*apiOperator) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ops = ops
}

func (l *faultLoad) count(answer string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.answers[answer]++
}

// classify names an answer to an acquire, and records a violation for an answer that breaks the
// API's promises: a 500, a 202 with no phase, a 200 without an address.
func (l *faultLoad) classify(req client.AcquireRequest, got *client.AcquireResponse, status int, err error) string {
	var apiErr *client.APIError
	switch {
	case errors.As(err, &apiErr):
		if apiErr.Status == http.StatusInternalServerError {
			l.monitor.addViolation("500 "+req.Runtime+req.Session+req.Handle, fmt.Sprintf("acquire %s %s %s answered 500: %v", req.Runtime, req.Session, req.Handle, err))
		}
		return fmt.Sprintf("%d %s", apiErr.Status, apiErr.Reason)
	case err != nil:
		return "transport error" // a replica killed or stalled mid-request, a deadline
	case status == http.StatusOK:
		if len(got.Addresses) == 0 {
			l.monitor.addViolation("200 "+got.Claim, fmt.Sprintf("acquire of %s answered 200 without an address: %+v", got.Claim, got))
		}
		return "200"
	default:
		if got.Phase == "" {
			l.monitor.addViolation("202 "+got.Claim, fmt.Sprintf("acquire of %s answered %d without a phase: %+v", got.Claim, status, got))
		}
		return fmt.Sprintf("%d %s/%s", status, got.Phase, got.Reason)
	}
}

// runSession acquires every handle of the session, renews those that are Bound, and closes the
// session after a number of rounds or when stop closes. The rounds are paced by a ticker: load,
// not a synchronisation.
func (l *faultLoad) runSession(ctx context.Context, stop <-chan struct{}, rt, session string, handles []string, rounds int) {
	l.mu.Lock()
	l.sessions++
	l.mu.Unlock()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	defer l.closeSession(ctx, rt, session)
	for range rounds {
		for _, h := range handles {
			req := client.AcquireRequest{Namespace: l.ns, Runtime: rt, Session: session, Handle: h, WaitSeconds: waitSeconds(2)}
			c := l.op().client(l.tokens[rt])
			got, status, err := c.AcquireOnce(ctx, req)
			answer := l.classify(req, got, status, err)
			l.count(answer)
			l.mu.Lock()
			l.acquires++
			l.mu.Unlock()
			if answer == "200" {
				_ = c.Renew(ctx, client.RenewRequest{Namespace: l.ns, Runtime: rt, Session: session, Handle: h})
			}
		}
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// closeSession closes the session, calling again (another replica) until it is answered: 202,
// or an error that calling again would not change (a deleted runtime's session: 404).
func (l *faultLoad) closeSession(ctx context.Context, rt, session string) {
	for ctx.Err() == nil {
		_, err := l.op().client(l.tokens[rt]).CloseSession(ctx, client.SessionRequest{Namespace: l.ns, Runtime: rt, Session: session})
		var apiErr *client.APIError
		switch {
		case err == nil:
			l.count("close 202")
			return
		case errors.As(err, &apiErr) && apiErr.Status != http.StatusServiceUnavailable:
			l.count(fmt.Sprintf("close %d %s", apiErr.Status, apiErr.Code))
			return
		}
		retryPause(ctx) // a replica killed or not ready, the API server stalled
	}
}

// operators tracks the replicas the suite runs and which of them leads.
type operators struct {
	t      *testing.T
	ns     string
	lease  string
	byID   map[string]*apiOperator // lease holder identity -> replica
	all    []*apiOperator
	killed int
}

var identityRE = regexp.MustCompile(`"Starting leader election".* identity="([^"]+)"`)

// startReplica starts one more operator replica and learns its identity from its log.
func (o *operators) startReplica() *apiOperator {
	t := o.t
	t.Helper()
	op := startAPIOperator(t, o.ns) // a lease of faultLease (startOperator's flags)
	o.all = append(o.all, op)
	eventually(t, time.Minute, "the new replica's identity in its log", func(context.Context) (bool, error) {
		b, err := os.ReadFile(op.log)
		if m := identityRE.FindSubmatch(b); err == nil && m != nil {
			o.byID[string(m[1])] = op
			return true, nil
		}
		return false, nil
	})
	return op
}

// live returns the replicas that have not been killed.
func (o *operators) live() []*apiOperator {
	var out []*apiOperator
	for _, op := range o.all {
		select {
		case <-op.done:
		default:
			out = append(out, op)
		}
	}
	return out
}

// killLeader kills the replica holding the lease (SIGKILL: no release), after taking it out of
// the load, and waits for another replica to take the lease; it records that one's identity.
func (o *operators) killLeader(load *faultLoad) {
	t := o.t
	t.Helper()
	holder, err := leaseHolder(context.Background(), o.ns, o.lease)
	leader := o.byID[holder]
	if err != nil || leader == nil {
		eventually(t, time.Minute, "a lease holder", func(ctx context.Context) (bool, error) {
			holder, err = leaseHolder(ctx, o.ns, o.lease)
			leader = o.byID[holder]
			return err == nil && leader != nil, nil
		})
	}
	if leader == nil {
		t.Fatalf("the leader %q (%v) is not a replica the suite knows", holder, err)
	}
	var rest []*apiOperator
	for _, op := range o.live() {
		if op != leader {
			rest = append(rest, op)
		}
	}
	load.setOps(rest...)
	_ = leader.stop(t, syscall.SIGKILL)
	o.killed++
	t.Logf("fault: leader %s killed", holder)
	eventually(t, time.Minute, "another replica to take the lease", func(ctx context.Context) (bool, error) {
		h, err := leaseHolder(ctx, o.ns, o.lease)
		if err != nil || h == "" || h == holder {
			return false, nil
		}
		return o.byID[h] != nil, nil
	})
}

// apiFaultSuite is TestFaultSuiteAPIOnly's state: the namespace, the operators, the load, the
// watches, and the faults injected so far.
type apiFaultSuite struct {
	t         *testing.T
	ctx       context.Context
	e         *claimEnv
	apiserver int
	kubelets  kubelets
	ops       *operators
	load      *faultLoad
	monitor   *faultMonitor
	faults    int
}

const (
	faultMaxPerSession, faultMaxConcurrent, faultMaxInstances = 2, 4, 14
	faultSessionsPerRuntime, faultHandlesPerSession           = 4, 3
	faultRounds                                               = 15 // per session, then it closes and the next opens
)

// TestFaultSuiteAPIOnly (issue 24, item 5, the API-only plane: kwok fakes the pods, so no bytes
// here; TestRealNodeFaultSuite has them): a burst of sessions of three runtimes, each session
// with more handles than maxPerSession, more sessions than maxConcurrent and, together, more than
// the sandbox's maxInstances, closing and opening sessions all along, while the suite kills the
// leader operator (twice), stalls the API server past the lease, deletes a runtime, deletes a
// Node (killing the leader again at once), and stops kwok (every Node's kubelet), releasing one
// Node by the out-of-service taint. A watch of the claims and one of the pods, from before the
// first session, assert at every event: never more admitted than the limits, never two pods on
// one workspace; every claim that waits past faultWhyBound says why; at the end every claim ends.
func TestFaultSuiteAPIOnly(t *testing.T) {
	apiserver, ok := apiServerProcess(t)
	if !ok {
		t.Skip("the suite runs against a cluster it did not start: it cannot stall its API server or stop its kubelets")
	}
	kwok, _ := kwokProcess(t)
	if nodes, err := kubeClient.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{}); err != nil || len(nodes.Items) < 2 {
		t.Skipf("needs two nodes (%v)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s := &apiFaultSuite{t: t, ctx: ctx, apiserver: apiserver, kubelets: kubelets{t: t, pid: kwok}}
	t.Cleanup(s.kubelets.resume)
	runtimes := []string{"agent", "beta", "doomed"}
	limits := s.setup(runtimes)

	s.monitor = newFaultMonitor(s.e.ns, limits, faultWhyBound)
	watchCtx, stopWatch := context.WithCancel(ctx)
	waitWatch := s.monitor.start(watchCtx)
	defer func() { stopWatch(); waitWatch() }()
	s.ops = &operators{t: t, ns: s.e.ns, lease: "airlock-operator-e2e", byID: map[string]*apiOperator{}}
	s.ops.startReplica()
	s.ops.startReplica()
	s.load.monitor = s.monitor
	s.load.setOps(s.ops.live()...)
	stopLoad := s.startSessions(runtimes)
	defer stopLoad()
	s.waitBound("the burst's first claims Bound")

	// 1. The leader is killed mid-burst; a replica takes its place.
	s.killLeader()
	// 2. The API server stalls past the lease.
	s.stallAPIServer()
	s.waitBound("claims Bound again after the outage")
	// 3. A runtime is deleted with its sessions running: its claims go (garbage collection).
	if err := airlockClient.AirlockV1alpha1().AgentRuntimes(s.e.ns).Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.faults++
	t.Log("fault: runtime doomed deleted")
	// 4. A Node is deleted (the one with the most sandboxes), and the leader killed at once.
	s.deleteNode()
	s.waitClaims("runtime doomed's claims gone", func(cs []*airlockv1alpha1.SandboxClaim) bool {
		for _, c := range cs {
			if c.Spec.RuntimeName == "doomed" {
				return false
			}
		}
		return true
	})
	// 5. kwok stops: every Node's kubelet is gone; one Node is released by the out-of-service taint.
	s.stopKubelets()
	s.waitBound("claims Bound again after kwok's return")

	// The end: the sessions close, and every claim ends.
	stopLoad()
	s.waitEnded()
	stopWatch()
	waitWatch()
	s.report()
}

// setup makes the namespace, the class (startupTimeout faultStartupTimeout), the runtimes (each
// with a ServiceAccount of its name) and their tokens, and returns the limits.
func (s *apiFaultSuite) setup(runtimes []string) faultLimits {
	t := s.t
	t.Helper()
	s.e = newClaimEnv(t, "airlock-faults", claimEnvOptions{maxConcurrent: faultMaxConcurrent, maxPerSession: faultMaxPerSession, maxInstances: faultMaxInstances})
	class, err := airlockClient.AirlockV1alpha1().SandboxClasses().Get(s.ctx, s.e.class, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	class.Spec.StartupTimeout = &metav1.Duration{Duration: faultStartupTimeout}
	if _, err := airlockClient.AirlockV1alpha1().SandboxClasses().Update(s.ctx, class, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	limits := faultLimits{maxPerSession: map[string]int{}, maxConcurrent: map[string]int{}, maxInstances: map[string]int{"codegen": faultMaxInstances}}
	s.load = &faultLoad{ns: s.e.ns, tokens: map[string]string{}, answers: map[string]int{}}
	for _, rt := range runtimes {
		if rt != "agent" {
			createRuntime(t, s.e, rt, rt)
		}
		limits.maxPerSession[rt], limits.maxConcurrent[rt] = faultMaxPerSession, faultMaxConcurrent
		s.load.tokens[rt] = serviceAccountToken(t, s.e.ns, rt)
	}
	return limits
}

// startSessions runs faultSessionsPerRuntime sessions of each runtime at a time, each closed
// after its rounds and followed by the next; the returned function stops them and waits.
func (s *apiFaultSuite) startSessions(runtimes []string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	handles := make([]string, faultHandlesPerSession)
	for h := range handles {
		handles[h] = fmt.Sprintf("codegen/h%d", h)
	}
	for _, rt := range runtimes {
		for i := range faultSessionsPerRuntime {
			wg.Go(func() {
				for gen := 0; ; gen++ {
					select {
					case <-done:
						return
					default:
					}
					s.load.runSession(s.ctx, done, rt, fmt.Sprintf("s%d-%d", i, gen), handles, faultRounds)
				}
			})
		}
	}
	return sync.OnceFunc(func() { close(done); wg.Wait() })
}

func (s *apiFaultSuite) waitClaims(what string, cond func([]*airlockv1alpha1.SandboxClaim) bool) {
	s.t.Helper()
	eventually(s.t, 3*time.Minute, what, func(context.Context) (bool, error) { return cond(s.monitor.snapshot()), nil })
}

// waitBound waits for maxConcurrent claims to be Bound: the load is served again.
func (s *apiFaultSuite) waitBound(what string) {
	s.t.Helper()
	s.waitClaims(what, func(cs []*airlockv1alpha1.SandboxClaim) bool {
		n := 0
		for _, c := range cs {
			if c.Status.Phase == airlockv1alpha1.ClaimBound && c.DeletionTimestamp == nil {
				n++
			}
		}
		return n >= faultMaxConcurrent
	})
}

// killLeader kills the leader and starts a replica in its place.
func (s *apiFaultSuite) killLeader() {
	s.t.Helper()
	s.ops.killLeader(s.load)
	s.faults++
	s.ops.startReplica()
	s.load.setOps(s.ops.live()...)
}

// stallAPIServer stops the API server for faultOutage, longer than the lease (the sleep is the
// outage itself), and waits for a replica to lead again.
func (s *apiFaultSuite) stallAPIServer() {
	t := s.t
	t.Helper()
	if err := syscall.Kill(s.apiserver, syscall.SIGSTOP); err != nil {
		t.Fatalf("stopping kube-apiserver: %v", err)
	}
	resume := sync.OnceFunc(func() {
		if err := syscall.Kill(s.apiserver, syscall.SIGCONT); err != nil {
			t.Errorf("resuming kube-apiserver: %v", err)
		}
	})
	t.Cleanup(resume) // whatever fails, the cluster is not left stopped
	t.Logf("fault: kube-apiserver stopped for %s", faultOutage)
	time.Sleep(faultOutage)
	resume()
	s.faults++
	eventually(t, time.Minute, "a leader after the outage", func(ctx context.Context) (bool, error) {
		l, err := kubeClient.CoordinationV1().Leases(s.e.ns).Get(ctx, s.ops.lease, metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && s.ops.byID[*l.Spec.HolderIdentity] != nil &&
			l.Spec.RenewTime != nil && time.Since(l.Spec.RenewTime.Time) < faultLease, nil
	})
}

// deleteNode deletes the Node with the most sandbox pods and kills the leader at once, waits for
// the Node's pods to be gone, and restores the Node.
func (s *apiFaultSuite) deleteNode() {
	t := s.t
	t.Helper()
	node := busiestNode(t, s.monitor)
	saved := saveNode(t, s.kubelets, node)
	onNode := s.monitor.podsOn(node)
	if err := kubeClient.CoreV1().Nodes().Delete(s.ctx, node, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting node %s: %v", node, err)
	}
	s.faults++
	t.Logf("fault: node %s deleted with %d sandbox pods", node, len(onNode))
	s.killLeader()
	for _, p := range onNode {
		waitPodGone(t, s.e.ns, p.Name, p.UID)
	}
	restoreNode(t, saved)
}

// stopKubelets stops kwok; once a claim says its pod is lost, and an acquire of its handle says
// so too, the lost pod's Node is tainted out-of-service, its pods released, and kwok resumed.
func (s *apiFaultSuite) stopKubelets() {
	t := s.t
	t.Helper()
	s.kubelets.stop()
	s.faults++
	lost := checkLostAnswer(t, s.load)
	pod, err := kubeClient.CoreV1().Pods(s.e.ns).Get(s.ctx, lost.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the lost claim's pod: %v", err)
	}
	tainted := pod.Spec.NodeName
	saved := saveNode(t, s.kubelets, tainted)
	onTainted := s.monitor.podsOn(tainted)
	taintOutOfService(t, tainted)
	s.faults++
	t.Logf("fault: kwok stopped; node %s tainted out-of-service with %d sandbox pods", tainted, len(onTainted))
	for _, p := range onTainted {
		waitPodGone(t, s.e.ns, p.Name, p.UID)
	}
	s.kubelets.resume()
	restoreNode(t, saved)
}

// waitEnded waits for every claim to end (deleted, or Failed with a reason and a message)
// within faultWhyBound + the startupTimeout of the sessions' close, and records each that did not.
func (s *apiFaultSuite) waitEnded() {
	bound := faultWhyBound + faultStartupTimeout
	var left []*airlockv1alpha1.SandboxClaim
	err := waitFor(s.ctx, bound, func() bool {
		left = left[:0]
		for _, c := range s.monitor.snapshot() {
			if c.Status.Phase == airlockv1alpha1.ClaimFailed && c.Status.Reason != "" && c.Status.Message != "" {
				continue
			}
			left = append(left, c)
		}
		s.monitor.checkSilent()
		return len(left) == 0
	})
	if err != nil {
		for _, c := range left {
			s.monitor.addViolation("unended "+c.Name, fmt.Sprintf("claim %s did not end within %s of the sessions' close: %s reason %q message %q conditions %s",
				c.Name, bound, c.Status.Phase, c.Status.Reason, c.Status.Message, conditionSummary(c.Status.Conditions)))
		}
	}
}

// report logs the suite's counts and fails the test on every violation.
func (s *apiFaultSuite) report() {
	t := s.t
	violations := s.monitor.allViolations()
	s.load.mu.Lock()
	var answers []string
	for a, n := range s.load.answers {
		answers = append(answers, fmt.Sprintf("%s: %d", a, n))
	}
	sort.Strings(answers)
	t.Logf("fault suite (API-only): %d sessions, %d acquires, %d faults injected (%d leader kills), %d violations",
		s.load.sessions, s.load.acquires, s.faults, s.ops.killed, len(violations))
	s.load.mu.Unlock()
	t.Logf("answers: %s", strings.Join(answers, "; "))
	t.Logf("watch: %s; PodLost seen: %v", s.monitor.summary(), s.monitor.lostReasons())
	for _, v := range violations {
		t.Errorf("violation: %s", v)
	}
}

// waitFor waits until cond holds, looking again every 200 ms, for at most timeout.
func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

func lostReason(c *airlockv1alpha1.SandboxClaim) string {
	for _, cond := range c.Status.Conditions {
		if cond.Type == airlockv1alpha1.ConditionPodLost && cond.Status == metav1.ConditionTrue {
			return cond.Reason
		}
	}
	return ""
}

// checkLostAnswer checks that an acquire of a lost claim's handle answers within its waitSeconds
// with why (the PodLost reason, a message naming the pod's Node), never the address of the lost
// pod. The claim is read again after the answer: an answer counts only if the same claim was
// still lost then (its session may have closed it meanwhile, and a new claim answered).
func checkLostAnswer(t *testing.T, load *faultLoad) (lost *airlockv1alpha1.SandboxClaim) {
	t.Helper()
	eventually(t, 3*time.Minute, "an acquire of a lost claim's handle", func(ctx context.Context) (bool, error) {
		for _, c := range load.monitor.snapshot() {
			if lostReason(c) != claim.ReasonNodeUnreachable || c.DeletionTimestamp != nil || c.Spec.RuntimeName == "doomed" {
				continue
			}
			req := client.AcquireRequest{Namespace: load.ns, Runtime: c.Spec.RuntimeName, Session: c.Spec.Session, Handle: c.Spec.Handle, WaitSeconds: waitSeconds(2)}
			got, status, err := load.op().client(load.tokens[c.Spec.RuntimeName]).AcquireOnce(ctx, req)
			now, getErr := airlockClient.AirlockV1alpha1().SandboxClaims(load.ns).Get(ctx, c.Name, metav1.GetOptions{})
			if getErr != nil || now.UID != c.UID || lostReason(now) != claim.ReasonNodeUnreachable {
				continue // it changed meanwhile: try another
			}
			var apiErr *client.APIError
			switch {
			case errors.As(err, &apiErr) && apiErr.Status == http.StatusServiceUnavailable, err != nil && apiErr == nil:
				continue // a replica not ready, a transport error: try again
			case err != nil && (apiErr.Reason == "" || apiErr.Message == ""):
				load.monitor.addViolation("lost answer", fmt.Sprintf("acquire of lost claim %s: %v: not why", c.Name, err))
			case err != nil:
				t.Logf("acquire of lost claim %s (%s): %v", c.Name, now.Status.Phase, err) // a Failed claim's 502 says why too
			case status == http.StatusOK:
				load.monitor.addViolation("lost answer", fmt.Sprintf("acquire of lost claim %s answered 200 %+v while every kubelet is stopped", c.Name, got))
			case got.Reason != claim.ReasonNodeUnreachable || got.Message == "":
				load.monitor.addViolation("lost answer", fmt.Sprintf("acquire of lost claim %s answered %d %+v: not why (NodeUnreachable, a message)", c.Name, status, got))
			default:
				t.Logf("acquire of lost claim %s: %d %s: %s", c.Name, status, got.Reason, got.Message)
			}
			lost = now
			return true, nil
		}
		return false, nil
	})
	return lost
}

// busiestNode returns the Node with the most sandbox pods of the namespace.
func busiestNode(t *testing.T, m *faultMonitor) string {
	t.Helper()
	nodes, err := kubeClient.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	best, most := "", -1
	for _, n := range nodes.Items {
		if c := len(m.podsOn(n.Name)); c > most {
			best, most = n.Name, c
		}
	}
	return best
}

// taintOutOfService taints the Node node.kubernetes.io/out-of-service:NoExecute, as an
// administrator does once a Node is known to be shut down.
func taintOutOfService(t *testing.T, name string) {
	t.Helper()
	eventually(t, time.Minute, "node "+name+" tainted out-of-service", func(ctx context.Context) (bool, error) {
		node, err := kubeClient.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: claim.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
		_, err = kubeClient.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return false, nil // the node lifecycle controller wrote it meanwhile
		}
		return err == nil, err
	})
}
