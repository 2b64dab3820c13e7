package manifests

import (
	"fmt"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

const workspacesPolicyFile = "rbac/admission_policy_workspaces.yaml"

// workspacesPolicy is airlock-workspaces-recorded, compiled as the API server declares its
// variables (namespaceObject included).
type workspacesPolicy struct {
	spec        admissionregistrationv1.ValidatingAdmissionPolicySpec
	conditions  []cel.Program
	validations []cel.Program
}

func loadWorkspacesPolicy(t *testing.T) *workspacesPolicy {
	t.Helper()
	docs := documents(t)
	policies := decodeAll[admissionregistrationv1.ValidatingAdmissionPolicy](t, docs, "ValidatingAdmissionPolicy")
	bindings := decodeAll[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, docs, "ValidatingAdmissionPolicyBinding")
	policy, binding := policies[workspacesPolicyFile], bindings[workspacesPolicyFile]
	if policy == nil || binding == nil {
		t.Fatalf("want the policy and its binding in %s", workspacesPolicyFile)
	}
	if binding.Spec.PolicyName != policy.Name || len(binding.Spec.ValidationActions) != 1 || binding.Spec.ValidationActions[0] != admissionregistrationv1.Deny {
		t.Fatalf("binding %+v: want Deny for %s", binding.Spec, policy.Name)
	}
	if policy.Spec.FailurePolicy == nil || *policy.Spec.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("failurePolicy %v, want Fail: a claim is kept rather than its workspace lost", policy.Spec.FailurePolicy)
	}
	env, err := cel.NewEnv(
		cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType),
		cel.Variable("request", cel.DynType), cel.Variable("namespaceObject", cel.DynType),
		ext.Strings(ext.StringsVersion(2)), cel.OptionalTypes(),
	)
	if err != nil {
		t.Fatal(err)
	}
	prog := func(expr string) cel.Program {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("%s: %v", expr, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		return prg
	}
	p := &workspacesPolicy{spec: policy.Spec}
	for _, c := range policy.Spec.MatchConditions {
		p.conditions = append(p.conditions, prog(c.Expression))
	}
	for _, v := range policy.Spec.Validations {
		p.validations = append(p.validations, prog(v.Expression))
	}
	return p
}

// refuses says whether the API server refuses user's deletion of claim (in a namespace being
// deleted or not), as the policy says: it applies (a claim's DELETE, by the garbage collector)
// and a validation is false or cannot be evaluated.
func (p *workspacesPolicy) refuses(t *testing.T, user string, claim *airlockv1alpha1.SandboxClaim, nsDeleting bool) bool {
	t.Helper()
	matched := false
	for _, r := range p.spec.MatchConstraints.ResourceRules {
		if len(r.APIGroups) == 1 && r.APIGroups[0] == airlockv1alpha1.GroupName && len(r.Resources) == 1 && r.Resources[0] == "sandboxclaims" &&
			len(r.Operations) == 1 && r.Operations[0] == admissionregistrationv1.Delete && len(r.APIVersions) == 1 && r.APIVersions[0] == "v1alpha1" {
			matched = true
		}
	}
	if !matched {
		t.Fatalf("the policy matches %+v, want the DELETE of sandboxclaims only", p.spec.MatchConstraints.ResourceRules)
	}
	old, err := runtime.DefaultUnstructuredConverter.ToUnstructured(claim)
	if err != nil {
		t.Fatal(err)
	}
	ns := &metav1.ObjectMeta{Name: claim.Namespace}
	if nsDeleting {
		ns.DeletionTimestamp = &metav1.Time{Time: sandboxpodtest.T0}
	}
	nsObj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&struct {
		metav1.ObjectMeta `json:"metadata"`
	}{*ns})
	if err != nil {
		t.Fatal(err)
	}
	activation := map[string]any{
		"object": types.NullValue, "oldObject": old, "namespaceObject": nsObj,
		"request": map[string]any{
			"operation": "DELETE", "namespace": claim.Namespace,
			"userInfo": map[string]any{"username": user},
		},
	}
	for _, c := range p.conditions {
		out, _, err := c.Eval(activation)
		if err != nil {
			t.Fatalf("matchCondition: %v", err)
		}
		if out != types.True {
			return false
		}
	}
	for _, v := range p.validations {
		out, _, err := v.Eval(activation)
		if err != nil || out != ref.Val(types.True) {
			return true
		}
	}
	return false
}

// TestGarbageCollectorKeepsClaimsWithWorkspaces (issue 39 item 5): garbage collection may not
// delete a claim whose workspace may hold files, exactly the claims workspace.HeldFromCollector
// names (the operator deletes those itself once their workspaces are recorded); nor does the
// policy hold anyone else's deletion, or a namespace's.
func TestGarbageCollectorKeepsClaimsWithWorkspaces(t *testing.T) {
	p := loadWorkspacesPolicy(t)
	const (
		gc         = "system:serviceaccount:kube-system:generic-garbage-collector"
		kcm        = "system:kube-controller-manager"
		namespaces = "system:serviceaccount:kube-system:namespace-controller"
		person     = "alice@example.com"
		operator   = operatorUser
	)
	var claims []*airlockv1alpha1.SandboxClaim
	for _, phase := range []airlockv1alpha1.ClaimPhase{"", airlockv1alpha1.ClaimPending, airlockv1alpha1.ClaimQueued, airlockv1alpha1.ClaimBinding,
		airlockv1alpha1.ClaimBound, airlockv1alpha1.ClaimReaping, airlockv1alpha1.ClaimRefused, airlockv1alpha1.ClaimFailed} {
		for _, frozen := range []bool{false, true} {
			for _, role := range []string{"", "repo"} {
				c := sandboxpodtest.Claim(fmt.Sprintf("agent-%s-%t-%s", phase, frozen, role), "session-1", phase, sandboxpodtest.T0)
				c.Status.Frozen = nil
				if frozen {
					c.Status.Frozen = testRecord()
				}
				c.Spec.MountRole = role
				claims = append(claims, c)
			}
		}
	}
	held := 0
	for _, c := range claims {
		want := workspace.HeldFromCollector(c)
		if want {
			held++
		}
		what := fmt.Sprintf("phase %q, frozen %t, mount role %q", c.Status.Phase, c.Status.Frozen != nil, c.Spec.MountRole)
		for _, user := range []string{gc, kcm} {
			if got := p.refuses(t, user, c, false); got != want {
				t.Errorf("%s deleting a claim (%s): refused %t, want %t (workspace.HeldFromCollector)", user, what, got, want)
			}
			if p.refuses(t, user, c, true) {
				t.Errorf("%s deleting a claim (%s) in a namespace being deleted: refused", user, what)
			}
		}
		for _, user := range []string{namespaces, person, operator} {
			if p.refuses(t, user, c, false) {
				t.Errorf("%s deleting a claim (%s): refused, want the policy to hold the garbage collector only", user, what)
			}
		}
	}
	if held != 4 {
		t.Errorf("%d of the claims held from garbage collection, want 4 (Binding, Bound, Reaping, Failed; frozen, no mount role)", held)
	}
}
