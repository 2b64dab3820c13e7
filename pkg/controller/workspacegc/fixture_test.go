package workspacegc

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/controller/controllertest"
	airlockfake "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/fake"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

const (
	testNamespace = sandboxpodtest.Namespace
	testSyncImage = "ghcr.io/airlock-dev/airlock:test"
)

var (
	alwaysReady = func() bool { return true }
	// t0 is the fixed start of every test's fake clock.
	t0 = sandboxpodtest.T0
)

// fixture holds the fake clients, the objects the caches and clients start with, and the clock.
type fixture struct {
	t *testing.T

	kubeClient    *k8sfake.Clientset
	airlockClient *airlockfake.Clientset
	clock         *clocktesting.FakeClock
	recorder      *record.FakeRecorder

	claims   []*airlockv1alpha1.SandboxClaim
	runtimes []*airlockv1alpha1.AgentRuntime
	classes  []*airlockv1alpha1.SandboxClass
	jobs     []*batchv1.Job
	pods     []*corev1.Pod

	// log is both clients' actions, in order; logMu guards it.
	log   []core.Action
	logMu sync.Mutex
}

// newFixture is a fixture with the runtime "agent" and the class "codegen".
func newFixture(t *testing.T) *fixture {
	return &fixture{
		t: t, clock: clocktesting.NewFakeClock(t0),
		runtimes: []*airlockv1alpha1.AgentRuntime{newRuntime("agent")},
		classes:  []*airlockv1alpha1.SandboxClass{sandboxpodtest.Class("codegen")},
	}
}

func (f *fixture) newController(ctx context.Context) *Controller {
	f.t.Helper()
	var kubeObjects, airlockObjects []runtime.Object
	for _, o := range f.claims {
		airlockObjects = append(airlockObjects, o)
	}
	for _, o := range f.runtimes {
		airlockObjects = append(airlockObjects, o)
	}
	for _, o := range f.classes {
		airlockObjects = append(airlockObjects, o)
	}
	for _, o := range f.jobs {
		kubeObjects = append(kubeObjects, o)
	}
	for _, o := range f.pods {
		kubeObjects = append(kubeObjects, o)
	}
	f.kubeClient = k8sfake.NewClientset(kubeObjects...)
	f.airlockClient = airlockfake.NewClientset(airlockObjects...)
	controllertest.Record(&f.logMu, &f.log, f.kubeClient, f.airlockClient)

	ai := airlockinformers.NewSharedInformerFactory(f.airlockClient, 0)
	ki := kubeinformers.NewSharedInformerFactory(f.kubeClient, 0)
	airlock := ai.Airlock().V1alpha1()
	informers := Informers{
		Jobs:     ki.Batch().V1().Jobs(),
		Pods:     ki.Core().V1().Pods(),
		Claims:   airlock.SandboxClaims(),
		Runtimes: airlock.AgentRuntimes(),
		Classes:  airlock.SandboxClasses(),
	}
	c, err := newControllerWithClock(ctx, f.kubeClient, f.airlockClient, informers, testSyncImage, f.clock)
	if err != nil {
		f.t.Fatal(err)
	}
	c.jobsSynced, c.podsSynced, c.claimsSynced, c.runtimesSynced, c.classesSynced = alwaysReady, alwaysReady, alwaysReady, alwaysReady, alwaysReady
	f.recorder = record.NewFakeRecorder(100)
	c.recorder = f.recorder

	add := func(informer cache.SharedIndexInformer, obj any) {
		if err := informer.GetIndexer().Add(obj); err != nil {
			f.t.Fatal(err)
		}
	}
	for _, o := range f.claims {
		add(informers.Claims.Informer(), o)
	}
	for _, o := range f.runtimes {
		add(informers.Runtimes.Informer(), o)
	}
	for _, o := range f.classes {
		add(informers.Classes.Informer(), o)
	}
	for _, o := range f.jobs {
		add(informers.Jobs.Informer(), o)
	}
	for _, o := range f.pods {
		add(informers.Pods.Informer(), o)
	}
	return c
}

// actions returns the clients' actions, without list and watch, as "verb resource[/sub] name".
func (f *fixture) actions() []string {
	return controllertest.Actions(f.log)
}

func checkActions(t *testing.T, f *fixture, want []string) {
	t.Helper()
	if diff := cmp.Diff(want, f.actions()); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
}

func checkRequeue(t *testing.T, got *time.Duration, want *time.Duration) {
	t.Helper()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("requeueAfter (-want +got):\n%s", diff)
	}
}

// writtenJob returns the last Job the clients created or updated.
func (f *fixture) writtenJob() *batchv1.Job {
	f.t.Helper()
	var obj runtime.Object
	for _, a := range f.log {
		if a.GetResource().Resource != "jobs" {
			continue
		}
		switch a := a.(type) {
		case core.CreateAction:
			obj = a.GetObject()
		case core.UpdateAction:
			obj = a.GetObject()
		}
	}
	if obj == nil {
		f.t.Fatal("no Job was written")
	}
	return obj.(*batchv1.Job)
}

func newRuntime(name string) *airlockv1alpha1.AgentRuntime {
	return &airlockv1alpha1.AgentRuntime{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace, UID: types.UID("uid-rt-" + name)},
		Spec: airlockv1alpha1.AgentRuntimeSpec{
			ServiceAccountName: name,
			ToolRegistryRef:    airlockv1alpha1.LocalObjectReference{Name: "tools"},
			Sandbox:            airlockv1alpha1.SandboxPolicy{Enabled: true, MaxConcurrent: 5, MaxPerSession: 3},
		},
	}
}

// newClaim returns a claim of runtime "agent" in the given phase, created at created, with the
// record of the fixture's class and registry.
func newClaim(name string, phase airlockv1alpha1.ClaimPhase, created time.Time) *airlockv1alpha1.SandboxClaim {
	c := sandboxpodtest.Claim(name, "s-"+name, phase, created)
	c.Status.Frozen = sandboxpod.Freeze(sandboxpodtest.Class("codegen"), &sandboxpodtest.Registry("tools", "").Spec.Sandboxes[0])
	return c
}

// waiting returns a Binding claim of the runtime whose UID is runtimeUID that waits for the
// collection of its workspace's record, as the claim controller writes it.
func waiting(name, runtimeUID string) *airlockv1alpha1.SandboxClaim {
	c := newClaim(name, airlockv1alpha1.ClaimBinding, t0)
	c.Spec.RuntimeUID = types.UID(runtimeUID)
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse,
		Reason: airlockv1alpha1.ReasonWaitingForWorkspaceCollection, Message: "waiting", LastTransitionTime: metav1.NewTime(t0)})
	return c
}

// claimDir is the per-claim workspace of the runtime "agent"'s claim named name.
func claimDir(name string) string {
	return testNamespace + "/sandboxes/" + workspace.ClaimDirName(name, "uid-rt-agent")
}

// keptRecord returns the record of claim's workspace, kept at keptAt by the claim named keptBy
// of the runtime with that UID.
func keptRecord(claim *airlockv1alpha1.SandboxClaim, keptBy, runtimeUID string, keptAt time.Time) *batchv1.Job {
	kept := claim.DeepCopy()
	kept.Name, kept.Spec.RuntimeUID = keptBy, types.UID(runtimeUID)
	job := workspace.Record(kept, "workspace-content", sandboxpod.JobConfig(testSyncImage), keptAt)
	job.UID, job.ResourceVersion = "uid-record", "7"
	job.CreationTimestamp = metav1.NewTime(keptAt)
	return job
}

// claimPod returns a sandbox pod of the claim (what holds its kept workspace back).
func claimPod(claim *airlockv1alpha1.SandboxClaim) *corev1.Pod {
	return sandboxpod.ClaimPod(claim, claim.Status.Frozen)
}
