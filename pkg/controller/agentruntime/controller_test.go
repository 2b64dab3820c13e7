package agentruntime

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	batchinformers "k8s.io/client-go/informers/batch/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	airlockfake "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/fake"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

var (
	alwaysReady = func() bool { return true }
	t0          = time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)
)

func runtimeObj(connections ...airlockv1alpha1.Connection) *airlockv1alpha1.AgentRuntime {
	return &airlockv1alpha1.AgentRuntime{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "ns", Generation: 2, UID: "uid-agent",
			Finalizers: []string{airlockv1alpha1.FinalizerWorkspaces}},
		Spec: airlockv1alpha1.AgentRuntimeSpec{
			ServiceAccountName: "agent",
			ToolRegistryRef:    airlockv1alpha1.LocalObjectReference{Name: "tools"},
			Sandbox:            airlockv1alpha1.SandboxPolicy{Enabled: true, Connections: connections},
		},
	}
}

func registryObj(sandboxes ...airlockv1alpha1.RegistrySandbox) *airlockv1alpha1.ToolRegistry {
	return &airlockv1alpha1.ToolRegistry{
		ObjectMeta: metav1.ObjectMeta{Name: "tools", Namespace: "ns"},
		Spec:       airlockv1alpha1.ToolRegistrySpec{Sandboxes: sandboxes},
	}
}

func claimObj(name, runtime string, phase airlockv1alpha1.ClaimPhase) *airlockv1alpha1.SandboxClaim {
	return &airlockv1alpha1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec:       airlockv1alpha1.SandboxClaimSpec{RuntimeName: runtime},
		Status:     airlockv1alpha1.SandboxClaimStatus{Phase: phase},
	}
}

func TestSync(t *testing.T) {
	codegen := airlockv1alpha1.RegistrySandbox{Name: "codegen", Class: "codegen"}
	withRole := airlockv1alpha1.RegistrySandbox{Name: "repo", Class: "codegen", MountRole: "repo"}
	tests := map[string]struct {
		runtime     *airlockv1alpha1.AgentRuntime
		registry    *airlockv1alpha1.ToolRegistry
		claims      []*airlockv1alpha1.SandboxClaim
		records     []*batchv1.Job
		wantHeld    []string
		wantStatus  metav1.ConditionStatus
		wantReason  string
		wantCounts  airlockv1alpha1.ClaimCounts
		wantNoWrite bool
	}{
		"resolves and counts": {
			runtime:  runtimeObj(),
			registry: registryObj(codegen),
			claims: []*airlockv1alpha1.SandboxClaim{
				claimObj("a", "agent", ""), claimObj("b", "agent", airlockv1alpha1.ClaimBound),
				claimObj("c", "agent", airlockv1alpha1.ClaimBound), claimObj("d", "agent", airlockv1alpha1.ClaimQueued),
				claimObj("e", "other", airlockv1alpha1.ClaimBound),
			},
			wantStatus: metav1.ConditionTrue, wantReason: ReasonResolved,
			wantCounts: airlockv1alpha1.ClaimCounts{Pending: 1, Bound: 2, Queued: 1},
		},
		"stuck waits counted": {
			runtime:  runtimeObj(),
			registry: registryObj(codegen),
			claims: []*airlockv1alpha1.SandboxClaim{
				withConds(claimObj("lost-bound", "agent", airlockv1alpha1.ClaimBound), cond(airlockv1alpha1.ConditionPodLost, metav1.ConditionTrue, "NodeUnreachable")),
				withConds(claimObj("lost-reaping", "agent", airlockv1alpha1.ClaimReaping), cond(airlockv1alpha1.ConditionPodLost, metav1.ConditionTrue, "PodStuckTerminating"),
					cond(airlockv1alpha1.ConditionSyncBack, metav1.ConditionFalse, airlockv1alpha1.ReasonSyncBackFailed)),
				withConds(claimObj("recovered", "agent", airlockv1alpha1.ClaimBound), cond(airlockv1alpha1.ConditionPodLost, metav1.ConditionFalse, "NoPodLost")),
				withConds(claimObj("failing", "agent", airlockv1alpha1.ClaimReaping), cond(airlockv1alpha1.ConditionSyncBack, metav1.ConditionFalse, airlockv1alpha1.ReasonSyncBackFailed)),
				withConds(claimObj("cleanup", "agent", airlockv1alpha1.ClaimReaping), cond(airlockv1alpha1.ConditionSyncBack, metav1.ConditionFalse, airlockv1alpha1.ReasonWorkspaceCleanupFailed)),
				withConds(claimObj("gaveup", "agent", airlockv1alpha1.ClaimFailed), cond(airlockv1alpha1.ConditionSyncBack, metav1.ConditionFalse, airlockv1alpha1.ReasonSyncBackGaveUp)),
				withConds(claimObj("notstarted", "agent", airlockv1alpha1.ClaimReaping), cond(airlockv1alpha1.ConditionSyncBack, metav1.ConditionFalse, airlockv1alpha1.ReasonSyncJobNotStarted)),
				withConds(claimObj("waiting", "agent", airlockv1alpha1.ClaimReaping), cond(airlockv1alpha1.ConditionSyncBack, metav1.ConditionUnknown, "SyncBackWaiting")),
				withConds(claimObj("saved", "agent", airlockv1alpha1.ClaimReaping), cond(airlockv1alpha1.ConditionSyncBack, metav1.ConditionTrue, "SyncedBack")),
				withConds(claimObj("other-lost", "other", airlockv1alpha1.ClaimBound), cond(airlockv1alpha1.ConditionPodLost, metav1.ConditionTrue, "NodeGone")),
			},
			wantStatus: metav1.ConditionTrue, wantReason: ReasonResolved,
			wantCounts: airlockv1alpha1.ClaimCounts{Bound: 2, Reaping: 6, Failed: 1,
				Stuck: airlockv1alpha1.StuckCounts{PodLost: 2, SyncBackFailing: 4, JobNotStarted: 1}},
		},
		"held workspaces listed, oldest first": {
			runtime:  runtimeObj(),
			registry: registryObj(codegen),
			records: []*batchv1.Job{
				heldRecord("late", "uid-agent", t0.Add(time.Hour)),
				heldRecord("early", "uid-agent", t0),
				heldRecord("old-uid", "uid-before", t0), // a runtime of the name before: not this one's
				func() *batchv1.Job { // kept, not held
					j := heldRecord("kept", "uid-agent", t0)
					delete(j.Annotations, airlockv1alpha1.AnnotationHeld)
					return j
				}(),
			},
			wantHeld: []string{
				workspace.RecordName("ns/sandboxes/early") + " ns/sandboxes/early out/early",
				workspace.RecordName("ns/sandboxes/late") + " ns/sandboxes/late out/late",
			},
			wantStatus: metav1.ConditionTrue, wantReason: ReasonResolved,
		},
		"registry missing": {
			runtime:    runtimeObj(),
			wantStatus: metav1.ConditionFalse, wantReason: ReasonRegistryNotFound,
		},
		"class missing": {
			runtime:    runtimeObj(),
			registry:   registryObj(airlockv1alpha1.RegistrySandbox{Name: "x", Class: "nope"}),
			wantStatus: metav1.ConditionFalse, wantReason: ReasonClassNotFound,
		},
		"mount role without connection": {
			runtime:    runtimeObj(),
			registry:   registryObj(withRole),
			wantStatus: metav1.ConditionFalse, wantReason: ReasonMountRoleNotFound,
		},
		"mount role with connection": {
			runtime:    runtimeObj(airlockv1alpha1.Connection{Role: "repo", Path: "repos/a"}),
			registry:   registryObj(withRole),
			wantStatus: metav1.ConditionTrue, wantReason: ReasonResolved,
		},
		"status already current: no write": {
			runtime: func() *airlockv1alpha1.AgentRuntime {
				rt := runtimeObj()
				rt.Status.ObservedGeneration = 2
				rt.Status.Conditions = []metav1.Condition{{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonResolved,
					Message: `ToolRegistry "tools" and its classes resolve`, ObservedGeneration: 2, LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))}}
				return rt
			}(),
			registry:    registryObj(codegen),
			wantNoWrite: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			objs := []runtime.Object{tc.runtime}
			client := airlockfake.NewClientset(objs...)
			factory := airlockinformers.NewSharedInformerFactory(client, 0)
			a := factory.Airlock().V1alpha1()
			jobs := newJobInformer()
			c, err := newControllerWithClock(ctx, client, a.AgentRuntimes(), a.ToolRegistries(), a.SandboxClasses(), a.SandboxClaims(), jobs, clocktesting.NewFakeClock(t0))
			if err != nil {
				t.Fatal(err)
			}
			c.runtimesSynced, c.registriesSync, c.classesSynced, c.claimsSynced, c.jobsSynced = alwaysReady, alwaysReady, alwaysReady, alwaysReady, alwaysReady
			add := func(i cache.SharedIndexInformer, o any) {
				if err := i.GetIndexer().Add(o); err != nil {
					t.Fatal(err)
				}
			}
			add(a.AgentRuntimes().Informer(), tc.runtime)
			if tc.registry != nil {
				add(a.ToolRegistries().Informer(), tc.registry)
			}
			add(a.SandboxClasses().Informer(), &airlockv1alpha1.SandboxClass{ObjectMeta: metav1.ObjectMeta{Name: "codegen"}})
			for _, cl := range tc.claims {
				add(a.SandboxClaims().Informer(), cl)
			}
			for _, j := range tc.records {
				add(jobs.Informer(), j)
			}
			client.ClearActions()
			if err := c.sync(ctx, cache.MetaObjectToName(tc.runtime)); err != nil {
				t.Fatal(err)
			}
			var writes []*airlockv1alpha1.AgentRuntime
			for _, act := range client.Actions() {
				if u, ok := act.(core.UpdateAction); ok && act.GetSubresource() == "status" {
					writes = append(writes, u.GetObject().(*airlockv1alpha1.AgentRuntime))
				}
			}
			if tc.wantNoWrite {
				if len(writes) != 0 {
					t.Errorf("wrote status %+v, want no write", writes[0].Status)
				}
				return
			}
			if len(writes) != 1 {
				t.Fatalf("%d status writes, want 1", len(writes))
			}
			got := writes[0].Status
			want := metav1.Condition{Type: ConditionReady, Status: tc.wantStatus, Reason: tc.wantReason, ObservedGeneration: 2, LastTransitionTime: metav1.NewTime(t0)}
			if diff := cmp.Diff(want, got.Conditions[0], cmpIgnoreMessage); diff != "" {
				t.Errorf("Ready (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantCounts, got.Claims); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
			var held []string
			for _, h := range got.HeldWorkspaces {
				held = append(held, h.Record+" "+h.WorkspaceDir+" "+h.TargetPath)
			}
			if diff := cmp.Diff(tc.wantHeld, held); diff != "" {
				t.Errorf("held workspaces (-want +got):\n%s", diff)
			}
			if got.HeldWorkspaceCount != int32(len(tc.wantHeld)) {
				t.Errorf("heldWorkspaceCount %d, want %d", got.HeldWorkspaceCount, len(tc.wantHeld))
			}
			if got.ObservedGeneration != 2 {
				t.Errorf("observedGeneration %d, want 2", got.ObservedGeneration)
			}
		})
	}
}

// newJobInformer is a Job informer on an empty fake clientset (its store is seeded by hand).
func newJobInformer() batchinformers.JobInformer {
	return kubeinformers.NewSharedInformerFactory(k8sfake.NewClientset(), 0).Batch().V1().Jobs()
}

// heldRecord returns the record of the claim's workspace whose sync-back gave up, of the runtime
// whose UID is runtimeUID, held since at.
func heldRecord(claim, runtimeUID string, at time.Time) *batchv1.Job {
	c := claimObj(claim, "agent", airlockv1alpha1.ClaimFailed)
	c.Spec.RuntimeUID = types.UID(runtimeUID)
	c.Spec.TargetPath = "out/" + claim
	c.Spec.WorkspaceDir = "ns/sandboxes/" + claim
	job := workspace.HeldRecord(c, "workspace-content", sandboxpod.JobConfig("img"), at, "sync-back Job "+claim+"-sync failed 5 times", 3)
	return job
}

var cmpIgnoreMessage = cmp.Transformer("noMessage", func(c metav1.Condition) metav1.Condition {
	c.Message = ""
	return c
})

// recordingQueue records what is added to it, at once, instead of queueing it.
type recordingQueue struct {
	workqueue.TypedRateLimitingInterface[cache.ObjectName]
	adds   []cache.ObjectName
	afters []time.Duration
}

func (q *recordingQueue) Add(key cache.ObjectName) { q.adds = append(q.adds, key) }
func (q *recordingQueue) AddAfter(_ cache.ObjectName, d time.Duration) {
	q.afters = append(q.afters, d)
}

// TestStatusWritesCoalesced: a runtime's status is written at most once per claimBatchPeriod (a
// sync within it is put off to its end), never over a cached runtime that does not show the last
// write yet (a conflict at the API server): that sync waits, without a timer, for the update event
// of the write, which then brings it back.
func TestStatusWritesCoalesced(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	rt := runtimeObj()
	rt.ResourceVersion = "10"
	client := airlockfake.NewClientset(rt)
	factory := airlockinformers.NewSharedInformerFactory(client, 0)
	a := factory.Airlock().V1alpha1()
	clk := clocktesting.NewFakeClock(t0)
	c, err := newControllerWithClock(ctx, client, a.AgentRuntimes(), a.ToolRegistries(), a.SandboxClasses(), a.SandboxClaims(), newJobInformer(), clk)
	if err != nil {
		t.Fatal(err)
	}
	c.queue.ShutDown()
	queue := &recordingQueue{TypedRateLimitingInterface: c.queue}
	c.queue = queue
	add := func(i cache.SharedIndexInformer, o any) {
		if err := i.GetIndexer().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	add(a.AgentRuntimes().Informer(), rt)
	add(a.ToolRegistries().Informer(), registryObj(airlockv1alpha1.RegistrySandbox{Name: "codegen", Class: "codegen"}))
	add(a.SandboxClasses().Informer(), &airlockv1alpha1.SandboxClass{ObjectMeta: metav1.ObjectMeta{Name: "codegen"}})
	writes := func() int {
		n := 0
		for _, act := range client.Actions() {
			if act.GetVerb() == "update" && act.GetSubresource() == "status" {
				n++
			}
		}
		return n
	}
	key := cache.MetaObjectToName(rt)
	if err := c.sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	if n := writes(); n != 1 {
		t.Fatalf("%d status writes, want 1", n)
	}

	// A claim changes a moment later: not written again within the period, looked at after it.
	add(a.SandboxClaims().Informer(), claimObj("a", "agent", airlockv1alpha1.ClaimBound))
	clk.Step(claimBatchPeriod / 2)
	if err := c.sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	if n := writes(); n != 1 {
		t.Errorf("%d status writes within the period, want 1", n)
	}
	if len(queue.afters) != 1 || queue.afters[0] != claimBatchPeriod/2 {
		t.Errorf("put off by %v, want once by the rest of the period (%v)", queue.afters, claimBatchPeriod/2)
	}
	// After the period, but the cache does not show the first write yet: still not written.
	clk.Step(claimBatchPeriod)
	if err := c.sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	if n := writes(); n != 1 {
		t.Errorf("%d status writes over a cache without the last write, want 1", n)
	}
	if len(queue.afters) != 1 || len(queue.adds) != 0 {
		t.Errorf("after a sync over a cache without the last write: AddAfter %v, Add %v; want no timer, the update event instead", queue.afters, queue.adds)
	}
	// The cache shows the write (a status-only update: not enqueued by the handler); then the
	// claim's change is written.
	written, err := client.AirlockV1alpha1().AgentRuntimes("ns").Get(ctx, "agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	written.ResourceVersion = "11"
	stale, err := a.AgentRuntimes().Lister().AgentRuntimes("ns").Get("agent")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.AgentRuntimes().Informer().GetIndexer().Update(written); err != nil {
		t.Fatal(err)
	}
	c.updateRuntime(stale, written)
	if len(queue.adds) != 1 || queue.adds[0] != key {
		t.Errorf("the update event of the write enqueued %v, want [%v]", queue.adds, key)
	}
	c.updateRuntime(stale, written) // seen once: not enqueued again
	if len(queue.adds) != 1 {
		t.Errorf("enqueued %d times by the same write's events, want once", len(queue.adds))
	}
	if err := c.sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	if n := writes(); n != 2 {
		t.Errorf("%d status writes, want 2 once the cache shows the first", n)
	}
}

// TestNotOnlyStatus: the runtime handler ignores a status-only change (this controller's own
// write) and enqueues a change of the spec, labels, deletion or finalizers.
func TestNotOnlyStatus(t *testing.T) {
	old := runtimeObj()
	old.ResourceVersion = "1"
	for name, tc := range map[string]struct {
		change func(*airlockv1alpha1.AgentRuntime)
		want   bool
	}{
		"status only": {change: func(rt *airlockv1alpha1.AgentRuntime) { rt.Status.Claims.Bound = 3 }},
		"spec":        {change: func(rt *airlockv1alpha1.AgentRuntime) { rt.Spec.Sandbox.Enabled = false; rt.Generation++ }, want: true},
		"labels":      {change: func(rt *airlockv1alpha1.AgentRuntime) { rt.Labels = map[string]string{"a": "b"} }, want: true},
		"deletion": {change: func(rt *airlockv1alpha1.AgentRuntime) {
			rt.DeletionTimestamp = &metav1.Time{Time: t0}
		}, want: true},
		// garbage collection's orphan finalizer removed once it has orphaned the claims
		"finalizers": {change: func(rt *airlockv1alpha1.AgentRuntime) { rt.Finalizers = nil }, want: true},
	} {
		cur := old.DeepCopy()
		cur.ResourceVersion = "2"
		tc.change(cur)
		if got := notOnlyStatus(old, cur); got != tc.want {
			t.Errorf("%s: notOnlyStatus %v, want %v", name, got, tc.want)
		}
	}
}

func withConds(c *airlockv1alpha1.SandboxClaim, conds ...metav1.Condition) *airlockv1alpha1.SandboxClaim {
	c.Status.Conditions = append(c.Status.Conditions, conds...)
	return c
}

func cond(condType string, status metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: condType, Status: status, Reason: reason, LastTransitionTime: metav1.NewTime(t0)}
}
