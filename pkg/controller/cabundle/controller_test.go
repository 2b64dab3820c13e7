package cabundle

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	kubeinformers "k8s.io/client-go/informers"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	airlockfake "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/fake"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions"
)

var (
	alwaysReady = func() bool { return true }
	t0          = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
)

const bundleA = "-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n"
const bundleB = "-----BEGIN CERTIFICATE-----\nB\n-----END CERTIFICATE-----\n"

// fakeSource is a Source whose bundle the test sets.
type fakeSource struct {
	mu        sync.Mutex
	bundle    []byte
	listeners []func()
}

func (s *fakeSource) Bundle() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bundle
}

func (s *fakeSource) OnBundleChange(f func()) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listeners = append(s.listeners, f)
	return func() {}
}

func (s *fakeSource) set(b string) {
	s.mu.Lock()
	s.bundle = []byte(b)
	fns := s.listeners
	s.mu.Unlock()
	for _, f := range fns {
		f()
	}
}

func runtimeIn(ns, name string) *airlockv1alpha1.AgentRuntime {
	return &airlockv1alpha1.AgentRuntime{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
}

func bundleConfigMap(ns, data string, labelled bool) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName, Namespace: ns, UID: types.UID("uid-" + ns), ResourceVersion: "1"},
		Data:       map[string]string{Key: data},
	}
	if labelled {
		cm.Labels = map[string]string{LabelBundle: "true", "app.kubernetes.io/name": "airlock"}
	}
	return cm
}

type fixture struct {
	kubeClient    *k8sfake.Clientset
	airlockClient *airlockfake.Clientset
	controller    *Controller
	source        *fakeSource
	extra         *fakeSource
	runtimes      cache.Indexer
	configMaps    cache.Indexer
	kubeFactory   kubeinformers.SharedInformerFactory
	airlock       airlockinformers.SharedInformerFactory
}

// newFixture builds the controller on fake clients holding the objects; the informer stores are
// seeded with them (cached configMaps only: apiOnly ones are on the API server, not in the cache).
func newFixture(t *testing.T, runtimes []*airlockv1alpha1.AgentRuntime, cached, apiOnly []*corev1.ConfigMap, bundle string) *fixture {
	t.Helper()
	var kubeObjs, airlockObjs []runtime.Object
	for _, cm := range append(append([]*corev1.ConfigMap{}, cached...), apiOnly...) {
		kubeObjs = append(kubeObjs, cm)
	}
	for _, rt := range runtimes {
		airlockObjs = append(airlockObjs, rt)
	}
	f := &fixture{kubeClient: k8sfake.NewClientset(kubeObjs...), airlockClient: airlockfake.NewClientset(airlockObjs...), source: &fakeSource{}, extra: &fakeSource{}}
	if bundle != "" {
		f.source.bundle = []byte(bundle)
	}
	f.kubeFactory = NewConfigMapInformerFactory(f.kubeClient, ConfigMapName, LabelBundle)
	f.airlock = airlockinformers.NewSharedInformerFactory(f.airlockClient, 0)
	rtInformer := f.airlock.Airlock().V1alpha1().AgentRuntimes()
	cmInformer := f.kubeFactory.Core().V1().ConfigMaps()
	c, err := newControllerWithClock(f.kubeClient, clocktesting.NewFakeClock(t0), SandboxAPIBundle(f.source, rtInformer, cmInformer, Extra{Key: IsolationKeysKey, Source: f.extra}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.queue.ShutDown)
	f.controller = c
	f.runtimes, f.configMaps = rtInformer.Informer().GetIndexer(), cmInformer.Informer().GetIndexer()
	for _, rt := range runtimes {
		if err := f.runtimes.Add(rt); err != nil {
			t.Fatal(err)
		}
	}
	for _, cm := range cached {
		if err := f.configMaps.Add(cm); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// action is a write the controller made, compared with cmp.
type action struct {
	Verb, Namespace string
	Data            map[string]string
	Labels          map[string]string
	UID             string
}

func writes(client *k8sfake.Clientset) []action {
	var out []action
	for _, a := range client.Actions() {
		switch a := a.(type) {
		case core.CreateAction: // an UpdateAction too
			if a.GetVerb() != "create" && a.GetVerb() != "update" {
				continue
			}
			cm := a.GetObject().(*corev1.ConfigMap)
			out = append(out, action{Verb: a.GetVerb(), Namespace: a.GetNamespace(), Data: cm.Data, Labels: cm.Labels})
		case core.DeleteAction:
			uid := ""
			if p := a.GetDeleteOptions().Preconditions; p != nil && p.UID != nil {
				uid = string(*p.UID)
			}
			out = append(out, action{Verb: "delete", Namespace: a.GetNamespace(), UID: uid})
		}
	}
	return out
}

var ourLabels = map[string]string{LabelBundle: "true", "app.kubernetes.io/name": "airlock"}

func TestSync(t *testing.T) {
	tests := map[string]struct {
		runtimes []*airlockv1alpha1.AgentRuntime
		cached   []*corev1.ConfigMap
		apiOnly  []*corev1.ConfigMap
		bundle   string
		want     []action
	}{
		"a runtime's namespace gets the bundle": {
			runtimes: []*airlockv1alpha1.AgentRuntime{runtimeIn("team-a", "agent")},
			bundle:   bundleA,
			want:     []action{{Verb: "create", Namespace: "team-a", Data: map[string]string{Key: bundleA}, Labels: ourLabels}},
		},
		"a current bundle is left alone": {
			runtimes: []*airlockv1alpha1.AgentRuntime{runtimeIn("team-a", "agent"), runtimeIn("team-a", "other")},
			cached:   []*corev1.ConfigMap{bundleConfigMap("team-a", bundleA, true)},
			bundle:   bundleA,
		},
		"a rotated bundle is updated": {
			runtimes: []*airlockv1alpha1.AgentRuntime{runtimeIn("team-a", "agent")},
			cached:   []*corev1.ConfigMap{bundleConfigMap("team-a", bundleA, true)},
			bundle:   bundleB,
			want:     []action{{Verb: "update", Namespace: "team-a", Data: map[string]string{Key: bundleB}, Labels: ourLabels}},
		},
		"an edited bundle is repaired": {
			runtimes: []*airlockv1alpha1.AgentRuntime{runtimeIn("team-a", "agent")},
			cached: []*corev1.ConfigMap{func() *corev1.ConfigMap {
				cm := bundleConfigMap("team-a", bundleA, true)
				cm.Data["extra.crt"] = bundleB // someone adds a CA of theirs
				return cm
			}()},
			bundle: bundleA,
			want:   []action{{Verb: "update", Namespace: "team-a", Data: map[string]string{Key: bundleA}, Labels: ourLabels}},
		},
		"the last runtime gone: the bundle is deleted": {
			cached: []*corev1.ConfigMap{bundleConfigMap("team-a", bundleA, true)},
			bundle: bundleA,
			want:   []action{{Verb: "delete", Namespace: "team-a", UID: "uid-team-a"}},
		},
		"no bundle yet: nothing is written": {
			runtimes: []*airlockv1alpha1.AgentRuntime{runtimeIn("team-a", "agent")},
		},
		"someone else's ConfigMap of that name is never overwritten": {
			runtimes: []*airlockv1alpha1.AgentRuntime{runtimeIn("team-a", "agent")},
			apiOnly:  []*corev1.ConfigMap{bundleConfigMap("team-a", "theirs", false)},
			bundle:   bundleA,
			want:     []action{{Verb: "create", Namespace: "team-a", Data: map[string]string{Key: bundleA}, Labels: ourLabels}}, // refused: AlreadyExists
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t, tc.runtimes, tc.cached, tc.apiOnly, tc.bundle)
			f.kubeClient.ClearActions()
			if err := f.controller.sync(ctx, cache.ObjectName{Namespace: "team-a", Name: ConfigMapName}); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, writes(f.kubeClient)); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			for _, cm := range tc.apiOnly {
				got, err := f.kubeClient.CoreV1().ConfigMaps(cm.Namespace).Get(ctx, cm.Name, metav1.GetOptions{})
				if err != nil || got.Data[Key] != cm.Data[Key] {
					t.Errorf("someone else's ConfigMap: %v %v", got.Data, err)
				}
			}
		})
	}
}

// TestSyncExtras: the isolation keys are published beside the CA once they exist, and a change
// of theirs alone updates the ConfigMap; never without the CA; and while their source has none
// (its Secret does not parse), the keys published stay.
func TestSyncExtras(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t, []*airlockv1alpha1.AgentRuntime{runtimeIn("team-a", "agent")}, []*corev1.ConfigMap{bundleConfigMap("team-a", bundleA, true)}, nil, bundleA)
	key := cache.ObjectName{Namespace: "team-a", Name: ConfigMapName}
	steps := []struct {
		ca, keys string
		want     []action
	}{
		{ca: bundleA, keys: "", want: nil},
		{ca: bundleA, keys: "keys-1", want: []action{{Verb: "update", Namespace: "team-a", Data: map[string]string{Key: bundleA, IsolationKeysKey: "keys-1"}, Labels: ourLabels}}},
		{ca: bundleA, keys: "keys-2", want: []action{{Verb: "update", Namespace: "team-a", Data: map[string]string{Key: bundleA, IsolationKeysKey: "keys-2"}, Labels: ourLabels}}},
		{ca: bundleA, keys: "", want: nil}, // the keys' Secret unreadable: what was published stays
		{ca: "", keys: "keys-2", want: nil},
	}
	for i, step := range steps {
		f.source.bundle, f.extra.bundle = []byte(step.ca), []byte(step.keys)
		f.kubeClient.ClearActions()
		if err := f.controller.sync(ctx, key); err != nil {
			t.Fatal(err)
		}
		got := writes(f.kubeClient)
		if diff := cmp.Diff(step.want, got); diff != "" {
			t.Fatalf("step %d: writes (-want +got):\n%s", i, diff)
		}
		for _, w := range got {
			cm, _ := f.kubeClient.CoreV1().ConfigMaps("team-a").Get(ctx, ConfigMapName, metav1.GetOptions{})
			cm.Data = w.Data
			if err := f.configMaps.Update(cm); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestEnqueueAll: a bundle change enqueues every namespace with a runtime or a bundle ConfigMap,
// once each.
func TestEnqueueAll(t *testing.T) {
	f := newFixture(t,
		[]*airlockv1alpha1.AgentRuntime{runtimeIn("a", "x"), runtimeIn("a", "y"), runtimeIn("b", "x")},
		[]*corev1.ConfigMap{bundleConfigMap("b", bundleA, true), bundleConfigMap("c", bundleA, true)}, nil, bundleA)
	f.controller.enqueueAll(f.controller.bundles[ConfigMapName])
	got := map[string]bool{}
	for f.controller.queue.Len() > 0 {
		key, _ := f.controller.queue.Get()
		got[key.Namespace] = true
		f.controller.queue.Done(key)
	}
	if diff := cmp.Diff(map[string]bool{"a": true, "b": true, "c": true}, got); diff != "" {
		t.Errorf("enqueued (-want +got):\n%s", diff)
	}
}

// TestRunFollowsRotationAndRepairs runs the controller on started informers: it publishes the
// bundle, follows a rotation of the bundle, and puts back a ConfigMap that someone deleted. It
// waits on the ConfigMap watch for each, never on a timer.
func TestRunFollowsRotationAndRepairs(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	// The informers, started below, list the runtime from the fake API server.
	f := newFixture(t, []*airlockv1alpha1.AgentRuntime{runtimeIn("team-a", "agent")}, nil, nil, bundleA)
	w, err := f.kubeClient.CoreV1().ConfigMaps("team-a").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// The fake API server does not replay what happened between an informer's list and its
	// watch: the controller starts once the ConfigMap informer watches.
	informerWatching := make(chan struct{})
	var once sync.Once
	f.kubeClient.PrependWatchReactor("configmaps", func(core.Action) (bool, watch.Interface, error) {
		once.Do(func() { close(informerWatching) })
		return false, nil, nil
	})
	f.kubeFactory.Start(ctx.Done())
	f.airlock.Start(ctx.Done())
	select {
	case <-informerWatching:
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("the ConfigMap informer did not watch")
	}
	done := make(chan error, 1)
	go func() { done <- f.controller.Run(ctx, 1) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		f.kubeFactory.Shutdown()
		f.airlock.Shutdown()
	}()

	// next waits for the next watch event of type typ and returns its ConfigMap.
	next := func(typ watch.EventType) *corev1.ConfigMap {
		t.Helper()
		for {
			select {
			case ev := <-w.ResultChan():
				if ev.Type == typ {
					return ev.Object.(*corev1.ConfigMap)
				}
			case <-time.After(wait.ForeverTestTimeout):
				t.Fatalf("no %s event of the ConfigMap", typ)
			}
		}
	}
	if cm := next(watch.Added); cm.Data[Key] != bundleA {
		t.Fatalf("published %q, want bundle A", cm.Data[Key])
	}
	f.source.set(bundleB)
	if cm := next(watch.Modified); cm.Data[Key] != bundleB {
		t.Fatalf("after the rotation %q, want bundle B", cm.Data[Key])
	}
	if err := f.kubeClient.CoreV1().ConfigMaps("team-a").Delete(ctx, ConfigMapName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	next(watch.Deleted)
	if cm := next(watch.Added); cm.Data[Key] != bundleB || cm.Labels[LabelBundle] != "true" {
		t.Fatalf("after a deletion: %v %v, want bundle B back, labelled", cm.Data, cm.Labels)
	}
}

// TestSyncNamespaceTerminating: a namespace being deleted refuses new content; the sync ends
// there without an error (nothing to retry: its deletion ends the work), and writes nothing else.
func TestSyncNamespaceTerminating(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t, []*airlockv1alpha1.AgentRuntime{runtimeIn("team-a", "agent")}, nil, nil, bundleA)
	f.kubeClient.PrependReactor("create", "configmaps", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: 403, Reason: metav1.StatusReasonForbidden,
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}},
		}}
	})
	if err := f.controller.sync(ctx, cache.ObjectName{Namespace: "team-a", Name: ConfigMapName}); err != nil {
		t.Errorf("a terminating namespace: %v, want nil", err)
	}
}
