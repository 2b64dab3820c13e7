package claim

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/attestation"
	"github.com/airlock-dev/airlock/pkg/controller/evidence"
	"github.com/airlock-dev/airlock/pkg/controller/evidence/evidencetest"
	"github.com/airlock-dev/airlock/pkg/isolation"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// testSealKey is the key of the fixtures' sealed member records.
var testSealKey = bytes.Repeat([]byte{5}, 32)

// adoptionTokenOf is the fixtures' adoption token of member for the claim.
func adoptionTokenOf(member string, claim *airlockv1alpha1.SandboxClaim) string {
	return "adoption-token-" + member + "-" + string(claim.UID)
}

// sealedMember seals a record of body, read on node (whose kernel is nodeKernel), onto member
// as the pool controller does.
func sealedMember(t *testing.T, key []byte, member, of *corev1.Pod, body []byte) {
	t.Helper()
	n := &corev1.Node{}
	n.Status.NodeInfo.KernelVersion = nodeKernel
	value, err := evidence.Seal(key, evidence.MemberOf(of, n, body, t0.Add(-time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	if member.Annotations == nil {
		member.Annotations = map[string]string{}
	}
	member.Annotations[evidence.AnnotationMember] = value
}

// readingWarmController is the fixture's controller with reading on: the operator's ingress, a
// reader that must never be asked (nothing is read of a member at its adoption), the signer and
// the seal key.
func (f *fixture) readingWarmController(ctx context.Context, signer ed25519.PrivateKey) (*Controller, *evidencetest.Reader) {
	c := f.newController(ctx)
	c.SetOperatorPeer(testOperatorPeer)
	reader := &evidencetest.Reader{}
	c.evidence.Reader = reader
	c.signingKey = func(context.Context) (ed25519.PrivateKey, error) { return signer, nil }
	c.memberEvidenceKey = func(context.Context) ([]byte, error) { return testSealKey, nil }
	c.newAdoptionToken = func(_ context.Context, claim *airlockv1alpha1.SandboxClaim, member string, record *airlockv1alpha1.FrozenSandbox) (string, error) {
		if record == nil || len(record.AllowedTools) == 0 {
			return "", errors.New("no tools to name")
		}
		return adoptionTokenOf(member, claim), nil
	}
	return c, reader
}

// TestWarmAdoptionJudgesTheMembersEvidence: with reading on, a claim adopts only a member whose
// evidence the pool read at its readiness and sealed onto it, and which meets the claim's need:
// a class that needs a kernel of its own adopts a gVisor member, never one on the node's kernel
// (it is built cold, or takes the next member that fits); a member whose probe reached the API
// server, an unread member, and one whose record was sealed for another member or with another
// key are never adopted. The claim is Bound with status.isolation signed for it, the member's
// pod and node, and the adoption token's hash (attestation.Verify), and nothing is read from the
// sandbox, at the adoption or after.
func TestWarmAdoptionJudgesTheMembersEvidence(t *testing.T) {
	_, signer, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	gvisor := evidencetest.Of("4.19.0-gvisor", isolation.RuntimeGVisor, nil)
	runc := evidencetest.Of(nodeKernel, isolation.RuntimeKernel, nil)
	reached := evidencetest.Of("4.19.0-gvisor", isolation.RuntimeGVisor, evidencetest.ReachedAPIServer)
	const (
		first  = "tools-codegen-aaaaaaaaaaaa"
		second = "tools-codegen-bbbbbbbbbbbb"
	)
	type member struct {
		body []byte
		// sealFor names the member whose record it carries ("" its own); sealKey another key.
		sealFor string
		sealKey []byte
		unread  bool
	}
	tests := map[string]struct {
		dedicated   bool
		members     []member // first, second (the older first)
		wantAdopted string   // "" built cold
		wantKernel  string
	}{
		"a kernel of its own needed, a gVisor member: adopted":                {dedicated: true, members: []member{{body: gvisor}}, wantAdopted: first, wantKernel: evidence.KernelDedicated},
		"a kernel of its own needed, the node's kernel: built cold":           {dedicated: true, members: []member{{body: runc}}},
		"a kernel of its own needed, the node's kernel then gVisor: the next": {dedicated: true, members: []member{{body: runc}, {body: gvisor}}, wantAdopted: second, wantKernel: evidence.KernelDedicated},
		"any kernel, the node's: adopted, Shared":                             {members: []member{{body: runc}}, wantAdopted: first, wantKernel: evidence.KernelShared},
		"a probe reached the API server: never adopted":                       {members: []member{{body: reached}}},
		"unread: never adopted":                                               {members: []member{{unread: true}}},
		"a record sealed for another member: never adopted":                   {dedicated: true, members: []member{{body: runc}, {body: gvisor, sealFor: first}}},
		"a record sealed with another key: never adopted":                     {members: []member{{body: gvisor, sealKey: bytes.Repeat([]byte{6}, 32)}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			class := newClass("codegen")
			if tc.dedicated {
				class.Spec.Isolation = &airlockv1alpha1.SandboxIsolation{Kernel: airlockv1alpha1.KernelDedicated}
			}
			reg := warmRegistry(3)
			record := sandboxpod.Freeze(class, &reg.Spec.Sandboxes[0])
			pods := map[string]*corev1.Pod{}
			var cached []*corev1.Pod
			for i := range tc.members {
				name := []string{first, second}[i]
				pod := warmMember(reg, name, record, t0.Add(time.Duration(i-2)*time.Minute), "10.244.0.4"+string(rune('0'+i)))
				pod.Spec.NodeName = testNode
				pods[name] = pod
				cached = append(cached, pod)
			}
			for i, m := range tc.members {
				pod := pods[[]string{first, second}[i]]
				if m.unread {
					continue
				}
				of, key := pod, testSealKey
				if m.sealFor != "" {
					of = pods[m.sealFor]
				}
				if m.sealKey != nil {
					key = m.sealKey
				}
				sealedMember(t, key, pod, of, m.body)
			}
			f := warmFixture(t, 5, cached...)
			f.classes = []*airlockv1alpha1.SandboxClass{class}
			claim := newClaim("c1", "s1", "", t0)
			f.claims = append(f.claims, claim)
			c, reader := f.readingWarmController(ctx, signer)
			if err := admitAndBuild(ctx, c); err != nil {
				t.Fatal(err)
			}
			acts := f.actions()
			adopted := ""
			for _, a := range acts {
				if after, ok := strings.CutPrefix(a, "patch pods "); ok {
					adopted = after
				}
			}
			if adopted != tc.wantAdopted {
				t.Fatalf("adopted %q, want %q (actions %v)", adopted, tc.wantAdopted, acts)
			}
			if tc.wantAdopted == "" {
				if !slices.Contains(acts, "create pods c1") {
					t.Errorf("actions %v, want the claim built cold", acts)
				}
				return
			}
			got := f.writtenClaim()
			iso := got.Status.Isolation
			if got.Status.Phase != airlockv1alpha1.ClaimBound || got.Status.Warm == nil || iso == nil || iso.Attestation == nil || iso.Kernel != tc.wantKernel {
				t.Fatalf("phase %s warm %+v isolation %+v, want Bound warm with a signed %s statement", got.Status.Phase, got.Status.Warm, iso, tc.wantKernel)
			}
			pub := signer.Public().(ed25519.PublicKey)
			keys := map[string]ed25519.PublicKey{attestation.KeyID(pub): pub}
			att := &attestation.Attestation{Statement: iso.Attestation.Statement, Signature: iso.Attestation.Signature, KeyID: iso.Attestation.KeyID}
			adoptionToken := adoptionTokenOf(adopted, claim)
			st, err := attestation.Verify(att, keys, attestation.Expect{Token: adoptionToken, Namespace: claim.Namespace, Claim: claim.Name})
			if err != nil {
				t.Fatal(err)
			}
			member := pods[adopted]
			body := tc.members[slices.Index([]string{first, second}, adopted)].body
			if st.ClaimUID != string(claim.UID) || st.PodUID != string(member.UID) || st.Pod != member.Name || st.Node != testNode ||
				st.NodeKernel != nodeKernel || !bytes.Equal(st.Evidence, body) || st.Kernel != tc.wantKernel {
				t.Errorf("statement %+v", st)
			}
			if _, err := attestation.Verify(att, keys, attestation.Expect{Token: testToken}); err == nil {
				t.Error("the statement verifies for the claim's cold token: it must name the adoption token the runtime gets")
			}
			// Bound: nothing is read of the sandbox, at the adoption or in the claim's syncs after.
			f.cacheClaim(t, c, got)
			if _, err := c.sync(ctx, keyOf(got)); err != nil {
				t.Fatal(err)
			}
			c.waitForReads()
			if asked := reader.Asked(); len(asked) != 0 {
				t.Errorf("the member's sandbox was read: %v", asked)
			}
		})
	}
}

// TestBindingClaimsMemberUnfit: a Binding claim that controls a member (an adoption whose Bound
// was not written) whose record does not meet its need lets the member go and is built cold;
// one whose record meets it is Bound with its statement.
func TestBindingClaimsMemberUnfit(t *testing.T) {
	_, signer, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		body      []byte
		wantBound bool
	}{
		"gVisor: Bound":                 {body: evidencetest.Of("4.19.0-gvisor", isolation.RuntimeGVisor, nil), wantBound: true},
		"the node's kernel: built cold": {body: evidencetest.Of(nodeKernel, isolation.RuntimeKernel, nil)},
		"no record: built cold":         {},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			class := newClass("codegen")
			class.Spec.Isolation = &airlockv1alpha1.SandboxIsolation{Kernel: airlockv1alpha1.KernelDedicated}
			reg := warmRegistry(3)
			record := sandboxpod.Freeze(class, &reg.Spec.Sandboxes[0])
			claim := binding("c1", t0)
			claim.Status.Frozen = record
			pod := warmMember(reg, "tools-codegen-aaaaaaaaaaaa", record, t0, "10.244.0.40")
			pod.Spec.NodeName = testNode
			if tc.body != nil {
				sealedMember(t, testSealKey, pod, pod, tc.body)
			}
			pod.OwnerReferences = nil
			for k, v := range sandboxpod.PodLabels(claim) {
				pod.Labels[k] = v
			}
			pod.OwnerReferences = append(pod.OwnerReferences, sandboxpod.OwnerReference(claim))
			f := warmFixture(t, 5, pod)
			f.classes = []*airlockv1alpha1.SandboxClass{class}
			f.claims = append(f.claims, claim)
			c, _ := f.readingWarmController(ctx, signer)
			if _, err := c.sync(ctx, keyOf(claim)); err != nil {
				t.Fatal(err)
			}
			acts := f.actions()
			if tc.wantBound {
				got := f.writtenClaim()
				if got.Status.Phase != airlockv1alpha1.ClaimBound || got.Status.Isolation == nil || got.Status.Isolation.Kernel != evidence.KernelDedicated {
					t.Errorf("phase %s isolation %+v, want Bound with a Dedicated statement", got.Status.Phase, got.Status.Isolation)
				}
				return
			}
			if !slices.Equal(acts, []string{"delete pods " + pod.Name}) {
				t.Fatalf("actions %v, want the member deleted, alone", acts)
			}
			// Once the cache shows the deletion, the claim is built cold (and never bound to
			// the member, which the cache showed Ready until then).
			gone := pod.DeepCopy()
			gone.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
			if err := f.podInformer.GetIndexer().Update(gone); err != nil {
				t.Fatal(err)
			}
			if _, err := c.sync(ctx, keyOf(claim)); err != nil {
				t.Fatal(err)
			}
			c.waitForReads()
			if acts := f.actions(); !slices.Contains(acts, "create pods c1") {
				t.Errorf("actions %v, want the claim built cold", acts)
			}
			for _, a := range f.log {
				if u, ok := a.(core.UpdateAction); ok && a.GetSubresource() == "status" {
					if got := u.GetObject().(*airlockv1alpha1.SandboxClaim); got.Status.Phase == airlockv1alpha1.ClaimBound {
						t.Errorf("the claim was Bound (warm %+v) to the member it let go", got.Status.Warm)
					}
				}
			}
		})
	}
}
