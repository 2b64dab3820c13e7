package warmpool

// Isolation evidence of warm members (issue 38; docs/isolation.md, "Warm members"). When the
// operator reads evidence (SetOperatorPeer), a member is read once, when it is Ready and before
// any claim can adopt it: GET isolation.Path at its IP with its evidence token (MACed with its
// member key; it opens that route alone and adopts nothing), and its Node, in a goroutine of
// pkg/controller/evidence's bounded reads, whose end enqueues the registry. The evidence is
// judged against what every sandbox of the record needs (evidence.UniversalNeed: no probe
// connected, no root, no capability, no_new_privs, a seccomp filter on a Linux kernel): a member
// that fails is deleted and replaced, with a Warning event on the registry, never adopted. One
// that passes gets what was read (the evidence's exact bytes, its node and the node's kernel)
// sealed onto its pod (evidence.Seal, annotation airlock.dev/isolation-evidence), where the
// claim controller judges it against the adopting claim's own need and signs it (pkg/controller/
// claim, adopt.go). Until then the member is not adoptable and counts as starting. Nothing is
// read from a member again: not after a failover (the record is on the pod), not after adoption.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/evidence"
	"github.com/airlock-dev/airlock/pkg/isolation"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// ReasonIsolationNotMet is the reason of the Warning event of a member deleted for its evidence.
const ReasonIsolationNotMet = isolation.ReasonIsolationNotMet

// messageMemberRefused is the event and status message of a member deleted for its evidence.
const messageMemberRefused = "warm member %s on node %s: %s; deleted and replaced, never adopted"

// memberEvidence is what the pool decided of a Ready member's evidence.
type memberEvidence int

const (
	// evidenceHeld: the member's evidence was read, held, and is sealed onto it: adoptable.
	evidenceHeld memberEvidence = iota
	// evidencePending: being read, tried again, or being sealed: not adoptable yet.
	evidencePending
	// evidenceRefused: the member was deleted for its evidence (or its record).
	evidenceRefused
)

// readsState is the pool controller's reading of members' evidence; nil when it reads none.
type readsState struct {
	reads *evidence.Reads
	// peer is the operator's pods, which the pools' policies let in to sandboxd's port.
	peer *sandboxpod.OperatorPeer
	// since is when the first read of each member (by UID) started: a member whose evidence
	// cannot be read for its record's startupTimeout after that is replaced.
	since sync.Map
	// refused are the members (by UID) deleted for their evidence: one event each, however
	// many syncs see them before the cache shows the deletion.
	refused sync.Map
}

// SetOperatorPeer turns the reading of members' evidence on: peer is the operator's own pods,
// which each pool's NetworkPolicy then lets in to sandboxd's port (docs/security.md), and a
// member is adoptable only once its evidence was read and held. The operator calls it only when
// it reads evidence (--operator-pod-labels and --read-isolation-evidence); a nil peer turns it
// off. Call before Run.
func (c *Controller) SetOperatorPeer(peer *sandboxpod.OperatorPeer) {
	if peer == nil || len(peer.Labels) == 0 {
		c.evidence = nil
		return
	}
	c.evidence = &readsState{reads: evidence.NewReads(), peer: peer}
}

// checkEvidence decides a Ready idle member's evidence: held (adoptable), pending (and when to
// look again, 0 for an event), or refused (deleted). Without reading every member is held.
func (c *Controller) checkEvidence(ctx context.Context, reg *airlockv1alpha1.ToolRegistry, p *pool, pod *corev1.Pod) (memberEvidence, time.Duration, error) {
	e := c.evidence
	if e == nil {
		return evidenceHeld, 0, nil
	}
	key, err := c.keys.MemberEvidenceKey(ctx)
	if err != nil {
		return evidencePending, 0, fmt.Errorf("deriving the key of warm members' evidence records: %w", err)
	}
	_, err = evidence.Open(key, pod)
	switch {
	case err == nil:
		return evidenceHeld, 0, nil // read, judged and sealed by this operator
	case !errors.Is(err, evidence.ErrNotRead):
		// A record this operator did not seal, changed, or of another pod: someone else wrote it.
		return evidenceRefused, 0, c.refuseMember(ctx, reg, p, pod, "its isolation evidence record is not the operator's: "+err.Error())
	}
	result, started, done := e.reads.Get(pod.UID)
	switch {
	case !started:
		c.startRead(ctx, reg, p, pod)
		return evidencePending, 0, nil // the read's end enqueues the registry
	case !done:
		return evidencePending, 0, nil
	case result.Err != nil:
		first, ok := e.since.Load(pod.UID)
		if !ok || !c.clock.Now().Before(first.(time.Time).Add(sandboxpod.StartupTimeout(p.record))) {
			return evidenceRefused, 0, c.refuseMember(ctx, reg, p, pod, fmt.Sprintf("the operator could not read its isolation evidence within the startupTimeout (%s): %v", sandboxpod.StartupTimeout(p.record), result.Err))
		}
		e.reads.Forget(pod.UID) // tried again
		klog.FromContext(ctx).V(2).Info("Reading a warm member's isolation evidence failed; trying again", "member", klog.KObj(pod), "err", result.Err)
		return evidencePending, evidence.Retry, nil
	}
	nodeKernel := result.Node.Status.NodeInfo.KernelVersion
	if v := evidence.Judge(result.Evidence, nodeKernel, evidence.UniversalNeed(p.record)); v.Failure != "" {
		return evidenceRefused, 0, c.refuseMember(ctx, reg, p, pod, v.Failure)
	}
	value, err := evidence.Seal(key, evidence.MemberOf(pod, result.Node, result.Evidence, c.clock.Now()))
	if err != nil {
		return evidencePending, 0, err
	}
	// The patch's event brings the registry back; the read is kept until then, never made again.
	if err := c.members.Annotate(ctx, pod, evidence.AnnotationMember, value); err != nil {
		return evidencePending, 0, err
	}
	isolationChecks.WithLabelValues("met").Inc()
	klog.FromContext(ctx).V(2).Info("Read a warm member's isolation evidence", "member", klog.KObj(pod), "node", pod.Spec.NodeName, "summary", isolation.Summary(evidenceOf(result.Evidence), nodeKernel))
	return evidencePending, 0, nil
}

// evidenceOf decodes evidence that Judge has held (for the log line).
func evidenceOf(raw []byte) isolation.Evidence {
	ev, _ := isolation.Decode(raw)
	return ev
}

// startRead reads the member's evidence with its evidence token, and its Node, off the worker;
// the read's end enqueues the registry.
func (c *Controller) startRead(ctx context.Context, reg *airlockv1alpha1.ToolRegistry, p *pool, pod *corev1.Pod) {
	e := c.evidence
	token, tokenErr := c.keys.EvidenceToken(ctx, pod.Namespace, pod.Name)
	target := evidence.Target{Base: evidence.BaseURL(pod, p.record), Token: token, TokenErr: tokenErr, Node: pod.Spec.NodeName}
	key := cache.ObjectName{Namespace: reg.Namespace, Name: reg.Name}
	if e.reads.Start(ctx, pod.UID, target, c.nodes, func() { c.queue.Add(key) }) {
		e.since.LoadOrStore(pod.UID, c.clock.Now())
	}
}

// refuseMember deletes a member for its evidence, with a Warning event on the registry and the
// metric, and says why in the pool's status.
func (c *Controller) refuseMember(ctx context.Context, reg *airlockv1alpha1.ToolRegistry, p *pool, pod *corev1.Pod, why string) error {
	message := fmt.Sprintf(messageMemberRefused, pod.Name, pod.Spec.NodeName, why)
	p.message = message
	if _, again := c.evidence.refused.LoadOrStore(pod.UID, struct{}{}); !again {
		klog.FromContext(ctx).Info("Deleting a warm member for its isolation evidence", "registry", klog.KObj(reg), "member", klog.KObj(pod), "why", why)
		c.recorder.Event(reg, corev1.EventTypeWarning, ReasonIsolationNotMet, truncateMessage(message, 1024))
		isolationChecks.WithLabelValues("not_met").Inc()
	}
	return c.deleteMember(ctx, pod)
}

// refusedForEvidence says whether this process deleted the member for its evidence.
func (c *Controller) refusedForEvidence(pod *corev1.Pod) bool {
	if c.evidence == nil {
		return false
	}
	_, ok := c.evidence.refused.Load(pod.UID)
	return ok
}

// forgetRead forgets a member's read, once its pod is deleted.
func (c *Controller) forgetRead(uid types.UID) {
	if c.evidence != nil {
		c.evidence.reads.Forget(uid)
		c.evidence.since.Delete(uid)
		c.evidence.refused.Delete(uid)
	}
}

// waitForReads waits for the reads in flight (Run, once its context is done; tests).
func (c *Controller) waitForReads() {
	if c.evidence != nil {
		c.evidence.reads.Wait()
	}
}
