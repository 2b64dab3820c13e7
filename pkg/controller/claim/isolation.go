package claim

// Isolation evidence (issue 38; docs/isolation.md): before it writes Bound, the controller reads
// what the claim's sandboxd recorded of its boundary before it served any tool (GET
// isolation.Path, with the claim's token, from the pod's address; the operator's ingress is the
// stop's, --operator-pod-labels), reads the pod's Node, judges the evidence against the Node's
// kernel and the record's need (isolation.Judge), and signs what it saw for the runtime
// (pkg/attestation, with the current key of pkg/controller/isolationkey). A claim whose
// evidence does not hold fails with reason IsolationNotMet naming what was seen: never Bound,
// never a 200.
//
// The read happens once per pod, in a goroutine of its own (the worker does not wait on the
// network), at most evidence.MaxInFlight at a time; its end enqueues the claim. A read that failed
// is tried again after evidence.Retry until the claim's startup deadline, which then fails the claim.
// Without --operator-pod-labels nothing is read: a claim whose class needs a kernel of its own
// fails (fail closed), the others are Bound without a statement, as before.

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/attestation"
	"github.com/airlock-dev/airlock/pkg/controller/evidence"
	"github.com/airlock-dev/airlock/pkg/isolation"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// ReasonIsolationNotMet is the reason of a claim whose sandbox's evidence does not show the
// isolation its class needs, or shows a boundary that does not hold.
const ReasonIsolationNotMet = isolation.ReasonIsolationNotMet

const messageNoReader = "the class needs a kernel of its own (isolation.kernel Dedicated), and this operator reads no sandbox's evidence: it runs without --operator-pod-labels, so the sandbox's NetworkPolicy lets it not reach sandboxd"

// newEvidence returns the controller's reads of sandboxes' evidence (pkg/controller/evidence).
func newEvidence() *evidence.Reads { return evidence.NewReads() }

// verdict is what the controller decided of a Ready pod's isolation: wait (the read runs, or is
// tried again), fail with a message, or bind with iso (nil: nothing was read, the class needs
// nothing).
type verdict struct {
	wait    *time.Duration
	failure string
	iso     *airlockv1alpha1.ClaimIsolation
}

// isolationOf decides the Ready pod's isolation; left is the time to the claim's startup
// deadline, inTime whether it has not passed.
func (c *Controller) isolationOf(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, pod *corev1.Pod, left time.Duration, inTime bool) verdict {
	record := claim.Status.Frozen
	e := c.evidence
	if e == nil {
		if sandboxpod.NeedsDedicatedKernel(record) {
			return verdict{failure: messageNoReader}
		}
		return verdict{}
	}
	result, started, done := e.Get(pod.UID)
	if !started {
		c.startRead(ctx, claim, pod)
		return verdict{wait: ptr.To(left)} // the read's end enqueues the claim
	}
	switch {
	case !done:
		return verdict{wait: ptr.To(left)}
	case result.Err != nil && inTime:
		e.Forget(pod.UID) // tried again
		klog.FromContext(ctx).V(2).Info("Reading the sandbox's isolation evidence failed; trying again", "claim", klog.KObj(claim), "pod", klog.KObj(pod), "err", result.Err)
		return verdict{wait: ptr.To(min(evidence.Retry, left))}
	case result.Err != nil:
		return verdict{failure: fmt.Sprintf("the operator could not read the isolation evidence of pod %s before the startup timeout: %v", pod.Name, result.Err)}
	}
	token, err := c.newToken(ctx, claim)
	if err == nil {
		var v verdict
		if v, err = c.statement(ctx, claim, record, pod, result.Evidence, result.Node.Status.NodeInfo.KernelVersion, token); err == nil {
			if v.iso != nil {
				isolationReadDuration.Observe(c.clock.Since(result.Started).Seconds())
			}
			return v
		}
	}
	if !inTime {
		return verdict{failure: fmt.Sprintf("the operator could not sign the isolation statement of pod %s before the startup timeout: %v", pod.Name, err)}
	}
	// No key yet, or its Secret does not parse (the isolation key controller says why): no claim
	// is Bound with evidence until there is one. Tried again.
	klog.FromContext(ctx).Error(err, "Cannot sign the sandbox's isolation statement; trying again", "claim", klog.KObj(claim))
	e.Forget(pod.UID)
	return verdict{wait: ptr.To(evidence.Retry)}
}

// startRead reads the pod's evidence (with the claim's token) and Node in a goroutine, and
// enqueues the claim after.
func (c *Controller) startRead(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, pod *corev1.Pod) {
	key := cache.ObjectName{Namespace: claim.Namespace, Name: claim.Name}
	token, tokenErr := c.newToken(ctx, claim)
	target := evidence.Target{Base: evidence.BaseURL(pod, claim.Status.Frozen), Token: token, TokenErr: tokenErr, Node: pod.Spec.NodeName, Started: c.clock.Now()}
	c.evidence.Start(ctx, pod.UID, target, c.lostPods.Node, func() { c.queue.Add(key) })
}

// statement judges the evidence read of the claim's pod (raw, with the Node's kernel) against
// record's need, and signs the statement for the claim, the pod and the token the runtime gets
// (token): a verdict to bind with, or one that fails the claim. An error is the signing's.
func (c *Controller) statement(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, record *airlockv1alpha1.FrozenSandbox, pod *corev1.Pod, raw []byte, nodeKernel, token string) (verdict, error) {
	v := evidence.Judge(raw, nodeKernel, evidence.Need(record))
	if v.Failure != "" {
		return verdict{failure: fmt.Sprintf("pod %s on node %s: %s", pod.Name, pod.Spec.NodeName, v.Failure)}, nil
	}
	att, err := c.attest(ctx, claim, record, pod, nodeKernel, v.Kernel, raw, token)
	if err != nil {
		return verdict{}, err
	}
	return verdict{iso: &airlockv1alpha1.ClaimIsolation{
		Kernel: v.Kernel, Runtime: v.Evidence.Runtime, KernelRelease: v.Evidence.KernelRelease, EvidenceDigest: v.Evidence.Digest(),
		Attestation: &airlockv1alpha1.IsolationAttestation{Statement: att.Statement, Signature: att.Signature, KeyID: att.KeyID},
	}}, nil
}

// attest signs the statement of the claim's evidence: the claim, its record, the pod and its
// node, the verdict, the evidence's bytes, and the hash of the token the runtime is given.
func (c *Controller) attest(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, record *airlockv1alpha1.FrozenSandbox, pod *corev1.Pod, nodeKernel, kernel string, raw []byte, token string) (*attestation.Attestation, error) {
	key, err := c.signingKey(ctx)
	if err != nil {
		return nil, err
	}
	recordJSON, err := json.Marshal(record)
	if err != nil {
		return nil, err
	}
	return attestation.Sign(&attestation.Statement{
		Version: attestation.Version, Namespace: claim.Namespace, Claim: claim.Name, ClaimUID: string(claim.UID),
		Pod: pod.Name, PodUID: string(pod.UID), Node: pod.Spec.NodeName, NodeKernel: nodeKernel, Kernel: kernel,
		RecordDigest: attestation.Digest(recordJSON), TokenHash: attestation.TokenHash(token),
		EvidenceDigest: attestation.Digest(raw), Evidence: raw, IssuedAt: c.clock.Now().UTC().Truncate(time.Second),
	}, key)
}

// errMemberUnfit says that a warm member's sealed evidence record is missing, not the operator's,
// or does not meet the adopting claim's need: the member is let go and the claim built cold.
var errMemberUnfit = errors.New("the warm member's isolation evidence does not meet the claim's need")

// memberFits says whether the member may be adopted for a claim of record: without reading,
// always (a class that needs a kernel of its own never adopts: reserveMember); with it, only a
// member whose evidence the pool controller read at its readiness and sealed onto it
// (evidence.Open: this operator's seal, for this pod and node) and which meets the record's
// need (a Dedicated class takes a member whose evidence proves a kernel of its own).
func (c *Controller) memberFits(ctx context.Context, record *airlockv1alpha1.FrozenSandbox, pod *corev1.Pod) bool {
	if c.evidence == nil {
		return true
	}
	m, err := c.openMember(ctx, pod)
	if err != nil {
		klog.FromContext(ctx).V(4).Info("A warm member is not adoptable: its isolation evidence", "member", klog.KObj(pod), "err", err)
		return false
	}
	if v := evidence.Judge(m.Evidence, m.NodeKernel, evidence.Need(record)); v.Failure != "" {
		klog.FromContext(ctx).V(4).Info("A warm member does not meet the claim's isolation need", "member", klog.KObj(pod), "why", v.Failure)
		return false
	}
	return true
}

// openMember returns the member's sealed evidence record.
func (c *Controller) openMember(ctx context.Context, pod *corev1.Pod) (*evidence.Member, error) {
	key, err := c.memberEvidenceKey(ctx)
	if err != nil {
		return nil, err
	}
	return evidence.Open(key, pod)
}

// warmIsolation is the status.isolation of a claim of record bound to its adopted member: nil
// without reading; else the member's sealed evidence (read at its readiness, before any
// adoption; nothing is read from the sandbox now) judged against record's need and signed for
// the claim, the member's pod and node, and the adoption token the runtime is given, as a cold
// claim's is. errMemberUnfit when the record is missing or not the operator's, or the need not
// met; another error is the token's or the signing's (tried again).
func (c *Controller) warmIsolation(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, record *airlockv1alpha1.FrozenSandbox, pod *corev1.Pod) (*airlockv1alpha1.ClaimIsolation, error) {
	if c.evidence == nil {
		return nil, nil
	}
	key, err := c.memberEvidenceKey(ctx)
	if err != nil {
		return nil, err
	}
	m, err := evidence.Open(key, pod)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errMemberUnfit, err)
	}
	token, err := c.newAdoptionToken(ctx, claim, pod.Name, record)
	if err != nil {
		return nil, err
	}
	v, err := c.statement(ctx, claim, record, pod, m.Evidence, m.NodeKernel, token)
	if err != nil {
		return nil, err
	}
	if v.failure != "" {
		return nil, fmt.Errorf("%w: %s", errMemberUnfit, v.failure)
	}
	return v.iso, nil
}

// SetIsolationEvidence turns the reading of evidence off (false) on a controller whose operator
// peer is set (SetOperatorPeer turns it on): for planes where no sandboxd runs. Call before Run.
func (c *Controller) SetIsolationEvidence(read bool) {
	switch {
	case !read:
		c.evidence = nil
	case c.stops != nil && c.evidence == nil:
		c.evidence = newEvidence()
	}
}

// forgetRead forgets a pod's read, once the pod is deleted.
func (c *Controller) forgetRead(uid types.UID) {
	if c.evidence != nil {
		c.evidence.Forget(uid)
	}
}

// waitForReads waits for the reads in flight (Run, once its context is done).
func (c *Controller) waitForReads() {
	if c.evidence != nil {
		c.evidence.Wait()
	}
}

// signingKeyOf is the seam of the signing key: SigningKeys'.
type signingKeyOf func(ctx context.Context) (ed25519.PrivateKey, error)
