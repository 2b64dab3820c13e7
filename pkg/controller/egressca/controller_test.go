package egressca

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/airlock-dev/airlock/pkg/pki"
)

const (
	operatorNS = "airlock-system"
	cmName     = DefaultConfigMapName
)

// roots is a stand-in for the public roots: a CA of its own.
var roots = func() []byte {
	c, err := newCA(rand.Reader, t0, 365*24*time.Hour)
	if err != nil {
		panic(err)
	}
	return c.certPEM
}()

type fixture struct {
	kube       *k8sfake.Clientset
	clock      *clocktesting.FakeClock
	controller *Controller
	source     *BundleSource
	secrets    cache.Indexer
}

// newFixture builds the controller and the bundle source on a fake client; start runs the
// informer and the workers, else the test seeds the store and calls sync itself.
func newFixture(t *testing.T, start bool) *fixture {
	t.Helper()
	f := &fixture{kube: k8sfake.NewClientset(), clock: clocktesting.NewFakeClock(t0)}
	factory := NewSecretInformerFactory(f.kube, operatorNS)
	secrets := factory.Core().V1().Secrets()
	c, err := newControllerWithClock(f.kube, secrets, Config{Namespace: operatorNS, ConfigMapName: cmName, Roots: roots, Policy: testPolicy}, f.clock, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if f.source, err = NewBundleSource(secrets, operatorNS, roots); err != nil {
		t.Fatal(err)
	}
	f.controller = c
	f.secrets = secrets.Informer().GetIndexer()
	if !start {
		t.Cleanup(c.queue.ShutDown)
		return f
	}
	ctx, cancel := context.WithCancel(testContext(t))
	done := make(chan struct{})
	factory.Start(ctx.Done())
	go func() {
		defer close(done)
		if err := c.Run(ctx, 2); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		factory.Shutdown()
	})
	return f
}

func (f *fixture) secret(t *testing.T) *corev1.Secret {
	t.Helper()
	s, err := f.kube.CoreV1().Secrets(operatorNS).Get(context.Background(), SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitFor waits until cond holds (the controller runs on informers' events, not on time).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait.ForeverTestTimeout)
	defer cancel()
	if err := wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// wantBundle is what a namespace's ConfigMap must hold for the Secret s.
func wantBundle(s *corev1.Secret) string { return string(s.Data[BundleKey]) + string(roots) }

// TestSyncSecretMintAndRotate: the Secret is made when missing, left alone while young, given its
// next CA at two thirds of the signer's life and promoted after the propagation; each sync says
// when to look again.
func TestSyncSecretMintAndRotate(t *testing.T) {
	f := newFixture(t, false)
	ctx := testContext(t)
	next, err := f.controller.syncSecret(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := f.secret(t)
	if s.Type != corev1.SecretTypeTLS || len(s.Data[corev1.TLSCertKey]) == 0 || len(s.Data[corev1.TLSPrivateKeyKey]) == 0 || len(s.Data[BundleKey]) == 0 {
		t.Fatalf("created Secret: type %s, keys %d", s.Type, len(s.Data))
	}
	first := signerOf(t, s.Data)
	if want := renewAt(first).Sub(t0); next == nil || *next != want {
		t.Fatalf("requeue %v, want %v", next, want)
	}
	if err := f.secrets.Add(s); err != nil {
		t.Fatal(err)
	}
	before := len(f.kube.Actions())
	if _, err := f.controller.syncSecret(ctx); err != nil || len(f.kube.Actions()) != before {
		t.Fatalf("a current Secret: err %v, %d more actions", err, len(f.kube.Actions())-before)
	}

	f.clock.Step(*next)
	if next, err = f.controller.syncSecret(ctx); err != nil {
		t.Fatal(err)
	}
	s = f.secret(t)
	if len(s.Data[NextCertKey]) == 0 || !signerOf(t, s.Data).Equal(first) {
		t.Fatal("at two thirds: no next CA, or the signer changed")
	}
	if *next != testPolicy.Propagation {
		t.Fatalf("requeue %v, want the propagation %v", *next, testPolicy.Propagation)
	}
	if err := f.secrets.Update(s); err != nil {
		t.Fatal(err)
	}
	f.clock.Step(*next)
	if _, err = f.controller.syncSecret(ctx); err != nil {
		t.Fatal(err)
	}
	s = f.secret(t)
	if len(s.Data[NextCertKey]) != 0 || signerOf(t, s.Data).Equal(first) {
		t.Fatal("after the propagation: the next CA does not sign")
	}
	if certs, _ := pki.ParseCerts(s.Data[BundleKey]); len(certs) != 2 {
		t.Fatalf("after the propagation: %d CAs in the bundle, want the new and the old", len(certs))
	}
}

// TestBundleSource: the bundle is the Secret's terminating CAs then the roots; nothing while
// there is no Secret or its bundle does not parse (fail closed: no bundle without the gateway's
// CA); every event of the Secret is a change, and none of another Secret.
func TestBundleSource(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t, false)
	if got := f.source.Bundle(); got != nil {
		t.Fatalf("without a Secret: %q", got)
	}
	if _, err := f.controller.syncSecret(ctx); err != nil {
		t.Fatal(err)
	}
	s := f.secret(t)
	if err := f.secrets.Add(s); err != nil {
		t.Fatal(err)
	}
	if got := string(f.source.Bundle()); got != wantBundle(s) {
		t.Fatalf("bundle of %d certificates, want the Secret's then the roots", strings.Count(got, "BEGIN CERTIFICATE"))
	}
	broken := s.DeepCopy()
	broken.Data[BundleKey] = []byte("not a bundle")
	if err := f.secrets.Update(broken); err != nil {
		t.Fatal(err)
	}
	if got := f.source.Bundle(); got != nil {
		t.Errorf("a broken Secret: %q", got)
	}
	if _, err := NewBundleSource(nil, operatorNS, []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n")); err == nil {
		t.Error("roots that do not parse: no error")
	}
}

// TestRunFollowsRotation runs the controller on its informer: it makes the CA, and when the
// clock reaches two thirds of the CA's life publishes the next CA in the bundle (the source tells
// of each change); a deleted Secret is made again, with a new CA.
func TestRunFollowsRotation(t *testing.T) {
	f := newFixture(t, true)
	changes := make(chan struct{}, 100)
	remove := f.source.OnBundleChange(func() { changes <- struct{}{} })
	defer remove()
	ctx := context.Background()
	var s *corev1.Secret
	waitFor(t, "the Secret and its bundle", func() bool {
		var err error
		if s, err = f.kube.CoreV1().Secrets(operatorNS).Get(ctx, SecretName, metav1.GetOptions{}); err != nil {
			return false
		}
		return string(f.source.Bundle()) == wantBundle(s)
	})
	waitFor(t, "a change told", func() bool { return len(changes) > 0 })

	// Two thirds of the CA's life: the next CA is in the bundle, the first still signs.
	first := signerOf(t, s.Data)
	waitFor(t, "the rotation timer", func() bool { return f.clock.HasWaiters() })
	f.clock.Step(renewAt(first).Sub(t0))
	waitFor(t, "the next CA published", func() bool {
		cur, err := f.kube.CoreV1().Secrets(operatorNS).Get(ctx, SecretName, metav1.GetOptions{})
		if err != nil || len(cur.Data[NextCertKey]) == 0 {
			return false
		}
		s = cur
		return string(f.source.Bundle()) == wantBundle(cur)
	})
	if !signerOf(t, s.Data).Equal(first) {
		t.Error("the signer changed before the next CA propagated")
	}
	if n := strings.Count(wantBundle(s), "BEGIN CERTIFICATE"); n != 3 {
		t.Errorf("bundle of %d certificates, want the signer, the next and the roots", n)
	}

	// The Secret deleted: a new CA, and the bundle follows.
	if err := f.kube.CoreV1().Secrets(operatorNS).Delete(ctx, SecretName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a new Secret and bundle", func() bool {
		cur, err := f.kube.CoreV1().Secrets(operatorNS).Get(ctx, SecretName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err != nil || signerOf(t, cur.Data).Equal(first) {
			return false
		}
		return string(f.source.Bundle()) == wantBundle(cur)
	})
}

func testContext(t *testing.T) context.Context {
	_, ctx := ktesting.NewTestContext(t)
	return ctx
}
