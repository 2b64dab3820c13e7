package servingcert

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
)

const testNamespace = "airlock-system"

var alwaysReady = func() bool { return true }

type issuerFixture struct {
	client  *k8sfake.Clientset
	indexer cache.Indexer
	issuer  *Issuer
	store   *Store
	clock   *clocktesting.FakeClock
}

// newIssuerFixture builds an issuer on a fake clientset holding objs and an informer that is never
// started: deliver puts the API server's Secret into its store, as a watch event would, and tests
// call sync and processNextWorkItem themselves.
func newIssuerFixture(t *testing.T, objs ...runtime.Object) *issuerFixture {
	t.Helper()
	client := k8sfake.NewClientset(objs...)
	factory := kubeinformers.NewSharedInformerFactoryWithOptions(client, 0, kubeinformers.WithNamespace(testNamespace))
	secrets := factory.Core().V1().Secrets()
	clk := clocktesting.NewFakeClock(t0)
	store := NewStore()
	i, err := newIssuerWithClock(client, testNamespace, secrets, DefaultPolicy(testNames), store, clk, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	i.secretsSynced = alwaysReady
	t.Cleanup(i.queue.ShutDown)
	return &issuerFixture{client: client, indexer: secrets.Informer().GetIndexer(), issuer: i, store: store, clock: clk}
}

// secret returns the Secret as the API server has it.
func (f *issuerFixture) secret(t *testing.T) *corev1.Secret {
	t.Helper()
	s, err := f.client.CoreV1().Secrets(testNamespace).Get(context.Background(), SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// deliver puts the API server's Secret into the informer's store.
func (f *issuerFixture) deliver(t *testing.T) *corev1.Secret {
	t.Helper()
	s := f.secret(t)
	if err := f.indexer.Update(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func writeActions(client *k8sfake.Clientset) []string {
	var out []string
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" || a.GetVerb() == "update" {
			out = append(out, a.GetVerb())
		}
	}
	return out
}

// servedSerial is the serial of the certificate the store serves now.
func servedSerial(t *testing.T, s *Store) string {
	t.Helper()
	c, err := s.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	return c.Leaf.SerialNumber.String()
}

// TestIssuerCreatesSecret: with no Secret, the issuer creates one (type kubernetes.io/tls,
// labelled), serves its certificate, and asks to look again at the renewal time.
func TestIssuerCreatesSecret(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newIssuerFixture(t)
	if err := f.store.Check(nil); err == nil {
		t.Fatal("an empty store passes readiness")
	}
	if _, err := f.store.GetCertificate(nil); !errors.Is(err, ErrNoCertificate) {
		t.Fatalf("empty store: %v, want ErrNoCertificate", err)
	}
	next, err := f.issuer.sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := DefaultServingLifetime * 2 / 3; next != want {
		t.Errorf("requeue after %v, want %v", next, want)
	}
	s := f.secret(t)
	if s.Type != corev1.SecretTypeTLS || s.Labels["app.kubernetes.io/name"] != "airlock" {
		t.Errorf("Secret type %q labels %v", s.Type, s.Labels)
	}
	if got := servedSerial(t, f.store); got != certOf(t, s.Data, corev1.TLSCertKey).SerialNumber.String() {
		t.Error("the store does not serve the Secret's certificate")
	}
	if string(f.store.Bundle()) != string(s.Data[BundleKey]) || f.store.Check(nil) != nil {
		t.Error("the store does not hold the Secret's bundle, or is not ready")
	}
	// Seen again through the informer: nothing to write.
	f.deliver(t)
	if _, err := f.issuer.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := writeActions(f.client); len(got) != 1 {
		t.Errorf("writes %v, want one create", got)
	}
}

// TestIssuerLosesCreateRace: when another replica created the Secret first, the issuer neither
// fails nor overwrites it, and serves the winner's certificate once the informer brings it.
func TestIssuerLosesCreateRace(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	winner := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: testNamespace, ResourceVersion: "7"}, Type: corev1.SecretTypeTLS, Data: mustPlan(t, nil, t0).Data}
	f := newIssuerFixture(t, winner) // the API server has it, the informer not yet
	if _, err := f.issuer.sync(ctx); err != nil {
		t.Fatalf("lost create race: %v", err)
	}
	if f.store.Check(nil) == nil {
		t.Error("the store serves something before the winner's Secret arrived")
	}
	f.deliver(t)
	if _, err := f.issuer.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := servedSerial(t, f.store), certOf(t, winner.Data, corev1.TLSCertKey).SerialNumber.String(); got != want {
		t.Errorf("serves %s, want the winner's %s", got, want)
	}
	if got := writeActions(f.client); len(got) != 1 || got[0] != "create" {
		t.Errorf("writes %v, want only the refused create", got)
	}
	if s := f.secret(t); string(s.Data[corev1.TLSCertKey]) != string(winner.Data[corev1.TLSCertKey]) {
		t.Error("the winner's Secret was overwritten")
	}
}

// TestIssuerLosesUpdateRace: a renewal that conflicts (another replica renewed first) is not an
// error and does not change what is served until the winner's Secret arrives.
func TestIssuerLosesUpdateRace(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newIssuerFixture(t)
	if _, err := f.issuer.sync(ctx); err != nil {
		t.Fatal(err)
	}
	f.deliver(t)
	before := servedSerial(t, f.store)
	f.client.PrependReactor("update", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "secrets"}, SecretName, errors.New("the object has been modified"))
	})
	f.clock.Step(DefaultServingLifetime * 2 / 3)
	next, err := f.issuer.sync(ctx)
	if err != nil || next != 0 {
		t.Fatalf("conflict: next %v, error %v; want 0 and no error (the informer brings the winner)", next, err)
	}
	if servedSerial(t, f.store) != before {
		t.Error("the store changed on a renewal that was not written")
	}
}

// TestIssuerRenewsOnTheFakeClock: the issuer's requeue is an AddAfter on its clock. Its item is
// ready only once the clock reaches the renewal time; that sync writes a new serving certificate
// and the store serves it from the next handshake on.
func TestIssuerRenewsOnTheFakeClock(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newIssuerFixture(t)
	f.issuer.queue.Add(f.issuer.key())
	if !f.issuer.processNextWorkItem(ctx) {
		t.Fatal("queue shut down")
	}
	f.deliver(t)
	first := servedSerial(t, f.store)
	if n := f.issuer.queue.Len(); n != 0 {
		t.Fatalf("%d items ready right after the sync, want none (the next look is an AddAfter)", n)
	}

	f.clock.Step(DefaultServingLifetime*2/3 - time.Minute)
	if n := f.issuer.queue.Len(); n != 0 {
		t.Fatalf("%d items ready a minute before the renewal time", n)
	}
	f.clock.Step(time.Minute)
	got := make(chan bool, 1)
	go func() { got <- f.issuer.processNextWorkItem(ctx) }() // blocks until the item is ready
	select {
	case ok := <-got:
		if !ok {
			t.Fatal("queue shut down")
		}
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("the renewal was not due when the clock reached it")
	}
	if w := writeActions(f.client); len(w) != 2 || w[1] != "update" {
		t.Fatalf("writes %v, want create then update", w)
	}
	renewed := f.deliver(t)
	if second := servedSerial(t, f.store); second == first || second != certOf(t, renewed.Data, corev1.TLSCertKey).SerialNumber.String() {
		t.Errorf("served %s then %s; want the renewed Secret's certificate", first, second)
	}
}
