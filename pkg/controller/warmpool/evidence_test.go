package warmpool

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/evidence"
	"github.com/airlock-dev/airlock/pkg/controller/evidence/evidencetest"
	"github.com/airlock-dev/airlock/pkg/isolation"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

const (
	testNode       = "node-1"
	testNodeKernel = "6.18.0-test"
	testMemberIP   = "10.244.0.40"
)

var testPeer = &sandboxpod.OperatorPeer{Namespace: "airlock-system", Labels: map[string]string{"app.kubernetes.io/component": "operator"}}

// readyMember is an idle member of the fixtures' pool, Ready on testNode.
func readyMember(name string) *corev1.Pod {
	pod := warmMember(warmRegistry(1), name, testRecord(), t0.Add(-time.Minute), testMemberIP)
	pod.Spec.NodeName = testNode
	return pod
}

// readingPolicy is the pool's policy when the operator reads evidence: the operator's ingress.
func readingPolicy() *networkingv1.NetworkPolicy {
	return sandboxpod.WithOperatorIngress(currentPolicy(), testRecord(), testPeer)
}

// readingController is a pool controller that reads members' evidence with reader, with a
// fake event recorder.
func (f *fixture) readingController(ctx context.Context, reader *evidencetest.Reader) (*Controller, *record.FakeRecorder) {
	c := f.newController(ctx, 100)
	c.SetOperatorPeer(testPeer)
	c.evidence.reads.Reader = reader
	c.nodes = func(_ context.Context, name string) (*corev1.Node, error) {
		n := &corev1.Node{}
		n.Name = name
		n.Status.NodeInfo.KernelVersion = testNodeKernel
		return n, nil
	}
	recorder := record.NewFakeRecorder(10)
	c.recorder = recorder
	return c, recorder
}

// annotated returns the record the controller patched onto member, "" when none.
func (f *fixture) annotated(member string) string {
	for _, a := range f.log {
		if p, ok := a.(core.PatchAction); ok && p.GetResource().Resource == "pods" && p.GetName() == member {
			return string(p.GetPatch())
		}
	}
	return ""
}

// TestMemberNotAdoptableUntilRead: with reading on, a Ready member is read once (its evidence
// token, from its IP, off the worker, the end enqueueing the registry) and counted starting, not
// ready, until the sealed record of what was read is on its pod: then it is ready and never read
// again (a failover reads the pod's record, not the sandbox). The pool's policy lets the operator
// in to sandboxd's port.
func TestMemberNotAdoptableUntilRead(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	body := evidencetest.Of("4.19.0-gvisor", isolation.RuntimeGVisor, nil)
	member := readyMember("tools-codegen-aaaaaaaaaaaa")
	f := poolFixture(t, 1, []*corev1.Pod{member}, readingPolicy())
	reader := &evidencetest.Reader{Body: body}
	c, _ := f.readingController(ctx, reader)
	if _, err := c.sync(ctx, registryKey()); err != nil {
		t.Fatal(err)
	}
	c.waitForReads()
	if st := f.poolStatus(); st.Ready != 0 || st.Starting != 1 {
		t.Fatalf("while read: ready %d starting %d, want 0 and 1", st.Ready, st.Starting)
	}
	if c.queue.Len() != 1 {
		t.Errorf("the read's end did not enqueue the registry (queue %d)", c.queue.Len())
	}
	if got, want := reader.Asked(), []string{"http://" + testMemberIP + ":8080 evidence-token-of-" + testNamespace + "-" + member.Name}; !slices.Equal(got, want) {
		t.Fatalf("reads %v, want %v", got, want)
	}
	if slices.ContainsFunc(f.actions(), func(a string) bool {
		return strings.HasPrefix(a, "update networkpolicies") || strings.HasPrefix(a, "create networkpolicies")
	}) {
		t.Errorf("the pool's policy with the operator's ingress was changed: %v", f.actions())
	}

	f.clock.Step(time.Second)
	if _, err := c.sync(ctx, registryKey()); err != nil {
		t.Fatal(err)
	}
	patch := f.annotated(member.Name)
	if patch == "" {
		t.Fatalf("no record patched onto the member: %v", f.actions())
	}
	live, err := f.kubeClient.CoreV1().Pods(testNamespace).Get(ctx, member.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := evidence.Open(testSealKey, live)
	if err != nil {
		t.Fatalf("the patched record does not open: %v (patch %s)", err, patch)
	}
	if !bytes.Equal(m.Evidence, body) || m.NodeKernel != testNodeKernel || m.Node != testNode || m.PodUID != member.UID {
		t.Errorf("record %+v, want the exact evidence, the node and its kernel", m)
	}
	if st := f.poolStatus(); st.Ready != 0 {
		t.Errorf("ready %d before the cache shows the record", st.Ready)
	}

	// The cache shows the record (here: a new leader's, after a failover): ready, and nothing
	// is read again; adopted, it is no pool's to read.
	cached := member.DeepCopy()
	cached.Annotations = live.Annotations
	f2 := poolFixture(t, 1, []*corev1.Pod{cached}, readingPolicy())
	c2, _ := f2.readingController(ctx, reader)
	c2.keysWritten.Store(cached.UID, struct{}{})
	for range 2 {
		f2.clock.Step(2 * time.Second)
		if _, err := c2.sync(ctx, registryKey()); err != nil {
			t.Fatal(err)
		}
	}
	c2.waitForReads()
	if st := f2.poolStatus(); st.Ready != 1 || st.Starting != 0 {
		t.Errorf("with its record: ready %d starting %d, want 1 and 0", st.Ready, st.Starting)
	}
	if n := len(reader.Asked()); n != 1 {
		t.Errorf("%d reads of the member, want the one", n)
	}
	adopted := cached.DeepCopy()
	adoptBy("c1", adopted)
	f3 := poolFixture(t, 1, []*corev1.Pod{adopted}, readingPolicy())
	c3, _ := f3.readingController(ctx, reader)
	if _, err := c3.sync(ctx, registryKey()); err != nil {
		t.Fatal(err)
	}
	c3.waitForReads()
	if n := len(reader.Asked()); n != 1 {
		t.Errorf("%d reads after the adoption, want none more", n-1)
	}
}

// TestMemberRefusedForItsEvidence: a member whose evidence fails what every sandbox needs (a
// probe reached the API server, not evidence), or cannot be read within its startupTimeout, or
// which carries a record this operator did not seal for it (copied from another member, sealed
// with another key, changed), is deleted, with a Warning event on the registry, and never
// counted ready; a failed read in time is tried again; a shared kernel is not the pool's to
// refuse (a claim that needs a kernel of its own does not choose the member).
func TestMemberRefusedForItsEvidence(t *testing.T) {
	member := readyMember("tools-codegen-aaaaaaaaaaaa")
	other := readyMember("tools-codegen-bbbbbbbbbbbb")
	gvisor := evidencetest.Of("4.19.0-gvisor", isolation.RuntimeGVisor, nil)
	sealed := func(key []byte, of *corev1.Pod, body []byte) string {
		n := &corev1.Node{}
		n.Status.NodeInfo.KernelVersion = testNodeKernel
		v, err := evidence.Seal(key, evidence.MemberOf(of, n, body, t0))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tests := map[string]struct {
		record      string // the member's annotation, if any
		body        []byte
		readErr     error
		class       func(*airlockv1alpha1.SandboxClass)
		step        time.Duration // before the syncs after the first read
		wantDeleted bool
		wantIn      string
	}{
		"a probe reached the API server": {body: evidencetest.Of(testNodeKernel, isolation.RuntimeKernel, evidencetest.ReachedAPIServer), wantDeleted: true, wantIn: "reached the API server"},
		"not evidence":                   {body: []byte(`{"kernelRelease":"4.19.0-gvisor"}`), wantDeleted: true, wantIn: "evidence"},
		"uid 0":                          {body: evidencetest.Of(testNodeKernel, isolation.RuntimeKernel, func(ev *isolation.Evidence) { ev.UID = 0 }), wantDeleted: true, wantIn: "uid 0"},
		"another member's record":        {record: sealed(testSealKey, other, gvisor), wantDeleted: true, wantIn: "not of this pod"},
		"a record of another key":        {record: sealed(bytes.Repeat([]byte{9}, 32), member, gvisor), wantDeleted: true, wantIn: "not sealed by this operator"},
		"a changed record":               {record: strings.Replace(sealed(testSealKey, member, gvisor), testNodeKernel, "4.19.0", 1), wantDeleted: true, wantIn: "not sealed by this operator"},
		"unreadable past the startupTimeout": {readErr: errors.New("connection refused"), step: 5 * time.Minute,
			wantDeleted: true, wantIn: "could not read"},
		"unreadable in time: tried again": {readErr: errors.New("connection refused")},
		"the node's kernel, a class that needs its own: kept for the claims to judge": {
			body: evidencetest.Of(testNodeKernel, isolation.RuntimeKernel, nil),
			class: func(c *airlockv1alpha1.SandboxClass) {
				c.Spec.Isolation = &airlockv1alpha1.SandboxIsolation{Kernel: airlockv1alpha1.KernelDedicated}
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			pod := member.DeepCopy()
			class := newClass("codegen")
			if tc.class != nil {
				tc.class(class)
				pod = warmMember(warmRegistry(1), member.Name, sandboxpod.Freeze(class, &warmRegistry(1).Spec.Sandboxes[0]), t0.Add(-time.Minute), testMemberIP)
				pod.Spec.NodeName = testNode
			}
			if tc.record != "" {
				pod.Annotations = map[string]string{evidence.AnnotationMember: tc.record}
			}
			f := poolFixture(t, 1, []*corev1.Pod{pod})
			f.classes = []*airlockv1alpha1.SandboxClass{class}
			reader := &evidencetest.Reader{Body: tc.body, Err: tc.readErr}
			c, recorder := f.readingController(ctx, reader)
			// The cache keeps the member as it was: the syncs stop at its deletion.
			var requeue *time.Duration
			deleted := false
			for i := 0; i < 4 && !deleted; i++ {
				switch i {
				case 1, 2:
					f.clock.Step(2 * time.Second) // past the status writes' interval
				case 3:
					f.clock.Step(tc.step)
				}
				var err error
				if requeue, err = c.sync(ctx, registryKey()); err != nil {
					t.Fatal(err)
				}
				c.waitForReads()
				deleted = slices.Contains(f.actions(), "delete pods "+member.Name)
			}
			if deleted != tc.wantDeleted {
				t.Fatalf("deleted %v, want %v (actions %v)", deleted, tc.wantDeleted, f.actions())
			}
			if st := f.poolStatus(); st.Ready != 0 && tc.wantDeleted {
				t.Errorf("a refused member counted ready: %+v", st)
			}
			if tc.record != "" && len(reader.Asked()) != 0 {
				t.Errorf("a member with a record was read: %v", reader.Asked())
			}
			var events []string
			for len(recorder.Events) > 0 {
				events = append(events, <-recorder.Events)
			}
			if !tc.wantDeleted {
				if len(events) != 0 {
					t.Errorf("events %v", events)
				}
				if tc.readErr != nil && (requeue == nil || *requeue > evidence.Retry) {
					t.Errorf("requeue %v, want a look again within %v", requeue, evidence.Retry)
				}
				if tc.readErr == nil && f.annotated(member.Name) == "" {
					t.Errorf("the member's record was not written: %v", f.actions())
				}
				return
			}
			if f.annotated(member.Name) != "" {
				t.Error("a refused member got a record")
			}
			if len(events) != 1 || !strings.HasPrefix(events[0], "Warning "+ReasonIsolationNotMet) || !strings.Contains(events[0], tc.wantIn) || !strings.Contains(events[0], member.Name) {
				t.Errorf("events %v, want one Warning %s naming the member and saying %q", events, ReasonIsolationNotMet, tc.wantIn)
			}
			if st := f.poolStatus(); !strings.Contains(st.Message, tc.wantIn) {
				t.Errorf("pool message %q, want it saying %q", st.Message, tc.wantIn)
			}
		})
	}
}

// TestNoReadingNoRead: without reading (no --operator-pod-labels, or
// --read-isolation-evidence=false) a Ready member is ready as before, nothing is read, and the
// pool's policy has no ingress from the operator.
func TestNoReadingNoRead(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := poolFixture(t, 1, []*corev1.Pod{readyMember("tools-codegen-aaaaaaaaaaaa")})
	c := f.newController(ctx, 100)
	if _, err := c.sync(ctx, registryKey()); err != nil {
		t.Fatal(err)
	}
	if st := f.poolStatus(); st.Ready != 1 {
		t.Errorf("ready %d, want 1", st.Ready)
	}
	np := f.written("networkpolicies", "").(*networkingv1.NetworkPolicy)
	if len(np.Spec.Ingress) != 1 {
		t.Errorf("the pool's policy has %d ingress rules, want the namespace's alone", len(np.Spec.Ingress))
	}
}
