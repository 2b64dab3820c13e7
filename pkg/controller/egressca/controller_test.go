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

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	airlockfake "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/fake"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions"

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

func egressClaim(ns, name, bundle string) *airlockv1alpha1.SandboxClaim {
	return &airlockv1alpha1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Status: airlockv1alpha1.SandboxClaimStatus{Frozen: &airlockv1alpha1.FrozenSandbox{
			Egress: &airlockv1alpha1.FrozenEgress{Gateway: airlockv1alpha1.EgressGateway{CABundleConfigMap: bundle}},
		}},
	}
}

type fixture struct {
	kube       *k8sfake.Clientset
	claims     *airlockfake.Clientset
	clock      *clocktesting.FakeClock
	controller *Controller
	secrets    cache.Indexer
	configMaps cache.Indexer
	claimStore cache.Indexer
}

// newFixture builds the controller on fake clients; start runs its informers and workers, else
// the test seeds the stores and calls sync itself.
func newFixture(t *testing.T, start bool, claims ...*airlockv1alpha1.SandboxClaim) *fixture {
	t.Helper()
	f := &fixture{kube: k8sfake.NewClientset(), claims: airlockfake.NewSimpleClientset(), clock: clocktesting.NewFakeClock(t0)}
	for _, cl := range claims {
		if _, err := f.claims.AirlockV1alpha1().SandboxClaims(cl.Namespace).Create(context.Background(), cl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	secrets := NewSecretInformerFactory(f.kube, operatorNS)
	cms := NewConfigMapInformerFactory(f.kube, cmName)
	air := airlockinformers.NewSharedInformerFactory(f.claims, 0)
	inf := Informers{Secrets: secrets.Core().V1().Secrets(), ConfigMaps: cms.Core().V1().ConfigMaps(), Claims: air.Airlock().V1alpha1().SandboxClaims()}
	c, err := newControllerWithClock(f.kube, inf, Config{Namespace: operatorNS, ConfigMapName: cmName, Roots: roots, Policy: testPolicy}, f.clock, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	f.controller = c
	f.secrets, f.configMaps, f.claimStore = inf.Secrets.Informer().GetIndexer(), inf.ConfigMaps.Informer().GetIndexer(), inf.Claims.Informer().GetIndexer()
	if !start {
		t.Cleanup(c.queue.ShutDown)
		for _, cl := range claims {
			if err := f.claimStore.Add(cl); err != nil {
				t.Fatal(err)
			}
		}
		return f
	}
	ctx, cancel := context.WithCancel(testContext(t))
	done := make(chan struct{})
	secrets.Start(ctx.Done())
	cms.Start(ctx.Done())
	air.Start(ctx.Done())
	go func() {
		defer close(done)
		if err := c.Run(ctx, 2); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		secrets.Shutdown()
		cms.Shutdown()
		air.Shutdown()
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

func (f *fixture) bundleIn(ns string) (string, bool) {
	cm, err := f.kube.CoreV1().ConfigMaps(ns).Get(context.Background(), cmName, metav1.GetOptions{})
	if err != nil {
		return "", false
	}
	return cm.Data[BundleKey], true
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

// TestSyncBundle: a namespace gets the bundle while a claim frozen with this ConfigMap is in it,
// nothing while there is no CA (fail closed: no bundle without the gateway's CA), and loses it
// when no claim needs it; a ConfigMap of that name that is not ours is left alone.
func TestSyncBundle(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t, false, egressClaim("team-a", "c1", cmName), egressClaim("team-b", "c2", "their-own"), &airlockv1alpha1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team-c", Name: "c3"}})
	// No CA yet: nothing written.
	if err := f.controller.syncBundle(ctx, "team-a"); err != nil || len(f.kube.Actions()) != 0 {
		t.Fatalf("without a CA: err %v, actions %v", err, f.kube.Actions())
	}
	if _, err := f.controller.syncSecret(ctx); err != nil {
		t.Fatal(err)
	}
	s := f.secret(t)
	if err := f.secrets.Add(s); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"team-a", "team-b", "team-c"} {
		if err := f.controller.syncBundle(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	if got, ok := f.bundleIn("team-a"); !ok || got != wantBundle(s) {
		t.Fatalf("team-a: ConfigMap %v, bundle right %v", ok, got == wantBundle(s))
	}
	cm, _ := f.kube.CoreV1().ConfigMaps("team-a").Get(ctx, cmName, metav1.GetOptions{})
	if cm.Labels[LabelBundle] != "true" {
		t.Errorf("labels %v", cm.Labels)
	}
	for _, ns := range []string{"team-b", "team-c"} {
		if _, ok := f.bundleIn(ns); ok {
			t.Errorf("%s got a bundle it does not need", ns)
		}
	}

	// Someone else's ConfigMap of the name is never overwritten.
	theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-d", Name: cmName}, Data: map[string]string{BundleKey: "mine"}}
	if _, err := f.kube.CoreV1().ConfigMaps("team-d").Create(ctx, theirs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.claimStore.Add(egressClaim("team-d", "c4", cmName)); err != nil {
		t.Fatal(err)
	}
	if err := f.controller.syncBundle(ctx, "team-d"); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.bundleIn("team-d"); got != "mine" {
		t.Errorf("someone else's ConfigMap overwritten: %q", got)
	}

	// The claim gone: our ConfigMap deleted.
	if err := f.configMaps.Add(cm); err != nil {
		t.Fatal(err)
	}
	if err := f.claimStore.Delete(egressClaim("team-a", "c1", cmName)); err != nil {
		t.Fatal(err)
	}
	if err := f.controller.syncBundle(ctx, "team-a"); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.bundleIn("team-a"); ok {
		t.Error("the bundle of a namespace without claims that need it is kept")
	}
}

// TestRunRepairsAndFollowsRotation runs the controller on informers: it makes the CA and the
// bundle, repairs an edited and a deleted ConfigMap and a deleted Secret, and when the clock
// reaches two thirds of the CA's life publishes the next CA in every bundle.
func TestRunRepairsAndFollowsRotation(t *testing.T) {
	f := newFixture(t, true, egressClaim("team-a", "c1", cmName))
	ctx := context.Background()
	var s *corev1.Secret
	waitFor(t, "the Secret and the bundle", func() bool {
		var err error
		if s, err = f.kube.CoreV1().Secrets(operatorNS).Get(ctx, SecretName, metav1.GetOptions{}); err != nil {
			return false
		}
		got, ok := f.bundleIn("team-a")
		return ok && got == wantBundle(s)
	})

	cm, _ := f.kube.CoreV1().ConfigMaps("team-a").Get(ctx, cmName, metav1.GetOptions{})
	cm.Data[BundleKey] = "an attacker's CA"
	cm.ResourceVersion = "edited"
	if _, err := f.kube.CoreV1().ConfigMaps("team-a").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the edited bundle repaired", func() bool { got, _ := f.bundleIn("team-a"); return got == wantBundle(s) })

	if err := f.kube.CoreV1().ConfigMaps("team-a").Delete(ctx, cmName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted bundle made again", func() bool { got, _ := f.bundleIn("team-a"); return got == wantBundle(s) })

	// A second claim's namespace gets it too.
	if _, err := f.claims.AirlockV1alpha1().SandboxClaims("team-b").Create(ctx, egressClaim("team-b", "c2", cmName), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "team-b's bundle", func() bool { got, _ := f.bundleIn("team-b"); return got == wantBundle(s) })

	// Two thirds of the CA's life: the next CA is in every bundle, the first still signs.
	first := signerOf(t, s.Data)
	waitFor(t, "the rotation timer", func() bool { return f.clock.HasWaiters() })
	f.clock.Step(renewAt(first).Sub(t0))
	waitFor(t, "the next CA published", func() bool {
		cur, err := f.kube.CoreV1().Secrets(operatorNS).Get(ctx, SecretName, metav1.GetOptions{})
		if err != nil || len(cur.Data[NextCertKey]) == 0 {
			return false
		}
		s = cur
		a, _ := f.bundleIn("team-a")
		b, _ := f.bundleIn("team-b")
		return a == wantBundle(cur) && b == wantBundle(cur)
	})
	if !signerOf(t, s.Data).Equal(first) {
		t.Error("the signer changed before the next CA propagated")
	}
	if n := strings.Count(wantBundle(s), "BEGIN CERTIFICATE"); n != 3 {
		t.Errorf("bundle of %d certificates, want the signer, the next and the roots", n)
	}

	// The Secret deleted: a new CA, and the bundles follow.
	if err := f.kube.CoreV1().Secrets(operatorNS).Delete(ctx, SecretName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a new Secret and bundle", func() bool {
		cur, err := f.kube.CoreV1().Secrets(operatorNS).Get(ctx, SecretName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err != nil || signerOf(t, cur.Data).Equal(first) {
			return false
		}
		a, _ := f.bundleIn("team-a")
		return a == wantBundle(cur)
	})
}

func testContext(t *testing.T) context.Context {
	_, ctx := ktesting.NewTestContext(t)
	return ctx
}
