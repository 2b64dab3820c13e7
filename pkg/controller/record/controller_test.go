package record

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubeinformers "k8s.io/client-go/informers"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
	airlockfake "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/fake"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions"
	"github.com/airlock-dev/airlock/pkg/record"
	"github.com/airlock-dev/airlock/pkg/recordstore"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

var t0 = time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)

const testToken = "tok"

type fixedSigner struct{ s *record.Signer }

func (f fixedSigner) Signer(context.Context) (*record.Signer, error) { return f.s, nil }

type fixedTokens struct{}

func (fixedTokens) Token(context.Context, types.UID, string, string) (string, error) {
	return testToken, nil
}

func (fixedTokens) AdoptionToken(_ context.Context, namespace, member string, claimUID types.UID, tools []string) (string, error) {
	return "adopt:" + namespace + "/" + member + ":" + string(claimUID) + ":" + strings.Join(tools, ","), nil
}

// fakeFollower answers each Follow with the lines of the boot asked for after the cursor, and
// returns end (nil: the stopped entry was among them).
type fakeFollower struct {
	mu     sync.Mutex
	lines  map[string][][]byte // by boot; "" reads the current boot
	boot   string
	end    error
	calls  []string
	tokens []string
}

func (f *fakeFollower) Follow(ctx context.Context, base, token, boot string, after uint64, take func([]byte) error) error {
	f.mu.Lock()
	f.calls = append(f.calls, fmt.Sprintf("%s %s after %d", base, boot, after))
	f.tokens = append(f.tokens, token)
	if boot == "" {
		boot = f.boot
	}
	lines := f.lines[boot]
	end := f.end
	f.mu.Unlock()
	for i := int(after); i < len(lines); i++ {
		if err := take(lines[i]); err != nil {
			return err
		}
	}
	return end
}

// sandboxdLine is one line of sandboxd's log.
func sandboxdLine(t *testing.T, boot string, seq uint64, kind string) []byte {
	t.Helper()
	e := record.Entry{Time: record.FormatTime(t0), Source: record.SourceSandboxd, Boot: boot, SourceSeq: seq, Kind: kind, Prev: ""}
	if kind == record.KindToolCall {
		e.Tool, e.Status, e.Call = "Bash", record.StatusOK, 1
	}
	if kind == record.KindSandboxStopped {
		e.Count = seq
	}
	b, err := e.Line()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type fixture struct {
	t          *testing.T
	records    *airlockfake.Clientset // the SessionRecords, as the API server keeps them
	claims     cache.Indexer
	pods       cache.Indexer
	clock      *clocktesting.FakeClock
	follower   *fakeFollower
	signer     *record.Signer
	c          *Controller
	observed   []record.Entry
	observedMu sync.Mutex
}

func newFixture(t *testing.T, records *airlockfake.Clientset, signer *record.Signer) *fixture {
	t.Helper()
	if records == nil {
		records = airlockfake.NewSimpleClientset() //nolint:staticcheck // NewClientset's tracker needs an OpenAPI schema of SessionRecord, which codegen does not make
		apiServerRules(records)
	}
	if signer == nil {
		priv, err := record.SigningKey(bytes.Repeat([]byte{7}, 32))
		if err != nil {
			t.Fatal(err)
		}
		signer, _ = record.NewSigner(priv)
	}
	air := airlockinformers.NewSharedInformerFactory(airlockfake.NewClientset(), 0)
	kinf := kubeinformers.NewSharedInformerFactory(k8sfake.NewClientset(), 0)
	f := &fixture{t: t, records: records, clock: clocktesting.NewFakeClock(t0), follower: &fakeFollower{lines: map[string][][]byte{}}, signer: signer}
	c, err := newControllerWithClock(realRecords{client: records}, air.Airlock().V1alpha1().SandboxClaims(), kinf.Core().V1().Pods(),
		fixedTokens{}, fixedSigner{signer}, f.follower, true, f.clock)
	if err != nil {
		t.Fatal(err)
	}
	c.claimsSynced, c.podsSynced = alwaysReady, alwaysReady
	c.AddObserver(func(_ *airlockv1alpha1.SandboxClaim, e record.Entry) {
		f.observedMu.Lock()
		f.observed = append(f.observed, e)
		f.observedMu.Unlock()
	})
	f.c = c
	f.claims = air.Airlock().V1alpha1().SandboxClaims().Informer().GetIndexer()
	f.pods = kinf.Core().V1().Pods().Informer().GetIndexer()
	t.Cleanup(func() { c.queue.ShutDown(); c.wg.Wait() })
	return f
}

func alwaysReady() bool { return true }

var sessionRecordsResource = airlockv1alpha1.SchemeGroupVersion.WithResource("sessionrecords")

// apiServerRules makes the fake's SessionRecord writes keep and check resourceVersions, and
// refuse what the CRD's validation rules refuse (appendOnly), as the API server does.
func apiServerRules(records *airlockfake.Clientset) {
	var mu sync.Mutex
	rv := 100
	records.PrependReactor("create", "sessionrecords", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		sr := a.(k8stesting.CreateAction).GetObject().(*airlockv1alpha1.SessionRecord).DeepCopy()
		rv++
		sr.ResourceVersion = strconv.Itoa(rv)
		if err := records.Tracker().Create(sessionRecordsResource, sr, sr.Namespace); err != nil {
			return true, nil, err
		}
		return true, sr, nil
	})
	records.PrependReactor("update", "sessionrecords", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		sr := a.(k8stesting.UpdateAction).GetObject().(*airlockv1alpha1.SessionRecord).DeepCopy()
		cur, err := records.Tracker().Get(sessionRecordsResource, sr.Namespace, sr.Name)
		if err != nil {
			return true, nil, err
		}
		old := cur.(*airlockv1alpha1.SessionRecord)
		if sr.ResourceVersion != "" && sr.ResourceVersion != old.ResourceVersion {
			return true, nil, apierrors.NewConflict(sessionRecordsResource.GroupResource(), sr.Name, errors.New("the object has been modified"))
		}
		if why := appendOnly(old.Spec, sr.Spec); why != "" {
			return true, nil, apierrors.NewInvalid(airlockv1alpha1.SchemeGroupVersion.WithKind("SessionRecord").GroupKind(), sr.Name, field.ErrorList{field.Invalid(field.NewPath("spec"), "", why)})
		}
		rv++
		sr.ResourceVersion = strconv.Itoa(rv)
		if err := records.Tracker().Update(sessionRecordsResource, sr, sr.Namespace); err != nil {
			return true, nil, err
		}
		return true, sr, nil
	})
}

// appendOnly is what the CRD's x-kubernetes-validations refuse of an update (the e2e
// TestSessionRecordIsAppendOnly proves them on a real API server).
func appendOnly(old, cur airlockv1alpha1.SessionRecordSpec) string {
	switch {
	case cur.ClaimUID != old.ClaimUID || cur.ClaimName != old.ClaimName || cur.Segment != old.Segment:
		return "claimUID, claimName and segment are immutable"
	case !strings.HasPrefix(cur.Entries, old.Entries):
		return "entries are append-only"
	case old.Anchor != nil && cur.Anchor == nil:
		return "a segment's anchor is never removed"
	case old.Anchor != nil && cur.Anchor.Count < old.Anchor.Count:
		return "a segment's anchor never counts fewer entries"
	case old.Anchor != nil && old.Anchor.Sealed && (*cur.Anchor != *old.Anchor || cur.Entries != old.Entries):
		return "a sealed segment never changes"
	}
	return ""
}

func newClaim(phase airlockv1alpha1.ClaimPhase) *airlockv1alpha1.SandboxClaim {
	return &airlockv1alpha1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: "uid-1", ResourceVersion: "1"},
		Status:     airlockv1alpha1.SandboxClaimStatus{Phase: phase, Frozen: &airlockv1alpha1.FrozenSandbox{}},
	}
}

func runningPod(claim *airlockv1alpha1.SandboxClaim) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: claim.Namespace, Name: claim.Name + "-pod", UID: "pod-1",
			Labels:          sandboxpod.SelectorLabels(claim),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "airlock.dev/v1alpha1", Kind: "SandboxClaim", Name: claim.Name, UID: claim.UID, Controller: ptrTrue()}}},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: sandboxpod.TokenVolumeName,
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: claimtoken.ClaimSecretName(claim.Name, testToken)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7",
			ContainerStatuses: []corev1.ContainerStatus{{Name: sandboxpod.ContainerName}}},
	}
}

func ptrTrue() *bool { b := true; return &b }

func (f *fixture) sync(claim *airlockv1alpha1.SandboxClaim) *time.Duration {
	f.t.Helper()
	_, ctx := ktesting.NewTestContext(f.t)
	requeue, err := f.c.sync(ctx, cache.ObjectName{Namespace: "ns", Name: claim.Name})
	if err != nil {
		f.t.Fatalf("sync: %v", err)
	}
	f.c.wg.Wait() // the follower's read, which the fake answers at once
	return requeue
}

// export reads the stored record and verifies it.
func (f *fixture) export() (record.Report, []record.Entry) {
	f.t.Helper()
	list, err := f.records.AirlockV1alpha1().SessionRecords("ns").List(context.Background(), metav1.ListOptions{LabelSelector: recordstore.LabelRecordOf + "=uid-1"})
	if err != nil {
		f.t.Fatal(err)
	}
	var cms []*airlockv1alpha1.SessionRecord
	for i := range list.Items {
		cms = append(cms, &list.Items[i])
	}
	var buf bytes.Buffer
	if _, err := recordstore.Export(cms, &buf); err != nil {
		f.t.Fatal(err)
	}
	entries, _, err := record.ReadJSONL(bytes.NewReader(buf.Bytes()))
	if err != nil {
		f.t.Fatal(err)
	}
	rep, err := record.Verify(bytes.NewReader(buf.Bytes()), record.NewKeys(f.signer.Public()), record.Options{Claim: "uid-1"})
	if err != nil {
		f.t.Fatal(err)
	}
	return rep, entries
}

// writes are the verbs of the record writes made so far (create, update).
func (f *fixture) writes() []string {
	var out []string
	for _, a := range f.records.Actions() {
		if a.GetResource().Resource == "sessionrecords" && (a.GetVerb() == "create" || a.GetVerb() == "update") {
			out = append(out, a.GetVerb())
		}
	}
	return out
}

func kinds(entries []record.Entry) string {
	var k []string
	for _, e := range entries {
		s := e.Kind
		if e.Kind == record.KindClaimPhase {
			s += ":" + e.Phase
		}
		k = append(k, s)
	}
	return strings.Join(k, " ")
}

func keyOf(claim *airlockv1alpha1.SandboxClaim) cache.ObjectName {
	return cache.MetaObjectToName(claim)
}
