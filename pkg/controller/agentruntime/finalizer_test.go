package agentruntime

import (
	"encoding/json"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	airlockfake "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned/fake"
	airlockinformers "github.com/airlock-dev/airlock/pkg/generated/informers/externalversions"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// TestRuntimeFinalizer (issue 39): the operator puts its finalizer on every runtime, and a
// runtime being deleted keeps it (and so, through garbage collection, its claims) until every
// workspace its claims may have written has a record; then it is removed. Before, a runtime
// deleted while the operator was down took its claims with it, and their workspaces were never
// collected.
func TestRuntimeFinalizer(t *testing.T) {
	now := metav1.NewTime(t0)
	bound := func(name string) *airlockv1alpha1.SandboxClaim {
		c := claimObj(name, "agent", airlockv1alpha1.ClaimBound)
		c.Spec.RuntimeUID = "uid-agent"
		c.Spec.WorkspaceDir = "ns/sandboxes/" + name
		c.Status.Frozen = &airlockv1alpha1.FrozenSandbox{}
		c.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(runtimeObj(), airlockv1alpha1.SchemeGroupVersion.WithKind("AgentRuntime"))}
		return c
	}
	unowned := func(name string) *airlockv1alpha1.SandboxClaim {
		c := bound(name)
		c.OwnerReferences = nil
		return c
	}
	recordOf := func(c *airlockv1alpha1.SandboxClaim) any {
		return workspace.Record(c, "workspace-content", sandboxpod.JobConfig("img"), t0)
	}
	mountRole := func(name string) *airlockv1alpha1.SandboxClaim {
		c := bound(name)
		c.Spec.MountRole = "reader"
		return c
	}
	otherUID := func(name string) *airlockv1alpha1.SandboxClaim {
		c := bound(name)
		c.Spec.RuntimeUID = "uid-earlier"
		return c
	}
	tests := map[string]struct {
		finalizers  []string
		deleting    bool
		claims      []*airlockv1alpha1.SandboxClaim
		records     func(claims []*airlockv1alpha1.SandboxClaim) []any
		wantPatched []string // the finalizers patched in; nil: no patch
		wantDeleted []string // the claims the operator deletes
	}{
		"a runtime without it: added, others kept": {
			finalizers: []string{"example.com/other"}, wantPatched: []string{"example.com/other", airlockv1alpha1.FinalizerWorkspaces},
		},
		"a runtime with it: nothing": {finalizers: []string{airlockv1alpha1.FinalizerWorkspaces}, claims: []*airlockv1alpha1.SandboxClaim{bound("c1")}},
		"deleting, a claim's workspace without a record: that claim kept, the recorded one deleted, the finalizer kept": {
			finalizers: []string{airlockv1alpha1.FinalizerWorkspaces}, deleting: true,
			claims:      []*airlockv1alpha1.SandboxClaim{bound("c1"), bound("c2")},
			records:     func(c []*airlockv1alpha1.SandboxClaim) []any { return []any{recordOf(c[0])} },
			wantDeleted: []string{"c1"},
		},
		"deleting, every workspace recorded: the claims deleted by the operator, the finalizer kept until they are gone": {
			finalizers: []string{"example.com/other", airlockv1alpha1.FinalizerWorkspaces}, deleting: true,
			claims:      []*airlockv1alpha1.SandboxClaim{bound("c1"), bound("c2"), claimObj("queued", "agent", airlockv1alpha1.ClaimQueued)},
			records:     func(c []*airlockv1alpha1.SandboxClaim) []any { return []any{recordOf(c[0]), recordOf(c[1])} },
			wantDeleted: []string{"c1", "c2"},
		},
		"deleting, only claims garbage collection may delete left (queued, a mount role's, another runtime UID's): removed": {
			finalizers: []string{"example.com/other", airlockv1alpha1.FinalizerWorkspaces}, deleting: true,
			claims: []*airlockv1alpha1.SandboxClaim{
				claimObj("queued", "agent", airlockv1alpha1.ClaimQueued), mountRole("m1"), otherUID("old"),
			},
			wantPatched: []string{"example.com/other"},
		},
		"deleting, claims without the runtime's owner reference (made by hand, or orphaned): left, removed": {
			finalizers: []string{airlockv1alpha1.FinalizerWorkspaces}, deleting: true,
			claims: []*airlockv1alpha1.SandboxClaim{unowned("u1")}, wantPatched: []string{},
		},
		"deleting with --cascade=orphan, garbage collection not done yet: nothing deleted, kept": {
			finalizers: []string{metav1.FinalizerOrphanDependents, airlockv1alpha1.FinalizerWorkspaces}, deleting: true,
			claims:  []*airlockv1alpha1.SandboxClaim{bound("c1")},
			records: func(c []*airlockv1alpha1.SandboxClaim) []any { return []any{recordOf(c[0])} },
		},
		"deleting, no claims: removed": {
			finalizers: []string{airlockv1alpha1.FinalizerWorkspaces}, deleting: true, wantPatched: []string{},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			rt := runtimeObj()
			rt.Finalizers, rt.ResourceVersion = tc.finalizers, "5"
			if tc.deleting {
				rt.DeletionTimestamp = &now
			}
			objs := []runtime.Object{rt}
			for _, cl := range tc.claims {
				objs = append(objs, cl)
			}
			client := airlockfake.NewClientset(objs...)
			a := airlockinformers.NewSharedInformerFactory(client, 0).Airlock().V1alpha1()
			jobs := newJobInformer()
			c, err := newControllerWithClock(ctx, client, a.AgentRuntimes(), a.ToolRegistries(), a.SandboxClasses(), a.SandboxClaims(), jobs, clocktesting.NewFakeClock(t0))
			if err != nil {
				t.Fatal(err)
			}
			add := func(i cache.SharedIndexInformer, o any) {
				if err := i.GetIndexer().Add(o); err != nil {
					t.Fatal(err)
				}
			}
			add(a.AgentRuntimes().Informer(), rt)
			add(a.ToolRegistries().Informer(), registryObj(airlockv1alpha1.RegistrySandbox{Name: "codegen", Class: "codegen"}))
			add(a.SandboxClasses().Informer(), sandboxpodtest.Class("codegen"))
			for _, cl := range tc.claims {
				add(a.SandboxClaims().Informer(), cl)
			}
			if tc.records != nil {
				for _, j := range tc.records(tc.claims) {
					add(jobs.Informer(), j)
				}
			}
			client.ClearActions()
			if err := c.sync(ctx, cache.MetaObjectToName(rt)); err != nil {
				t.Fatal(err)
			}
			var patched, deleted []string
			var statusWrites int
			for _, act := range client.Actions() {
				switch act := act.(type) {
				case core.DeleteAction:
					if act.GetResource().Resource != "sandboxclaims" {
						t.Errorf("deleted %s %s", act.GetResource().Resource, act.GetName())
					}
					deleted = append(deleted, act.GetName())
				case core.PatchAction:
					if act.GetPatchType() != types.MergePatchType {
						t.Errorf("patch type %s", act.GetPatchType())
					}
					var p struct {
						Metadata struct {
							Finalizers      []string `json:"finalizers"`
							ResourceVersion string   `json:"resourceVersion"`
						} `json:"metadata"`
					}
					if err := json.Unmarshal(act.GetPatch(), &p); err != nil {
						t.Fatal(err)
					}
					if p.Metadata.ResourceVersion != "5" {
						t.Errorf("patch not conditional on the resourceVersion: %s", act.GetPatch())
					}
					patched = append([]string{}, p.Metadata.Finalizers...)
				case core.UpdateAction:
					if act.GetSubresource() == "status" {
						statusWrites++
					}
				}
			}
			if (patched == nil) != (tc.wantPatched == nil) || !slices.Equal(patched, tc.wantPatched) {
				t.Errorf("finalizers patched %v, want %v", patched, tc.wantPatched)
			}
			slices.Sort(deleted)
			if !slices.Equal(deleted, tc.wantDeleted) {
				t.Errorf("claims deleted %v, want %v", deleted, tc.wantDeleted)
			}
			if tc.deleting && statusWrites > 0 {
				t.Errorf("%d status writes of a runtime being deleted, want none", statusWrites)
			}
		})
	}
}
