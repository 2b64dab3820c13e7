package agentruntime

import (
	"encoding/json"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		return c
	}
	recordOf := func(c *airlockv1alpha1.SandboxClaim) any {
		return workspace.Record(c, "workspace-content", sandboxpod.JobConfig("img"), t0)
	}
	tests := map[string]struct {
		finalizers  []string
		deleting    bool
		claims      []*airlockv1alpha1.SandboxClaim
		records     func(claims []*airlockv1alpha1.SandboxClaim) []any
		wantPatched []string // the finalizers patched in; nil: no patch
	}{
		"a runtime without it: added, others kept": {
			finalizers: []string{"example.com/other"}, wantPatched: []string{"example.com/other", airlockv1alpha1.FinalizerWorkspaces},
		},
		"a runtime with it: nothing": {finalizers: []string{airlockv1alpha1.FinalizerWorkspaces}},
		"deleting, a claim's workspace without a record: kept": {
			finalizers: []string{airlockv1alpha1.FinalizerWorkspaces}, deleting: true,
			claims:  []*airlockv1alpha1.SandboxClaim{bound("c1"), bound("c2")},
			records: func(c []*airlockv1alpha1.SandboxClaim) []any { return []any{recordOf(c[0])} },
		},
		"deleting, every workspace recorded: removed": {
			finalizers: []string{"example.com/other", airlockv1alpha1.FinalizerWorkspaces}, deleting: true,
			claims:      []*airlockv1alpha1.SandboxClaim{bound("c1"), bound("c2"), claimObj("queued", "agent", airlockv1alpha1.ClaimQueued)},
			records:     func(c []*airlockv1alpha1.SandboxClaim) []any { return []any{recordOf(c[0]), recordOf(c[1])} },
			wantPatched: []string{"example.com/other"},
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
			client := airlockfake.NewClientset(rt)
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
			var patched []string
			var statusWrites int
			for _, act := range client.Actions() {
				switch act := act.(type) {
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
			if tc.deleting && statusWrites > 0 {
				t.Errorf("%d status writes of a runtime being deleted, want none", statusWrites)
			}
		})
	}
}
