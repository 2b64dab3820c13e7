package claim

import (
	"context"
	"crypto/ed25519"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/attestation"
	"github.com/airlock-dev/airlock/pkg/controller/evidence"
	"github.com/airlock-dev/airlock/pkg/isolation"
)

const nodeKernel = "6.18.0-test"

// fakeEvidence answers every read with body, or err.
type fakeEvidence struct {
	mu    sync.Mutex
	body  []byte
	err   error
	asked []string // base + " " + token
}

func (f *fakeEvidence) Read(_ context.Context, base, token string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, base+" "+token)
	return f.body, f.err
}

// evidenceOf is sandboxd's evidence on a kernel of the given release and runtime, the boundary
// holding (nothing reached), changed by mutate.
func evidenceOf(release, runtime string, mutate func(*isolation.Evidence)) []byte {
	ev := isolation.Evidence{Version: isolation.Version, KernelRelease: release, KernelVersion: "#1 SMP", Runtime: runtime,
		UID: 65532, GID: 65532, CapEff: "0000000000000000", CapPrm: "0000000000000000", NoNewPrivs: true, Seccomp: 2}
	if runtime == isolation.RuntimeGVisor {
		ev.KernelVersion = isolation.GVisorKernelVersion
	}
	for _, name := range isolation.ProbeNames() {
		ev.Probes = append(ev.Probes, isolation.Probe{Name: name, Address: "10.0.0.1:1", Error: "i/o timeout"})
	}
	if mutate != nil {
		mutate(&ev)
	}
	return ev.Canonical()
}

func dedicated(c *airlockv1alpha1.SandboxClaim) {
	c.Status.Frozen.Isolation = &airlockv1alpha1.SandboxIsolation{Kernel: airlockv1alpha1.KernelDedicated}
}

// TestIsolationBeforeBound: with the operator's ingress on, a claim is Bound only after its
// sandbox's evidence was read (once, off the worker) and judged, with a statement signed for the
// claim, its pod, its node and its token; evidence that contradicts the class, shows a boundary
// that does not hold, or is not evidence fails the claim (IsolationNotMet), never Bound; without
// the ingress a class that needs a kernel of its own fails, the others bind as before.
func TestIsolationBeforeBound(t *testing.T) {
	_, signer, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	gvisor := evidenceOf("4.19.0-gvisor", isolation.RuntimeGVisor, func(ev *isolation.Evidence) { ev.Seccomp = 0 })
	runc := evidenceOf(nodeKernel, isolation.RuntimeKernel, nil)
	tests := map[string]struct {
		off       bool
		claim     func(*airlockv1alpha1.SandboxClaim)
		body      []byte
		readErr   error
		signErr   error         // of the signing key
		step      time.Duration // before the second sync
		wantPhase airlockv1alpha1.ClaimPhase
		wantIn    string // in the message (Failed) or the kernel verdict (Bound)
	}{
		"runc, any kernel: Bound, shared":         {body: runc, wantPhase: airlockv1alpha1.ClaimBound, wantIn: "Shared"},
		"gVisor, dedicated needed: Bound":         {claim: dedicated, body: gvisor, wantPhase: airlockv1alpha1.ClaimBound, wantIn: "Dedicated"},
		"runc where dedicated is needed: refused": {claim: dedicated, body: runc, wantPhase: airlockv1alpha1.ClaimFailed, wantIn: "is the node's"},
		"a probe reached the API server: refused": {body: evidenceOf(nodeKernel, isolation.RuntimeKernel, func(ev *isolation.Evidence) {
			ev.Probes[0].Reached, ev.Probes[0].Error = true, ""
		}), wantPhase: airlockv1alpha1.ClaimFailed, wantIn: "reached"},
		"made-up evidence (gVisor claimed on the node's kernel): refused": {claim: dedicated, body: evidenceOf(nodeKernel, isolation.RuntimeGVisor, nil),
			wantPhase: airlockv1alpha1.ClaimFailed, wantIn: "IsolationNotMet"},
		"not evidence: refused":                                                 {body: []byte(`{"kernelRelease":"4.19.0-gvisor"}`), wantPhase: airlockv1alpha1.ClaimFailed, wantIn: "evidence"},
		"unreadable, in time: tried again":                                      {readErr: errors.New("connection refused")},
		"unreadable past the deadline: refused":                                 {readErr: errors.New("connection refused"), step: 5 * time.Minute, wantPhase: airlockv1alpha1.ClaimFailed, wantIn: "could not read"},
		"no signing key, in time: tried again":                                  {body: runc, signErr: errors.New("the Secret does not parse")},
		"no signing key past the deadline: refused":                             {body: runc, signErr: errors.New("the Secret does not parse"), step: 5 * time.Minute, wantPhase: airlockv1alpha1.ClaimFailed, wantIn: "could not sign the isolation statement of pod c1 before the startup timeout: the Secret does not parse"},
		"ingress off, any kernel: Bound as before":                              {off: true, wantPhase: airlockv1alpha1.ClaimBound},
		"ingress off, dedicated needed: refused":                                {off: true, claim: dedicated, wantPhase: airlockv1alpha1.ClaimFailed, wantIn: "--operator-pod-labels"},
		"the evidence of the node's kernel, unknown node kernel: Bound unknown": {body: runc, wantPhase: airlockv1alpha1.ClaimBound, wantIn: "Unknown"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t).withDefaults()
			claim := binding("c1", t0.Add(-time.Minute))
			if tc.claim != nil {
				tc.claim(claim)
			}
			f.claims = append(f.claims, claim)
			f.withChildren(claim)
			pod := newPod(claim, func(p *corev1.Pod) { markReady(p); p.Spec.NodeName = testNode })
			f.pods = append(f.pods, pod)
			c := f.newController(ctx)
			node := nodeState(corev1.ConditionTrue)
			if !strings.Contains(name, "unknown node kernel") {
				node.Status.NodeInfo.KernelVersion = nodeKernel
			}
			if err := f.kubeClient.Tracker().Add(node); err != nil {
				t.Fatal(err)
			}
			reader := &fakeEvidence{body: tc.body, err: tc.readErr}
			c.signingKey = func(context.Context) (ed25519.PrivateKey, error) {
				if tc.signErr != nil {
					return nil, tc.signErr
				}
				return signer, nil
			}
			if !tc.off {
				c.SetOperatorPeer(testOperatorPeer)
				c.evidence.Reader = reader
				// The first sync starts the read and writes nothing.
				if _, err := c.sync(ctx, keyOf(claim)); err != nil {
					t.Fatal(err)
				}
				c.waitForReads()
				if n := claimStatusWrites(f); n != 0 {
					t.Fatalf("%d status writes before the evidence was read", n)
				}
				if c.queue.Len() != 1 {
					t.Errorf("the read's end did not enqueue the claim (queue %d)", c.queue.Len())
				}
			}
			f.clock.Step(tc.step)
			requeue, err := c.sync(ctx, keyOf(claim))
			if err != nil {
				t.Fatal(err)
			}
			c.waitForReads()
			if tc.wantPhase == "" {
				if n := claimStatusWrites(f); n != 0 || requeue == nil || *requeue > evidence.Retry {
					t.Fatalf("%d status writes, requeue %v; want none, and a look again within %v", n, requeue, evidence.Retry)
				}
				return
			}
			got := f.writtenClaim()
			if got.Status.Phase != tc.wantPhase {
				t.Fatalf("phase %s (%s: %s), want %s", got.Status.Phase, got.Status.Reason, got.Status.Message, tc.wantPhase)
			}
			if tc.wantPhase == airlockv1alpha1.ClaimFailed {
				if got.Status.Reason != ReasonIsolationNotMet || !strings.Contains(got.Status.Message+" "+ReasonIsolationNotMet, tc.wantIn) {
					t.Errorf("reason %s, message %q; want %s saying %q", got.Status.Reason, got.Status.Message, ReasonIsolationNotMet, tc.wantIn)
				}
				if events := f.events(); !containsPrefix(events, "Warning "+ReasonIsolationNotMet) {
					t.Errorf("events %v, want a Warning %s", events, ReasonIsolationNotMet)
				}
				return
			}
			if tc.off {
				if got.Status.Isolation != nil {
					t.Errorf("isolation %+v without a read", got.Status.Isolation)
				}
				return
			}
			iso := got.Status.Isolation
			if iso == nil || iso.Kernel != tc.wantIn || iso.EvidenceDigest != attestation.Digest(tc.body) || iso.Attestation == nil {
				t.Fatalf("isolation %+v, want kernel %s with a signed statement", iso, tc.wantIn)
			}
			pub := signer.Public().(ed25519.PublicKey)
			st, err := attestation.Verify(&attestation.Attestation{Statement: iso.Attestation.Statement, Signature: iso.Attestation.Signature, KeyID: iso.Attestation.KeyID},
				map[string]ed25519.PublicKey{attestation.KeyID(pub): pub}, attestation.Expect{Token: testToken, Namespace: claim.Namespace, Claim: claim.Name})
			if err != nil {
				t.Fatal(err)
			}
			if st.ClaimUID != string(claim.UID) || st.PodUID != string(pod.UID) || st.Node != testNode || st.Kernel != tc.wantIn || string(st.Evidence) != string(tc.body) {
				t.Errorf("statement %+v", st)
			}
			if want := "http://" + testPodIP + ":8080 " + testToken; len(reader.asked) != 1 || reader.asked[0] != want {
				t.Errorf("reads %v, want one: %q", reader.asked, want)
			}
		})
	}
}

// claimStatusWrites counts the claim status writes so far.
func claimStatusWrites(f *fixture) int {
	n := 0
	for _, a := range f.actions() {
		if strings.HasPrefix(a, "update sandboxclaims/status") {
			n++
		}
	}
	return n
}
