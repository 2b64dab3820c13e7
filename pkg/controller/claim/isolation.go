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
// network), at most maxReadsInFlight at a time; its end enqueues the claim. A read that failed
// is tried again after readRetry until the claim's startup deadline, which then fails the claim.
// Without --operator-pod-labels nothing is read: a claim whose class needs a kernel of its own
// fails (fail closed), the others are Bound without a statement, as before.

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/attestation"
	"github.com/airlock-dev/airlock/pkg/isolation"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// ReasonIsolationNotMet is the reason of a claim whose sandbox's evidence does not show the
// isolation its class needs, or shows a boundary that does not hold.
const ReasonIsolationNotMet = isolation.ReasonIsolationNotMet

const (
	// maxReadsInFlight bounds the evidence reads that wait on sandboxes at once.
	maxReadsInFlight = 32
	// readTimeout bounds one read of a sandbox's evidence and its Node.
	readTimeout = 10 * time.Second
	// readRetry is how long after a failed read the claim is looked at again.
	readRetry = time.Second
)

const messageNoReader = "the class needs a kernel of its own (isolation.kernel Dedicated), and this operator reads no sandbox's evidence: it runs without --operator-pod-labels, so the sandbox's NetworkPolicy lets it not reach sandboxd"

// evidenceReader reads a sandbox's evidence (GET isolation.Path with the claim's token).
type evidenceReader interface {
	Read(ctx context.Context, base, token string) ([]byte, error)
}

// httpEvidenceReader is the evidenceReader over HTTP.
type httpEvidenceReader struct{ client *http.Client }

func (r httpEvidenceReader) Read(ctx context.Context, base, token string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+isolation.Path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, isolation.MaxBytes+1))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("sandboxd answered %d to GET %s", resp.StatusCode, isolation.Path)
	}
	return body, nil
}

// evidenceRead is one pod's read: done once the goroutine ended.
type evidenceRead struct {
	started  time.Time // when the read was started (the pod seen Ready; a failed read's retry anew)
	done     bool
	evidence []byte
	node     *corev1.Node
	err      error
}

// evidence is the controller's state of the reads; nil without --operator-pod-labels.
type evidence struct {
	reader evidenceReader
	slots  chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	reads  map[types.UID]*evidenceRead
}

func newEvidence() *evidence {
	return &evidence{reader: httpEvidenceReader{client: &http.Client{Timeout: readTimeout}}, slots: make(chan struct{}, maxReadsInFlight), reads: map[types.UID]*evidenceRead{}}
}

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
	e.mu.Lock()
	r := e.reads[pod.UID]
	if r == nil {
		r = &evidenceRead{started: c.clock.Now()}
		e.reads[pod.UID] = r
		e.mu.Unlock()
		c.startRead(ctx, claim, pod, r)
		return verdict{wait: ptr.To(left)} // the read's end enqueues the claim
	}
	read := *r
	if read.done && read.err != nil && inTime {
		delete(e.reads, pod.UID) // tried again
	}
	e.mu.Unlock()
	switch {
	case !read.done:
		return verdict{wait: ptr.To(left)}
	case read.err != nil && inTime:
		klog.FromContext(ctx).V(2).Info("Reading the sandbox's isolation evidence failed; trying again", "claim", klog.KObj(claim), "pod", klog.KObj(pod), "err", read.err)
		return verdict{wait: ptr.To(min(readRetry, left))}
	case read.err != nil:
		return verdict{failure: fmt.Sprintf("the operator could not read the isolation evidence of pod %s before the startup timeout: %v", pod.Name, read.err)}
	}
	return c.judge(ctx, claim, pod, read, inTime)
}

// startRead reads the pod's evidence and Node in a goroutine, and enqueues the claim after.
func (c *Controller) startRead(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, pod *corev1.Pod, r *evidenceRead) {
	e := c.evidence
	key := cache.ObjectName{Namespace: claim.Namespace, Name: claim.Name}
	token, tokenErr := c.newToken(ctx, claim)
	base := "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(sandboxpod.Ports(claim.Status.Frozen)[0].Port)))
	nodeName := pod.Spec.NodeName
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		var body []byte
		var node *corev1.Node
		err := tokenErr
		select {
		case e.slots <- struct{}{}:
			if err == nil {
				readCtx, cancel := context.WithTimeout(ctx, readTimeout)
				body, err = e.reader.Read(readCtx, base, token)
				if err == nil {
					node, err = c.lostPods.Node(readCtx, nodeName)
				}
				cancel()
			}
			<-e.slots
		case <-ctx.Done():
			err = ctx.Err()
		}
		e.mu.Lock()
		r.done, r.evidence, r.node, r.err = true, body, node, err
		e.mu.Unlock()
		c.queue.Add(key)
	}()
}

// judge weighs a read evidence, and signs it when it holds; inTime says whether the claim's
// startup deadline has not passed.
func (c *Controller) judge(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, pod *corev1.Pod, read evidenceRead, inTime bool) verdict {
	record := claim.Status.Frozen
	ev, err := isolation.Decode(read.evidence)
	if err != nil {
		return verdict{failure: fmt.Sprintf("pod %s: %v", pod.Name, err)}
	}
	nodeKernel := read.node.Status.NodeInfo.KernelVersion
	need := isolation.Need{Kernel: string(airlockv1alpha1.KernelAny), DNS: sandboxpod.DNSAllowed(record)}
	if sandboxpod.NeedsDedicatedKernel(record) {
		need.Kernel = isolation.KernelDedicated
	}
	if ok, _, message := isolation.Judge(ev, nodeKernel, need); !ok {
		return verdict{failure: fmt.Sprintf("pod %s on node %s: %s", pod.Name, pod.Spec.NodeName, message)}
	}
	kernel := "Dedicated"
	switch isolation.BoundaryOf(ev, nodeKernel) {
	case isolation.BoundaryNode:
		kernel = "Shared"
	case isolation.BoundaryUnknown:
		kernel = "Unknown"
	}
	att, err := c.attest(ctx, claim, pod, nodeKernel, kernel, read.evidence)
	if err != nil && !inTime {
		return verdict{failure: fmt.Sprintf("the operator could not sign the isolation statement of pod %s before the startup timeout: %v", pod.Name, err)}
	}
	if err != nil {
		// No key yet, or its Secret does not parse (the isolation key controller says why): no
		// claim is Bound with evidence until there is one. Tried again.
		klog.FromContext(ctx).Error(err, "Cannot sign the sandbox's isolation statement; trying again", "claim", klog.KObj(claim))
		c.evidence.mu.Lock()
		delete(c.evidence.reads, pod.UID)
		c.evidence.mu.Unlock()
		return verdict{wait: ptr.To(readRetry)}
	}
	isolationReadDuration.Observe(c.clock.Since(read.started).Seconds())
	return verdict{iso: &airlockv1alpha1.ClaimIsolation{
		Kernel: kernel, Runtime: ev.Runtime, KernelRelease: ev.KernelRelease, EvidenceDigest: ev.Digest(),
		Attestation: &airlockv1alpha1.IsolationAttestation{Statement: att.Statement, Signature: att.Signature, KeyID: att.KeyID},
	}}
}

// attest signs the statement of the claim's evidence.
func (c *Controller) attest(ctx context.Context, claim *airlockv1alpha1.SandboxClaim, pod *corev1.Pod, nodeKernel, kernel string, evidence []byte) (*attestation.Attestation, error) {
	key, err := c.signingKey(ctx)
	if err != nil {
		return nil, err
	}
	token, err := c.newToken(ctx, claim)
	if err != nil {
		return nil, err
	}
	record, err := json.Marshal(claim.Status.Frozen)
	if err != nil {
		return nil, err
	}
	return attestation.Sign(&attestation.Statement{
		Version: attestation.Version, Namespace: claim.Namespace, Claim: claim.Name, ClaimUID: string(claim.UID),
		Pod: pod.Name, PodUID: string(pod.UID), Node: pod.Spec.NodeName, NodeKernel: nodeKernel, Kernel: kernel,
		RecordDigest: attestation.Digest(record), TokenHash: attestation.TokenHash(token),
		EvidenceDigest: attestation.Digest(evidence), Evidence: evidence, IssuedAt: c.clock.Now().UTC().Truncate(time.Second),
	}, key)
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
		c.evidence.mu.Lock()
		delete(c.evidence.reads, uid)
		c.evidence.mu.Unlock()
	}
}

// waitForReads waits for the reads in flight (Run, once its context is done).
func (c *Controller) waitForReads() {
	if c.evidence != nil {
		c.evidence.wg.Wait()
	}
}

// signingKeyOf is the seam of the signing key: SigningKeys'.
type signingKeyOf func(ctx context.Context) (ed25519.PrivateKey, error)
