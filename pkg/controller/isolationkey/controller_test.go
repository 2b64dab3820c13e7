package isolationkey

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/attestation"
	airlockfake "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/fake"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions"
)

const operatorNS = "airlock-system"

type fixture struct {
	kube       *k8sfake.Clientset
	airlock    *airlockfake.Clientset
	clock      *clocktesting.FakeClock
	controller *Controller
	keys       *Keys
	secrets    cache.Indexer
	claims     cache.Indexer
	// startInformers starts the informers without the workers (a fixture built without start).
	startInformers func(t *testing.T)
}

// newFixture builds the controller and the keys on kube (a fake clientset: several fixtures
// may share one, as replicas share the API server); start runs the informers and the workers,
// else the test seeds the stores and calls sync itself.
func newFixture(t *testing.T, kube *k8sfake.Clientset, start bool) *fixture {
	t.Helper()
	f := &fixture{kube: kube, airlock: airlockfake.NewClientset(), clock: clocktesting.NewFakeClock(t0)}
	factory := NewSecretInformerFactory(f.kube, operatorNS)
	secrets := factory.Core().V1().Secrets()
	airlockFactory := airlockinformers.NewSharedInformerFactory(f.airlock, 0)
	claims := airlockFactory.Airlock().V1alpha1().SandboxClaims()
	c, err := newControllerWithClock(f.kube, operatorNS, secrets, claims, testPolicy, f.clock, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	f.controller, f.keys = c, NewKeys(secrets, operatorNS)
	f.secrets, f.claims = secrets.Informer().GetIndexer(), claims.Informer().GetIndexer()
	if !start {
		t.Cleanup(c.queue.ShutDown)
		f.startInformers = func(t *testing.T) {
			ctx, cancel := context.WithCancel(testContext(t))
			factory.Start(ctx.Done())
			airlockFactory.Start(ctx.Done())
			t.Cleanup(func() {
				cancel()
				factory.Shutdown()
				airlockFactory.Shutdown()
			})
			factory.WaitForCacheSync(ctx.Done())
			airlockFactory.WaitForCacheSync(ctx.Done())
		}
		return f
	}
	ctx, cancel := context.WithCancel(testContext(t))
	done := make(chan struct{})
	factory.Start(ctx.Done())
	airlockFactory.Start(ctx.Done())
	go func() {
		defer close(done)
		if err := c.Run(ctx, 1); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		factory.Shutdown()
		airlockFactory.Shutdown()
	})
	return f
}

func testContext(t *testing.T) context.Context {
	_, ctx := ktesting.NewTestContext(t)
	return ctx
}

// secret is the Secret as the API server has it.
func (f *fixture) secret(t *testing.T) *corev1.Secret {
	t.Helper()
	s, err := f.kube.CoreV1().Secrets(operatorNS).Get(context.Background(), SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// deliver puts the API server's Secret into the informer's store, as its watch would.
func (f *fixture) deliver(t *testing.T) *document {
	t.Helper()
	s := f.secret(t)
	if err := f.secrets.Update(s); err != nil {
		t.Fatal(err)
	}
	d, err := decode(s.Data[KeysKey])
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// sync syncs the Secret as a worker would, and returns the requeue.
func (f *fixture) sync(t *testing.T) time.Duration {
	t.Helper()
	next, err := f.controller.sync(testContext(t), f.controller.secretKey())
	if err != nil {
		t.Fatal(err)
	}
	if next == nil {
		t.Fatal("sync said nothing of when to look again")
	}
	return *next
}

func writes(kube *k8sfake.Clientset) []string {
	var out []string
	for _, a := range kube.Actions() {
		if v := a.GetVerb(); v == "create" || v == "update" || v == "delete" || v == "patch" {
			out = append(out, v)
		}
	}
	return out
}

// statement signs a statement of claim name with the keys' signing key.
func statement(t *testing.T, keys *Keys, name string) *attestation.Attestation {
	t.Helper()
	key, err := keys.SigningKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ev := []byte(`{"kernelRelease":"4.4.0"}`)
	a, err := attestation.Sign(&attestation.Statement{
		Version: attestation.Version, Namespace: "team-a", Claim: name, ClaimUID: "uid-" + name, Pod: name, PodUID: "pod-" + name,
		Node: "node-1", NodeKernel: "6.18.0", Kernel: "Dedicated", RecordDigest: attestation.Digest([]byte("{}")),
		TokenHash: attestation.TokenHash("token-" + name), EvidenceDigest: attestation.Digest(ev), Evidence: ev, IssuedAt: t0,
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// verify checks a against the keys' published bundle, as a runtime does.
func verify(keys *Keys, a *attestation.Attestation, name string) error {
	pub, err := attestation.ParsePublicKeys(keys.Bundle())
	if err != nil {
		return err
	}
	_, err = attestation.Verify(a, pub, attestation.Expect{Token: "token-" + name, Namespace: "team-a", Claim: name})
	return err
}

// claimSigned is claim name of team-a whose status carries a.
func claimSigned(name string, a *attestation.Attestation) *airlockv1alpha1.SandboxClaim {
	return &airlockv1alpha1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, UID: types.UID("uid-" + name)},
		Status: airlockv1alpha1.SandboxClaimStatus{Phase: airlockv1alpha1.ClaimBound, Isolation: &airlockv1alpha1.ClaimIsolation{
			Kernel:      "Dedicated",
			Attestation: &airlockv1alpha1.IsolationAttestation{Statement: a.Statement, Signature: a.Signature, KeyID: a.KeyID},
		}},
	}
}

// TestSyncCreatesOnceUnderConcurrentStarts: replicas that find the Secret missing at once all try
// to create it; one does, the others take AlreadyExists without an error and without writing
// again, and once their caches show the Secret every one signs with the same key.
func TestSyncCreatesOnceUnderConcurrentStarts(t *testing.T) {
	kube := k8sfake.NewClientset()
	replicas := []*fixture{newFixture(t, kube, false), newFixture(t, kube, false), newFixture(t, kube, false)}
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, len(replicas))
	for i, f := range replicas {
		wg.Go(func() {
			<-start
			_, errs[i] = f.controller.sync(testContext(t), f.controller.secretKey())
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("a replica's sync failed: %v", err)
	}
	secrets, err := kube.CoreV1().Secrets(operatorNS).List(context.Background(), metav1.ListOptions{})
	if err != nil || len(secrets.Items) != 1 {
		t.Fatalf("%d Secrets, %v", len(secrets.Items), err)
	}
	created := replicas[0].secret(t)
	before := len(writes(kube))
	var want string
	for i, f := range replicas {
		f.deliver(t)
		f.sync(t)
		key, err := f.keys.SigningKey(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		id := attestation.KeyID(key.Public().(ed25519.PublicKey))
		if i == 0 {
			want = id
		} else if id != want {
			t.Errorf("replica %d signs with key %s, replica 0 with %s", i, id, want)
		}
	}
	if n := len(writes(kube)) - before; n != 0 {
		t.Errorf("%d writes once every replica saw the Secret, want none", n)
	}
	if got := replicas[0].secret(t); got.ResourceVersion != created.ResourceVersion {
		t.Error("the Secret was written after it was created")
	}
}

// TestSyncRotatesAtTheScheduledTime: each sync says when to look again; a sync a second before
// that time writes nothing, one at it rotates: the next key published at the rotation, signing
// at the end of the propagation.
func TestSyncRotatesAtTheScheduledTime(t *testing.T) {
	f := newFixture(t, k8sfake.NewClientset(), false)
	if next := f.sync(t); next != testPolicy.Rotation {
		t.Fatalf("after making the key: look again in %v, want the rotation %v", next, testPolicy.Rotation)
	}
	first := f.deliver(t)
	before := len(writes(f.kube))
	f.clock.Step(testPolicy.Rotation - time.Second)
	if next := f.sync(t); next != time.Second || len(writes(f.kube)) != before {
		t.Fatalf("a second before the rotation: %v more writes, look again in %v", writes(f.kube)[before:], next)
	}
	f.clock.Step(time.Second)
	if next := f.sync(t); next != testPolicy.Propagation {
		t.Fatalf("at the rotation: look again in %v, want the propagation %v", next, testPolicy.Propagation)
	}
	d := f.deliver(t)
	if d.Next == nil || idOf(d.Signing) != idOf(first.Signing) || !d.Next.CreatedAt.Equal(t0.Add(testPolicy.Rotation)) {
		t.Fatalf("at the rotation: %+v", d)
	}
	f.clock.Step(testPolicy.Propagation - time.Second)
	before = len(writes(f.kube))
	if f.sync(t); len(writes(f.kube)) != before {
		t.Fatal("the next key signs before its propagation ended")
	}
	f.clock.Step(time.Second)
	f.sync(t)
	if d = f.deliver(t); d.Next != nil || idOf(d.Signing) == idOf(first.Signing) || len(d.Retired) != 1 || d.Retired[0].KeyID != idOf(first.Signing) {
		t.Fatalf("at the propagation's end: %+v", d)
	}
}

// TestSyncRetiresAKeyOnlyWhenNoClaimNamesIt: after a rotation, new statements are signed with the
// new key and the old ones still verify; the retired key stays published past its propagation
// while a claim's statement names it, and leaves once none does: the old statement then no
// longer verifies.
func TestSyncRetiresAKeyOnlyWhenNoClaimNamesIt(t *testing.T) {
	f := newFixture(t, k8sfake.NewClientset(), false)
	f.sync(t)
	f.deliver(t)
	old := statement(t, f.keys, "old")
	if err := f.claims.Add(claimSigned("old", old)); err != nil {
		t.Fatal(err)
	}
	f.clock.Step(testPolicy.Rotation)
	f.sync(t)
	f.deliver(t)
	if a := statement(t, f.keys, "between"); a.KeyID != old.KeyID {
		t.Fatal("the next key signs before its propagation")
	}
	f.clock.Step(testPolicy.Propagation)
	f.sync(t)
	d := f.deliver(t)
	cur := statement(t, f.keys, "new")
	if cur.KeyID == old.KeyID || cur.KeyID != idOf(d.Signing) {
		t.Fatalf("after the rotation the statement is signed by %s, want the new key %s", cur.KeyID, idOf(d.Signing))
	}
	for name, a := range map[string]*attestation.Attestation{"old": old, "new": cur} {
		if err := verify(f.keys, a, name); err != nil {
			t.Errorf("after the rotation the %s statement: %v", name, err)
		}
	}
	// Long past the propagation: the claim still names the retired key.
	f.clock.Step(testPolicy.Rotation / 2)
	before := len(writes(f.kube))
	f.sync(t)
	if len(writes(f.kube)) != before || verify(f.keys, old, "old") != nil {
		t.Fatal("the retired key left while a claim's statement names it")
	}
	// The claim gone: the key leaves.
	if err := f.claims.Delete(claimSigned("old", old)); err != nil {
		t.Fatal(err)
	}
	f.sync(t)
	f.deliver(t)
	if err := verify(f.keys, old, "old"); err == nil || !strings.Contains(err.Error(), "not among the 1 published") {
		t.Errorf("the old statement once its key left: %v", err)
	}
	if err := verify(f.keys, cur, "new"); err != nil {
		t.Errorf("the new statement: %v", err)
	}
}

// TestSyncRefusesATamperedSecret: a Secret whose keys do not parse is an error that says so and
// what to do; it is not replaced (its retired keys would be lost), nothing signs with it, and it
// publishes nothing (the distributor keeps the bundle it published).
func TestSyncRefusesATamperedSecret(t *testing.T) {
	f := newFixture(t, k8sfake.NewClientset(), false)
	f.sync(t)
	f.deliver(t)
	f.clock.Step(testPolicy.Rotation)
	f.sync(t)
	f.deliver(t)
	f.clock.Step(testPolicy.Propagation)
	f.sync(t)
	good := f.secret(t)
	tampered := good.DeepCopy()
	tampered.Data[KeysKey] = mutate(t, good.Data[KeysKey], func(d *document) { d.Signing.Seed = d.Signing.Seed[1:] })
	tampered, err := f.kube.CoreV1().Secrets(operatorNS).Update(context.Background(), tampered, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.secrets.Update(tampered); err != nil {
		t.Fatal(err)
	}
	before := len(writes(f.kube))
	f.clock.Step(testPolicy.Rotation) // due for everything
	_, err = f.controller.sync(testContext(t), f.controller.secretKey())
	if !errors.Is(err, ErrUnreadable) || !strings.Contains(err.Error(), "signing key's seed has 31 bytes") || !strings.Contains(err.Error(), "until a person repairs it") {
		t.Fatalf("sync of a tampered Secret: %v", err)
	}
	if n := len(writes(f.kube)) - before; n != 0 {
		t.Fatalf("%d writes to a tampered Secret", n)
	}
	if got := f.secret(t); string(got.Data[KeysKey]) != string(tampered.Data[KeysKey]) {
		t.Fatal("the tampered Secret was replaced")
	}
	if _, err := f.keys.SigningKey(context.Background()); !errors.Is(err, ErrUnreadable) || !strings.Contains(err.Error(), SecretName) {
		t.Errorf("signing with a tampered Secret: %v", err)
	}
	if b := f.keys.Bundle(); b != nil {
		t.Errorf("the bundle of a tampered Secret: %q", b)
	}
}

// TestKeysWithoutASecret: before the Secret exists nothing signs and nothing is published.
func TestKeysWithoutASecret(t *testing.T) {
	f := newFixture(t, k8sfake.NewClientset(), false)
	if _, err := f.keys.SigningKey(context.Background()); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("SigningKey without a Secret: %v", err)
	}
	if b := f.keys.Bundle(); b != nil {
		t.Errorf("Bundle without a Secret: %q", b)
	}
}

// TestClaimEventsEnqueue: a claim whose statement stops naming a key (signed anew, or deleted)
// enqueues the Secret, so that a retired key no claim names leaves without waiting for a timer;
// a new claim, or an update that keeps the key, does not.
func TestClaimEventsEnqueue(t *testing.T) {
	f := newFixture(t, k8sfake.NewClientset(), false)
	f.startInformers(t)
	signed := func(seed byte, label string) *airlockv1alpha1.SandboxClaim {
		ev := []byte("{}")
		k := ed25519.NewKeyFromSeed(append(make([]byte, ed25519.SeedSize-1), seed))
		a, err := attestation.Sign(&attestation.Statement{Version: attestation.Version, EvidenceDigest: attestation.Digest(ev), Evidence: ev}, k)
		if err != nil {
			t.Fatal(err)
		}
		c := claimSigned("c", a)
		c.Labels = map[string]string{"step": label}
		return c
	}
	gvr := airlockv1alpha1.SchemeGroupVersion.WithResource("sandboxclaims")
	steps := []struct {
		name  string
		write func() error
		// label is what the cache shows of the claim once it has the write; "" for none (deleted).
		label string
		want  int
	}{
		{name: "a new claim", write: func() error { return f.airlock.Tracker().Add(signed(1, "new")) }, label: "new"},
		{name: "an update keeping the key", write: func() error { return f.airlock.Tracker().Update(gvr, signed(1, "kept"), "team-a") }, label: "kept"},
		{name: "a statement signed anew", write: func() error { return f.airlock.Tracker().Update(gvr, signed(2, "resigned"), "team-a") }, label: "resigned", want: 1},
		{name: "a deletion", write: func() error { return f.airlock.Tracker().Delete(gvr, "team-a", "c") }, want: 1},
	}
	for _, step := range steps {
		if err := step.write(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, step.name+" in the cache", func() bool {
			obj, ok, _ := f.claims.GetByKey("team-a/c")
			if step.label == "" {
				return !ok
			}
			return ok && obj.(*airlockv1alpha1.SandboxClaim).Labels["step"] == step.label
		})
		// The handler runs after the cache has the write, in a goroutine of its own: wait for
		// the key, or see that none comes for a while.
		if step.want > 0 {
			waitFor(t, step.name+" enqueued", func() bool { return f.controller.queue.Len() == step.want })
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			err := wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(context.Context) (bool, error) { return f.controller.queue.Len() > 0, nil })
			cancel()
			if err == nil {
				t.Fatalf("%s: the Secret was enqueued", step.name)
			}
		}
		for f.controller.queue.Len() > 0 {
			k, _ := f.controller.queue.Get()
			f.controller.queue.Done(k)
		}
	}
}

// TestRunFollowsRotation runs the controller on its informers: it makes the key, rotates it when
// the clock passes the rotation and the propagation (its own timers: no event comes), keeps the
// retired key published while a claim names it, and drops it on the claim's deletion (an event).
// The published bundle never holds private material.
func TestRunFollowsRotation(t *testing.T) {
	f := newFixture(t, k8sfake.NewClientset(), true)
	ctx := context.Background()
	var d *document
	current := func() bool {
		s, err := f.kube.CoreV1().Secrets(operatorNS).Get(ctx, SecretName, metav1.GetOptions{})
		if err != nil {
			return false
		}
		if d, err = decode(s.Data[KeysKey]); err != nil {
			return false
		}
		// The keys' cache shows it too.
		want, err := attestation.MarshalPublicKeys(d.publicKeys()...)
		return err == nil && string(f.keys.Bundle()) == string(want)
	}
	waitFor(t, "the Secret", current)
	first := idOf(d.Signing)
	old := statement(t, f.keys, "old")
	if err := f.airlock.Tracker().Add(claimSigned("old", old)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the claim in the cache", func() bool { ids, _ := f.claims.IndexKeys(keyIDIndex, first); return len(ids) == 1 })

	// The clock moves a day at a time until the next key signs.
	stepUntil(t, f, "the rotation", func() bool { return current() && d.Next == nil && idOf(d.Signing) != first })
	if len(d.Retired) != 1 || d.Retired[0].KeyID != first {
		t.Fatalf("after the rotation: retired %+v", d.Retired)
	}
	cur := statement(t, f.keys, "new")
	if cur.KeyID == first || verify(f.keys, old, "old") != nil || verify(f.keys, cur, "new") != nil {
		t.Fatalf("after the rotation: signed by %s (the first key %s); old %v, new %v", cur.KeyID, first, verify(f.keys, old, "old"), verify(f.keys, cur, "new"))
	}
	checkNoPrivateMaterial(t, f.keys.Bundle(), d)

	// Long past the propagation (short of the next rotation), the claim still names the key.
	f.clock.Step(testPolicy.Rotation / 2)
	if err := verify(f.keys, old, "old"); err != nil {
		t.Fatalf("the retired key left while a claim names it: %v", err)
	}
	if err := f.airlock.Tracker().Delete(airlockv1alpha1.SchemeGroupVersion.WithResource("sandboxclaims"), "team-a", "old"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the retired key to leave", func() bool { return current() && len(d.Retired) == 0 && verify(f.keys, old, "old") != nil })
	if err := verify(f.keys, cur, "new"); err != nil {
		t.Fatalf("the current statement: %v", err)
	}
}

// waitFor waits until cond holds (the controller runs on informers' events and its queue's
// timers).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait.ForeverTestTimeout)
	defer cancel()
	if err := wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// stepUntil moves the fake clock a day at a time, giving the controller a moment after each
// step, until cond holds.
func stepUntil(t *testing.T, f *fixture, what string, cond func() bool) {
	t.Helper()
	limit := testPolicy.Rotation + 4*testPolicy.Propagation
	for stepped := time.Duration(0); stepped <= limit; stepped += 24 * time.Hour {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		err := wait.PollUntilContextCancel(ctx, 2*time.Millisecond, true, func(context.Context) (bool, error) { return cond(), nil })
		cancel()
		if err == nil {
			return
		}
		f.clock.Step(24 * time.Hour)
	}
	t.Fatalf("%s did not happen in %v of the fake clock", what, limit)
}
