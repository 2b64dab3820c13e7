package manifests

// The operator's ValidatingAdmissionPolicy (rbac/admission_policy.yaml), evaluated here with
// cel-go, the CEL the API server runs, against what the operator's own builders make (every one
// must pass) and against hostile objects (each must be refused by the rule it breaks). The
// objects go in as the API server hands them to a policy: converted to unstructured, with what
// admission defaults (the ServiceAccount, the not-ready and unreachable tolerations) where it
// matters. e2e/admission_policy_test.go asks the API server itself.

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
	"github.com/airlock-dev/airlock/pkg/controller/cabundle"
	"github.com/airlock-dev/airlock/pkg/controller/egressca"
	"github.com/airlock-dev/airlock/pkg/controller/isolationkey"
	"github.com/airlock-dev/airlock/pkg/recordstore"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
)

const (
	policyFile   = "rbac/admission_policy.yaml"
	operatorUser = "system:serviceaccount:airlock-system:airlock-operator"
)

// compiledPolicy is the policy's CEL, compiled.
type compiledPolicy struct {
	spec        admissionregistrationv1.ValidatingAdmissionPolicySpec
	conditions  []cel.Program
	variables   []namedProgram
	validations []namedProgram // name: the message
}

type namedProgram struct {
	name string
	prg  cel.Program
}

// loadPolicy reads the policy and its binding from policyFile.
func loadPolicy(t *testing.T) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	docs := documents(t)
	policies := decodeAll[admissionregistrationv1.ValidatingAdmissionPolicy](t, docs, "ValidatingAdmissionPolicy")
	bindings := decodeAll[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, docs, "ValidatingAdmissionPolicyBinding")
	if policies[policyFile] == nil || bindings[policyFile] == nil {
		t.Fatalf("want the policy and its binding in %s: %v, %v", policyFile, slices.Collect(maps.Keys(policies)), slices.Collect(maps.Keys(bindings)))
	}
	return policies[policyFile], bindings[policyFile]
}

// compile compiles every expression of the policy as the API server declares its variables.
func compile(t *testing.T, policy *admissionregistrationv1.ValidatingAdmissionPolicy) *compiledPolicy {
	t.Helper()
	env, err := cel.NewEnv(
		cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType),
		cel.Variable("request", cel.DynType), cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("params", cel.DynType),
		ext.Strings(ext.StringsVersion(2)), cel.OptionalTypes(),
	)
	if err != nil {
		t.Fatal(err)
	}
	prog := func(what, expr string) cel.Program {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("%s: %v", what, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return prg
	}
	p := &compiledPolicy{spec: policy.Spec}
	for _, c := range policy.Spec.MatchConditions {
		p.conditions = append(p.conditions, prog("matchCondition "+c.Name, c.Expression))
	}
	for _, v := range policy.Spec.Variables {
		p.variables = append(p.variables, namedProgram{v.Name, prog("variable "+v.Name, v.Expression)})
	}
	for i, v := range policy.Spec.Validations {
		if v.Message == "" {
			t.Fatalf("validation %d has no message", i)
		}
		p.validations = append(p.validations, namedProgram{v.Message, prog("validation "+v.Message, v.Expression)})
	}
	return p
}

// request is one write the policy is asked about.
type request struct {
	user      string
	operation admissionregistrationv1.OperationType
	namespace string
	object    runtime.Object // nil for a DELETE
	oldObject runtime.Object // nil for a CREATE
	// subResource is the subresource written ("status"), or "".
	subResource string
}

// resourceOf is each kind's API group and resource.
var resourceOf = map[string][2]string{
	"Pod": {"", "pods"}, "Secret": {"", "secrets"}, "ConfigMap": {"", "configmaps"},
	"NetworkPolicy": {"networking.k8s.io", "networkpolicies"}, "Job": {"batch", "jobs"}, "Deployment": {"apps", "deployments"},
	"Event": {"", "events"}, "SandboxClaim": {"airlock.dev", "sandboxclaims"}, "SessionRecord": {"airlock.dev", "sessionrecords"},
}

// versionOf is each kind's API version (v1 but for airlock's own).
func versionOf(kind string) string {
	if resourceOf[kind][0] == airlockv1alpha1.GroupName {
		return "v1alpha1"
	}
	return "v1"
}

func kindOf(obj runtime.Object) string {
	switch obj.(type) {
	case *corev1.Pod:
		return "Pod"
	case *corev1.Secret:
		return "Secret"
	case *corev1.ConfigMap:
		return "ConfigMap"
	case *networkingv1.NetworkPolicy:
		return "NetworkPolicy"
	case *batchv1.Job:
		return "Job"
	case *appsv1.Deployment:
		return "Deployment"
	case *corev1.Event:
		return "Event"
	case *airlockv1alpha1.SandboxClaim:
		return "SandboxClaim"
	case *airlockv1alpha1.SessionRecord:
		return "SessionRecord"
	}
	panic(fmt.Sprintf("no kind for %T", obj))
}

// matches says whether the policy's matchConstraints cover the request's resource and operation.
func (p *compiledPolicy) matches(kind, subResource string, op admissionregistrationv1.OperationType) bool {
	gr := resourceOf[kind]
	resource := gr[1]
	if subResource != "" {
		resource += "/" + subResource
	}
	for _, r := range p.spec.MatchConstraints.ResourceRules {
		if slices.Contains(r.APIGroups, gr[0]) && slices.Contains(r.Resources, resource) && slices.Contains(r.APIVersions, versionOf(kind)) &&
			(slices.Contains(r.Operations, op) || slices.Contains(r.Operations, admissionregistrationv1.OperationAll)) {
			return true
		}
	}
	return false
}

// admit evaluates the policy on r as the API server would: whether it applies (matchConstraints
// and matchConditions), and the messages of the validations that refuse it; a validation that
// cannot be evaluated refuses (failurePolicy Fail).
func (p *compiledPolicy) admit(t *testing.T, r request) (applies bool, refused []string) {
	t.Helper()
	return p.admitWith(t, r, types.NullValue)
}

// admitWith is admit with params, the one param of a policy with a paramKind (the API server
// evaluates such a policy once per param).
func (p *compiledPolicy) admitWith(t *testing.T, r request, params any) (applies bool, refused []string) {
	t.Helper()
	obj := r.object
	if obj == nil {
		obj = r.oldObject
	}
	kind := kindOf(obj)
	if !p.matches(kind, r.subResource, r.operation) {
		return false, nil
	}
	toMap := func(o runtime.Object) any {
		if o == nil {
			return types.NullValue
		}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	gr := resourceOf[kind]
	vars := map[string]any{}
	activation := map[string]any{
		"object": toMap(r.object), "oldObject": toMap(r.oldObject), "variables": vars, "params": params,
		"request": map[string]any{
			"operation": string(r.operation), "namespace": r.namespace, "subResource": r.subResource,
			"kind":     map[string]any{"group": gr[0], "version": versionOf(kind), "kind": kind},
			"resource": map[string]any{"group": gr[0], "version": versionOf(kind), "resource": gr[1]},
			"userInfo": map[string]any{"username": r.user},
		},
	}
	for _, c := range p.conditions {
		out, _, err := c.Eval(activation)
		if err != nil {
			t.Fatalf("matchCondition: %v", err)
		}
		if out != types.True {
			return false, nil
		}
	}
	for _, v := range p.variables {
		out, _, err := v.prg.Eval(activation)
		if err == nil {
			vars[v.name] = out // a variable in error is missing: what reads it errs, and refuses
		}
	}
	for _, v := range p.validations {
		out, _, err := v.prg.Eval(activation)
		if err != nil || out != ref.Val(types.True) {
			refused = append(refused, v.name)
		}
	}
	return true, refused
}

// The objects the operator builds, from the builders it builds them with.

func testRecord() *airlockv1alpha1.FrozenSandbox {
	return sandboxpod.Freeze(sandboxpodtest.Class("codegen"), &sandboxpodtest.Registry("tools", "").Spec.Sandboxes[0])
}

// egressRecord is the record of a class with egress, the gateway and its CA bundle frozen.
func egressRecord(t *testing.T) *airlockv1alpha1.FrozenSandbox {
	t.Helper()
	class := sandboxpodtest.Class("codegen")
	class.Spec.Egress = &airlockv1alpha1.SandboxEgress{Hosts: []airlockv1alpha1.EgressHost{{Host: "proxy.golang.org", Ports: []airlockv1alpha1.EgressPort{443}}}}
	record := sandboxpod.Freeze(class, &sandboxpodtest.Registry("tools", "").Spec.Sandboxes[0])
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "airlock-egress", Namespace: "airlock-system"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.50", Selector: map[string]string{"app.kubernetes.io/name": "airlock-egress"},
			Ports: []corev1.ServicePort{{Name: "proxy", Port: 3128, TargetPort: intstr.FromString("proxy"), Protocol: corev1.ProtocolTCP}}},
	}
	gw, why := sandboxpod.FreezeGateway(&sandboxpod.GatewayRef{Namespace: "airlock-system", Name: "airlock-egress", Port: 3128, CABundleConfigMap: "airlock-egress-ca"}, svc)
	if why != "" {
		t.Fatal(why)
	}
	record.Egress.Gateway = *gw
	return record
}

func testClaim(record *airlockv1alpha1.FrozenSandbox) *airlockv1alpha1.SandboxClaim {
	c := sandboxpodtest.Claim("agent-0123456789", "session-1", airlockv1alpha1.ClaimBound, sandboxpodtest.T0)
	c.Status.Frozen = record
	return c
}

// allowedServices are Services a class allows: one with a selector, one without.
func allowedServices() []*corev1.Service {
	return []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "goproxy", Namespace: "mirrors"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "goproxy"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "external", Namespace: "mirrors"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}},
	}
}

// claimPod is the claim's pod as the operator creates it: built, pointed at its token Secret.
func claimPod(claim *airlockv1alpha1.SandboxClaim) *corev1.Pod {
	pod := sandboxpod.ClaimPod(claim, claim.Status.Frozen)
	sandboxpod.UseTokenSecret(pod, claimtoken.ClaimSecretName(claim.Name, "token"))
	return pod
}

// admitted is pod as admission defaulted it and the scheduler placed it: the object a later
// write (an adoption, a label patch) replaces.
func admitted(pod *corev1.Pod) *corev1.Pod {
	pod = pod.DeepCopy()
	pod.UID, pod.ResourceVersion = k8stypes.UID("uid-"+pod.Name), "7"
	pod.Spec.ServiceAccountName = "default"
	pod.Spec.NodeName = "node-1"
	for _, key := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)})
	}
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].SecurityContext.ProcMount = ptr.To(corev1.DefaultProcMount)
	}
	return pod
}

func warmRegistry() *airlockv1alpha1.ToolRegistry {
	return sandboxpodtest.WarmRegistry(2)
}

func memberPod(record *airlockv1alpha1.FrozenSandbox) *corev1.Pod {
	reg := warmRegistry()
	key := sandboxpod.PoolKey(reg.UID, "codegen", record)
	return sandboxpod.MemberPod(reg, "codegen", key, sandboxpod.MemberName(reg.Name, "codegen"), record)
}

// syncJob is a claim's sync-back Job as pkg/controller/claim's buildSyncJob builds it (that
// builder is the claim controller's own; e2e's TestOperatorRunsWithItsRBAC has the operator,
// as its ServiceAccount, create the real one under this policy).
func syncJob(claim *airlockv1alpha1.SandboxClaim) *batchv1.Job {
	meta := sandboxpod.ChildMeta(claim, claim.Name+"-sync")
	meta.Labels[airlockv1alpha1.LabelClaimUID] = string(claim.UID)
	meta.Annotations = map[string]string{airlockv1alpha1.AnnotationSyncAttempt: "1"}
	return &batchv1.Job{
		ObjectMeta: meta,
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr.To[int32](0),
			ActiveDeadlineSeconds: ptr.To[int64](1800),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{airlockv1alpha1.LabelSyncOf: claim.Name}},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					AutomountServiceAccountToken: ptr.To(false),
					EnableServiceLinks:           ptr.To(false),
					SecurityContext:              sandboxpod.RestrictedPodSecurityContext(),
					Containers: []corev1.Container{{
						Name: "sync", Image: "ghcr.io/airlock-dev/airlock:v0.1.0",
						Args:            []string{"sync", "--from=" + claim.Spec.WorkspaceDir, "--to=projects/x"},
						VolumeMounts:    []corev1.VolumeMount{{Name: "content", MountPath: "/content"}},
						SecurityContext: sandboxpod.RestrictedContainerSecurityContext(),
					}},
					Volumes: []corev1.Volume{{Name: "content", VolumeSource: corev1.VolumeSource{
						PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "workspace-content"},
					}}},
				},
			},
		},
	}
}

// keptRecord is a kept workspace's record as pkg/controller/claim's buildKeptJob builds it (issue
// 24): the workspace's cleanup Job, suspended, owned by nothing, labelled with the claim that
// kept it; unsuspended to collect it.
func keptRecord(claim *airlockv1alpha1.SandboxClaim, suspend bool) *batchv1.Job {
	job := syncJob(claim)
	job.Name = "airlock-kept-0123456789abcdef0123"
	job.OwnerReferences = nil
	job.Labels = map[string]string{airlockv1alpha1.LabelClaim: claim.Name, airlockv1alpha1.LabelRuntime: claim.Spec.RuntimeName,
		"airlock.dev/kept-workspace": "true", airlockv1alpha1.LabelClaimUID: string(claim.UID),
		airlockv1alpha1.LabelClaimShard: claim.Labels[airlockv1alpha1.LabelClaimShard]}
	job.Annotations = map[string]string{"airlock.dev/workspace-dir": claim.Spec.WorkspaceDir}
	job.Spec.Suspend = ptr.To(suspend)
	job.Spec.BackoffLimit = ptr.To[int32](3)
	job.Spec.Template.Labels = map[string]string{airlockv1alpha1.LabelSyncOf: job.Name}
	job.Spec.Template.Spec.Containers[0].Args = []string{"sync", "--content-root=/content", "--from=" + claim.Spec.WorkspaceDir,
		"--remove-only", "--sandboxes-dir=" + claim.Namespace + "/sandboxes"}
	return job
}

// defaultDenyPolicy is a namespace's default-deny NetworkPolicy for every sandbox pod, of the
// shape the policy admits: an airlock.dev/ label, a selector on an airlock.dev/ label, no rule.
func defaultDenyPolicy() *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "airlock-default-deny", Namespace: sandboxpodtest.Namespace,
			Labels: map[string]string{"app.kubernetes.io/name": "airlock", "airlock.dev/default-deny": "true"}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: airlockv1alpha1.LabelClaim, Operator: metav1.LabelSelectorOpExists}}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
}

// egressCABundle is the egress CA's bundle ConfigMap, as the CA bundle distributor writes it
// (pkg/controller/cabundle, EgressBundle).
func egressCABundle() *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: egressca.DefaultConfigMapName, Namespace: sandboxpodtest.Namespace,
			Labels: map[string]string{cabundle.EgressLabelBundle: "true", "app.kubernetes.io/name": "airlock"}},
		Data: map[string]string{cabundle.EgressKey: "---"},
	}
}

// recordSegment is segment n of the claim's session record, as the record controller writes it.
func recordSegment(claim *airlockv1alpha1.SandboxClaim, n int) *airlockv1alpha1.SessionRecord {
	cm, err := recordstore.SessionRecord(claim, recordstore.Segment{N: n, Lines: [][]byte{[]byte("{}")}})
	if err != nil {
		panic(err)
	}
	return cm
}

func caBundle() *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "airlock-ca", Namespace: sandboxpodtest.Namespace,
			Labels: map[string]string{"airlock.dev/ca-bundle": "true", "app.kubernetes.io/name": "airlock"}},
		Data: map[string]string{"ca.crt": "---"},
	}
}

// create, update and remove are the operator's writes in the fixtures' namespace.
func create(obj runtime.Object) request {
	return request{user: operatorUser, operation: admissionregistrationv1.Create, namespace: namespaceOf(obj), object: obj}
}

func update(old, obj runtime.Object) request {
	return request{user: operatorUser, operation: admissionregistrationv1.Update, namespace: namespaceOf(obj), object: obj, oldObject: old}
}

func remove(old runtime.Object) request {
	return request{user: operatorUser, operation: admissionregistrationv1.Delete, namespace: namespaceOf(old), oldObject: old}
}

func namespaceOf(obj runtime.Object) string {
	return obj.(metav1.Object).GetNamespace()
}

// TestPolicyAdmitsWhatAirlockBuilds: every object the operator's builders make, and every write
// the operator makes of them (creations, adoptions and label patches, deletions), passes.
func TestPolicyAdmitsWhatAirlockBuilds(t *testing.T) {
	policy, _ := loadPolicy(t)
	p := compile(t, policy)
	record, egress := testRecord(), egressRecord(t)
	claim, egressClaim := testClaim(record), testClaim(egress)
	pod, member, egressMember := claimPod(claim), memberPod(record), memberPod(egress)
	reg := warmRegistry()
	key := sandboxpod.PoolKey(reg.UID, "codegen", record)

	liveMember := admitted(member)
	adopted := with(liveMember, func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{sandboxpod.OwnerReference(claim)}
		maps.Copy(p.Labels, sandboxpod.PodLabels(claim))
	})
	leftPool := with(adopted, func(p *corev1.Pod) { delete(p.Labels, airlockv1alpha1.LabelWarmPool) })
	legacy := &appsv1.Deployment{ObjectMeta: sandboxpod.ChildMeta(claim, claim.Name)}
	tlsSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "airlock-sandbox-api-tls", Namespace: "airlock-system"}, Type: corev1.SecretTypeTLS}
	isolationKeys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: isolationkey.SecretName, Namespace: "airlock-system"}, Type: corev1.SecretTypeOpaque}
	caBefore := caBundle()
	egressCA := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: egressca.SecretName, Namespace: "airlock-system"}, Type: corev1.SecretTypeTLS}

	tests := map[string]request{
		"a claim's pod":                      create(pod),
		"a claim's pod as admission sees it": create(with(admitted(pod), func(p *corev1.Pod) { p.Spec.NodeName = "" })),
		"a claim's pod with egress":          create(claimPod(egressClaim)),
		"a claim's token Secret":             create(sandboxpod.TokenSecret(claim, claimtoken.ClaimSecretName(claim.Name, "token"), "token")),
		"a claim's token Secret with proxy":  create(sandboxpod.TokenSecretWithProxy(egressClaim, claimtoken.ClaimSecretName(claim.Name, "token"), "token", "proxy")),
		"a claim's NetworkPolicy":            create(sandboxpod.ClaimNetworkPolicy(claim, record, allowedServices())),
		"a claim's NetworkPolicy, updated": update(sandboxpod.ClaimNetworkPolicy(claim, record, nil),
			sandboxpod.ClaimNetworkPolicy(claim, record, allowedServices())),
		"a claim's NetworkPolicy with egress": create(sandboxpod.ClaimNetworkPolicy(egressClaim, egress, nil)),
		"a claim's NetworkPolicy with the operator's stop": create(sandboxpod.WithOperatorIngress(sandboxpod.ClaimNetworkPolicy(claim, record, nil), record,
			&sandboxpod.OperatorPeer{Namespace: "airlock-system", Labels: map[string]string{"app.kubernetes.io/name": "airlock", "app.kubernetes.io/component": "operator"}})),
		"a claim's sync-back Job":               create(syncJob(claim)),
		"a warm member":                         create(member),
		"a warm member's key Secret":            create(sandboxpod.MemberSecret(liveMember, "key", "")),
		"a warm member with egress":             create(egressMember),
		"a warm member's key Secret with proxy": create(sandboxpod.MemberSecret(admitted(egressMember), "key", "proxy")),
		"a pool's NetworkPolicy with egress":    create(sandboxpod.PoolNetworkPolicy(reg, "codegen", sandboxpod.PoolKey(reg.UID, "codegen", egress), egress, nil)),
		"an adoption of a member with egress": update(admitted(egressMember), with(admitted(egressMember), func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{sandboxpod.OwnerReference(egressClaim)}
			maps.Copy(p.Labels, sandboxpod.PodLabels(egressClaim))
		})),
		"a pool's NetworkPolicy":                create(sandboxpod.PoolNetworkPolicy(reg, "codegen", key, record, allowedServices())),
		"a namespace's default-deny policy":     create(defaultDenyPolicy()),
		"an adoption":                           update(liveMember, adopted),
		"an adopted member leaving its pool":    update(adopted, leftPool),
		"a claim's pod's labels repaired":       update(admitted(pod), with(admitted(pod), func(p *corev1.Pod) { p.Labels = sandboxpod.PodLabels(claim) })),
		"a claim's pod deleted":                 remove(admitted(pod)),
		"a warm member deleted":                 remove(liveMember),
		"a sync-back Job deleted":               remove(syncJob(claim)),
		"a kept workspace's record":             create(keptRecord(claim, true)),
		"a kept workspace's record, kept again": update(keptRecord(claim, true), keptRecord(claim, true)),
		"a kept workspace collected":            update(keptRecord(claim, true), keptRecord(claim, false)),
		"a kept workspace's record deleted":     remove(keptRecord(claim, false)),
		"a pool's NetworkPolicy deleted":        remove(sandboxpod.PoolNetworkPolicy(reg, "codegen", key, record, nil)),
		"an earlier version's Deployment":       remove(legacy),
		"the claim token key":                   create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: claimtoken.SecretName, Namespace: "airlock-system"}, Type: corev1.SecretTypeOpaque}),
		"the serving certificate":               create(tlsSecret),
		"the serving certificate, renewed":      update(tlsSecret, tlsSecret),
		"the isolation signing keys":            create(isolationKeys),
		"the isolation signing keys, rotated":   update(isolationKeys, isolationKeys),
		"the CA bundle":                         create(caBefore),
		"a record segment":                      create(recordSegment(claim, 0)),
		"the last record segment":               create(recordSegment(claim, 63)),
		"a record segment, appended":            update(recordSegment(claim, 1), with(recordSegment(claim, 1), func(c *airlockv1alpha1.SessionRecord) { c.Spec.Entries += "{}\n" })),
		"a record moved to its kept workspace": update(recordSegment(claim, 0), recordstore.OwnedBy(recordSegment(claim, 0),
			metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "kept", UID: "job-uid"})),
		"a record segment written before the owner label": create(with(recordSegment(claim, 0), func(c *airlockv1alpha1.SessionRecord) {
			delete(c.Labels, recordstore.LabelRecordOwner)
		})),
		"the CA bundle, updated":        update(caBefore, with(caBefore, func(c *corev1.ConfigMap) { c.Data["ca.crt"] = "+++" })),
		"the CA bundle deleted":         remove(caBefore),
		"the egress CA":                 create(egressCA),
		"the egress CA, rotated":        update(egressCA, egressCA),
		"the egress CA bundle":          create(egressCABundle()),
		"the egress CA bundle, updated": update(egressCABundle(), with(egressCABundle(), func(c *corev1.ConfigMap) { c.Data["ca.crt"] = "+++" })),
		"the egress CA bundle deleted":  remove(egressCABundle()),
		"another install's operator, its pod": func() request {
			r := create(pod)
			r.user = "system:serviceaccount:airlock-two:airlock-operator"
			return r
		}(),
		"another install's operator, its key": func() request {
			r := create(in("airlock-two", tlsSecret))
			r.user = "system:serviceaccount:airlock-two:airlock-operator"
			return r
		}(),
		"a claim's pod of a replacement claim": create(claimPod(func() *airlockv1alpha1.SandboxClaim { c := testClaim(record); c.Name += "-r1"; return c }())),
	}
	p.expectAdmitted(t, tests)
}

// expectAdmitted checks that the policy applies to each request and admits it.
func (p *compiledPolicy) expectAdmitted(t *testing.T, tests map[string]request) {
	t.Helper()
	for name, r := range tests {
		t.Run(name, func(t *testing.T) {
			applies, refused := p.admit(t, r)
			if !applies {
				t.Fatalf("the policy does not apply to the operator's %s of a %s", r.operation, kindOf(orOld(r)))
			}
			if len(refused) > 0 {
				t.Errorf("refused:\n%s", strings.Join(refused, "\n"))
			}
		})
	}
}

func orOld(r request) runtime.Object {
	if r.object != nil {
		return r.object
	}
	return r.oldObject
}

// Messages of the policy's validations, as the hostile cases expect them (a prefix suffices).
const (
	msgSystemNS     = "the airlock operator writes nothing in kube-system"
	msgOwnNS        = "in its own namespace the airlock operator writes only"
	msgDeployment   = "the airlock operator only deletes a Deployment"
	msgPodLabels    = "a pod the airlock operator writes is a sandbox pod"
	msgJob          = "a Job the airlock operator writes"
	msgSecretLabels = "a Secret the airlock operator writes is a claim's token"
	msgSecretType   = "a Secret the airlock operator writes is of type Opaque"
	msgNPLabel      = "a NetworkPolicy the airlock operator writes carries"
	msgNPSelector   = "a NetworkPolicy the airlock operator writes selects"
	msgNPPeers      = "a NetworkPolicy the airlock operator writes admits"
	msgConfigMap    = "the only ConfigMap the airlock operator writes"
	msgRecord       = "a SessionRecord the airlock operator writes"
	msgToken        = "a pod the airlock operator writes gets no ServiceAccount token"
	msgHost         = "a pod the airlock operator writes shares no host namespace"
	msgVolumes      = "a pod the airlock operator writes has no hostPath"
	msgSecrets      = "a pod the airlock operator writes reads no Secret but its own"
	msgPrivileged   = "a pod the airlock operator writes runs no privileged container"
	msgCaps         = "a pod the airlock operator writes runs every container without privilege escalation"
	msgPodSC        = "a pod the airlock operator writes runs with airlock's security context exactly"
	msgContainerSC  = "a pod the airlock operator writes sets no container's user"
	msgPlacement    = "a pod the airlock operator writes is placed by the scheduler"
)

// privilege makes c privileged as the API server accepts it: with privilege escalation allowed.
func privilege(c *corev1.Container) {
	c.SecurityContext.Privileged = ptr.To(true)
	c.SecurityContext.AllowPrivilegeEscalation = nil
}

// hostilePod returns the claim's pod changed by mutate (its first container's securityContext
// in c, its spec in s).
func hostilePod(mutate func(p *corev1.Pod, s *corev1.PodSpec, c *corev1.Container)) *corev1.Pod {
	pod := claimPod(testClaim(testRecord()))
	mutate(pod, &pod.Spec, &pod.Spec.Containers[0])
	return pod
}

// TestPolicyRefusesWhatAirlockDoesNotBuild: each hostile write is refused, by the rule it breaks
// and by no other (so that each rule is seen to hold on its own).
func TestPolicyRefusesWhatAirlockDoesNotBuild(t *testing.T) {
	policy, _ := loadPolicy(t)
	p := compile(t, policy)
	record := testRecord()
	claim := testClaim(record)
	pod := claimPod(claim)
	token := sandboxpod.TokenSecret(claim, claimtoken.ClaimSecretName(claim.Name, "token"), "token")
	np := sandboxpod.ClaimNetworkPolicy(claim, record, allowedServices())
	job := syncJob(claim)
	hostPath := corev1.Volume{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}
	projected := corev1.Volume{Name: "sa", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
		ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}}
	otherSecret := corev1.Volume{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "db-credentials"}}}
	secretEnv := corev1.EnvVar{Name: "DB", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db-credentials"}, Key: "password"}}}
	unlabelled := func(o metav1.Object) { o.SetLabels(map[string]string{"app": "x"}) }
	ipBlock := &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}

	tests := map[string]struct {
		r    request
		want string
	}{
		"a privileged pod": {create(hostilePod(func(_ *corev1.Pod, _ *corev1.PodSpec, c *corev1.Container) {
			c.SecurityContext.Privileged = ptr.To(true)
		})), msgPrivileged},
		"a privileged init container": {create(hostilePod(func(_ *corev1.Pod, s *corev1.PodSpec, c *corev1.Container) {
			init := *c.DeepCopy()
			init.Name = "init"
			privilege(&init)
			s.InitContainers = []corev1.Container{init}
		})), msgPrivileged},
		"hostNetwork":          {create(hostilePod(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) { s.HostNetwork = true })), msgHost},
		"hostPID":              {create(hostilePod(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) { s.HostPID = true })), msgHost},
		"hostIPC":              {create(hostilePod(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) { s.HostIPC = true })), msgHost},
		"a host port":          {create(hostilePod(func(_ *corev1.Pod, _ *corev1.PodSpec, c *corev1.Container) { c.Ports[0].HostPort = 8080 })), msgHost},
		"a hostPath volume":    {create(hostilePod(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) { s.Volumes = append(s.Volumes, hostPath) })), msgVolumes},
		"a projected SA token": {create(hostilePod(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) { s.Volumes = append(s.Volumes, projected) })), msgVolumes},
		"the token automounted": {create(hostilePod(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) {
			s.AutomountServiceAccountToken = ptr.To(true)
		})), msgToken},
		"automount left unset": {create(hostilePod(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) { s.AutomountServiceAccountToken = nil })), msgToken},
		"another ServiceAccount": {create(hostilePod(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) {
			s.ServiceAccountName = "cluster-admin-sa"
		})), msgToken},
		"a pod without airlock labels":      {create(hostilePod(func(p *corev1.Pod, _ *corev1.PodSpec, _ *corev1.Container) { unlabelled(p) })), msgPodLabels},
		"a pod in kube-system":              {create(in("kube-system", pod)), msgSystemNS},
		"a pod in kube-public":              {create(in("kube-public", pod)), msgSystemNS},
		"a pod in the operator's namespace": {create(in("airlock-system", pod)), msgOwnNS},
		"an added capability": {create(hostilePod(func(_ *corev1.Pod, _ *corev1.PodSpec, c *corev1.Container) {
			c.SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
		})), msgCaps},
		"capabilities kept": {create(hostilePod(func(_ *corev1.Pod, _ *corev1.PodSpec, c *corev1.Container) { c.SecurityContext.Capabilities = nil })), msgCaps},
		"privilege escalation": {create(hostilePod(func(_ *corev1.Pod, _ *corev1.PodSpec, c *corev1.Container) {
			c.SecurityContext.AllowPrivilegeEscalation = ptr.To(true)
		})), msgCaps},
		"an unmasked /proc": {create(hostilePod(func(_ *corev1.Pod, _ *corev1.PodSpec, c *corev1.Container) {
			c.SecurityContext.ProcMount = ptr.To(corev1.UnmaskedProcMount)
		})), msgCaps},
		"root": {create(hostilePod(func(_ *corev1.Pod, _ *corev1.PodSpec, c *corev1.Container) {
			c.SecurityContext.RunAsUser = ptr.To[int64](0)
		})), msgContainerSC},
		"runAsNonRoot off": {create(hostilePod(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) {
			s.SecurityContext.RunAsNonRoot = ptr.To(false)
		})), msgPodSC},
		"seccomp Unconfined": {create(hostilePod(func(_ *corev1.Pod, _ *corev1.PodSpec, c *corev1.Container) {
			c.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		})), msgContainerSC},
		"a sysctl": {create(hostilePod(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) {
			s.SecurityContext.Sysctls = []corev1.Sysctl{{Name: "kernel.shm_rmid_forced", Value: "0"}}
		})), msgPodSC},
		"a node of its choosing": {create(hostilePod(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) { s.NodeName = "control-plane" })), msgPlacement},
		"a control-plane toleration": {create(hostilePod(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) {
			s.Tolerations = []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		})), msgPlacement},
		"another Secret mounted": {create(hostilePod(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) {
			s.Volumes = append(s.Volumes, otherSecret)
		})), msgSecrets},
		"a Secret named like a key of another pod": {create(hostilePod(func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "k", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "someone-else-key"}}})
		})), msgSecrets},
		"another Secret in env": {create(hostilePod(func(_ *corev1.Pod, _ *corev1.PodSpec, c *corev1.Container) { c.Env = append(c.Env, secretEnv) })), msgSecrets},
		"envFrom a Secret": {create(hostilePod(func(_ *corev1.Pod, _ *corev1.PodSpec, c *corev1.Container) {
			c.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db-credentials"}}}}
		})), msgSecrets},
		"a pod's airlock labels removed":   {update(admitted(pod), with(admitted(pod), func(p *corev1.Pod) { unlabelled(p) })), msgPodLabels},
		"another pod given airlock labels": {update(with(admitted(pod), func(p *corev1.Pod) { unlabelled(p) }), admitted(pod)), msgPodLabels},
		"another pod deleted":              {remove(with(admitted(pod), func(p *corev1.Pod) { unlabelled(p) })), msgPodLabels},
		"a pod deleted in kube-system":     {remove(in("kube-system", admitted(pod))), msgSystemNS},

		"a ServiceAccount token Secret": {create(with(token, func(s *corev1.Secret) {
			s.Type = corev1.SecretTypeServiceAccountToken
			s.Annotations = map[string]string{corev1.ServiceAccountNameKey: "default"}
		})), msgSecretType},
		"an unlabelled Secret":            {create(with(token, func(s *corev1.Secret) { unlabelled(s) })), msgSecretLabels},
		"a Secret in kube-system":         {create(in("kube-system", token)), msgSystemNS},
		"another Secret of its namespace": {create(in("airlock-system", token)), msgOwnNS},
		"its key as a TLS Secret": {create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: claimtoken.SecretName, Namespace: "airlock-system"},
			Type: corev1.SecretTypeTLS}), msgSecretType},

		"an unlabelled NetworkPolicy": {create(with(np, func(n *networkingv1.NetworkPolicy) { unlabelled(n) })), msgNPLabel},
		"a policy of every pod":       {create(with(np, func(n *networkingv1.NetworkPolicy) { n.Spec.PodSelector = metav1.LabelSelector{} })), msgNPSelector},
		"a policy of the pods without a claim": {create(with(np, func(n *networkingv1.NetworkPolicy) {
			n.Spec.PodSelector = metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: airlockv1alpha1.LabelClaim, Operator: metav1.LabelSelectorOpDoesNotExist}}}
		})), msgNPSelector},
		"egress to an ipBlock": {create(with(np, func(n *networkingv1.NetworkPolicy) {
			n.Spec.Egress = append(n.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{IPBlock: ipBlock}}})
		})), msgNPPeers},
		"egress to everything": {create(with(np, func(n *networkingv1.NetworkPolicy) {
			n.Spec.Egress = append(n.Spec.Egress, networkingv1.NetworkPolicyEgressRule{})
		})), msgNPPeers},
		"egress to a whole namespace": {create(with(np, func(n *networkingv1.NetworkPolicy) {
			n.Spec.Egress = append(n.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "kube-system"}}}}})
		})), msgNPPeers},
		"ingress from an ipBlock": {create(with(np, func(n *networkingv1.NetworkPolicy) {
			n.Spec.Ingress[0].From = []networkingv1.NetworkPolicyPeer{{IPBlock: ipBlock}}
		})), msgNPPeers},
		"ingress from everywhere": {create(with(np, func(n *networkingv1.NetworkPolicy) { n.Spec.Ingress[0].From = nil })), msgNPPeers},
		"ingress from another namespace": {create(with(np, func(n *networkingv1.NetworkPolicy) {
			n.Spec.Ingress[0].From[0].NamespaceSelector.MatchLabels[corev1.LabelMetadataName] = "elsewhere"
		})), msgNPPeers},
		"ingress from every pod of the operator's namespace": {create(with(np, func(n *networkingv1.NetworkPolicy) {
			n.Spec.Ingress = append(n.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "airlock-system"}}}}})
		})), msgNPPeers},
		"ingress from labelled pods of another namespace": {create(with(np, func(n *networkingv1.NetworkPolicy) {
			n.Spec.Ingress = append(n.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "elsewhere"}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/component": "operator"}}}}})
		})), msgNPPeers},
		"a NetworkPolicy in kube-system": {create(with(in("kube-system", np), func(n *networkingv1.NetworkPolicy) {
			n.Spec.Ingress[0].From[0].NamespaceSelector.MatchLabels[corev1.LabelMetadataName] = "kube-system"
		})), msgSystemNS},
		"another NetworkPolicy deleted": {remove(with(np, func(n *networkingv1.NetworkPolicy) { unlabelled(n) })), msgNPLabel},

		"a privileged Job": {create(with(job, func(j *batchv1.Job) { privilege(&j.Spec.Template.Spec.Containers[0]) })), msgPrivileged},
		"a Job with a token": {create(with(job, func(j *batchv1.Job) {
			j.Spec.Template.Spec.AutomountServiceAccountToken = ptr.To(true)
		})), msgToken},
		"a Job on the host's network": {create(with(job, func(j *batchv1.Job) { j.Spec.Template.Spec.HostNetwork = true })), msgHost},
		"a Job mounting a hostPath": {create(with(job, func(j *batchv1.Job) {
			j.Spec.Template.Spec.Volumes = append(j.Spec.Template.Spec.Volumes, hostPath)
		})), msgVolumes},
		"a Job mounting a Secret": {create(with(job, func(j *batchv1.Job) {
			j.Spec.Template.Spec.Volumes = append(j.Spec.Template.Spec.Volumes, otherSecret)
		})), msgSecrets},
		"an unlabelled Job":        {create(with(job, func(j *batchv1.Job) { unlabelled(j) })), msgJob},
		"a Job of unlabelled pods": {create(with(job, func(j *batchv1.Job) { j.Spec.Template.Labels = nil })), msgJob},
		"a Job in kube-system":     {create(in("kube-system", job)), msgSystemNS},
		"another Job deleted":      {remove(with(job, func(j *batchv1.Job) { unlabelled(j) })), msgJob},
		"another ConfigMap":        {create(with(caBundle(), func(c *corev1.ConfigMap) { c.Name = "coredns" })), msgConfigMap},
		"a record segment deleted": {remove(recordSegment(claim, 0)), msgRecord},
		"a record segment named for another claim": {create(with(recordSegment(claim, 0), func(c *airlockv1alpha1.SessionRecord) {
			c.Labels[recordstore.LabelRecordClaim], c.Spec.ClaimName = "other", "other"
		})), msgRecord},
		"a record segment labelled for another claim than its spec's": {create(with(recordSegment(claim, 0), func(c *airlockv1alpha1.SessionRecord) {
			c.Spec.ClaimUID = "another-uid"
		})), msgRecord},
		"a record segment 64": {create(with(recordSegment(claim, 0), func(c *airlockv1alpha1.SessionRecord) {
			c.Name, c.Spec.Segment = strings.TrimSuffix(c.Name, "-0")+"-64", 64
		})), msgRecord},
		"a record segment named for another number": {create(with(recordSegment(claim, 0), func(c *airlockv1alpha1.SessionRecord) { c.Spec.Segment = 1 })), msgRecord},
		"a record segment without its hash": {create(with(recordSegment(claim, 0), func(c *airlockv1alpha1.SessionRecord) {
			c.Name = claim.Name + "-record-0"
		})), msgRecord},
		"a record segment with a name after its number": {create(with(recordSegment(claim, 0), func(c *airlockv1alpha1.SessionRecord) { c.Name += "-coredns" })), msgRecord},
		"a record segment without record-of": {create(with(recordSegment(claim, 0), func(c *airlockv1alpha1.SessionRecord) {
			delete(c.Labels, recordstore.LabelRecordOf)
		})), msgRecord},
		"a record segment moved to another claim's record": {update(recordSegment(claim, 0), with(recordSegment(claim, 0), func(c *airlockv1alpha1.SessionRecord) {
			c.Labels[recordstore.LabelRecordOf] = "another-uid"
		})), msgRecord},
		"a record segment owned by a Deployment": {create(recordstore.OwnedBy(recordSegment(claim, 0),
			metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "d", UID: "d-uid"})), msgRecord},
		"a record segment without an owner": {create(with(recordSegment(claim, 0), func(c *airlockv1alpha1.SessionRecord) { c.OwnerReferences = nil })), msgRecord},
		"a record segment labelled for another owner than its own": {update(recordSegment(claim, 0), with(recordSegment(claim, 0), func(c *airlockv1alpha1.SessionRecord) {
			c.Labels[recordstore.LabelRecordOwner] = "another-uid"
		})), msgRecord},
		"a record in a ConfigMap": {create(with(caBundle(), func(c *corev1.ConfigMap) { c.Name = recordSegment(claim, 0).Name })), msgConfigMap},
		"an unlabelled CA bundle": {update(caBundle(), with(caBundle(), func(c *corev1.ConfigMap) { c.Labels = nil })), msgConfigMap},
		"an egress CA bundle with the other bundle's label": {create(with(egressCABundle(), func(c *corev1.ConfigMap) {
			c.Labels = map[string]string{"airlock.dev/ca-bundle": "true"}
		})), msgConfigMap},
		"an unlabelled egress CA bundle": {update(egressCABundle(), with(egressCABundle(), func(c *corev1.ConfigMap) { c.Labels = nil })), msgConfigMap},
		"an egress CA of type Opaque": {create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: egressca.SecretName, Namespace: "airlock-system"},
			Type: corev1.SecretTypeOpaque}), msgSecretType},
		"a Deployment":                {create(&appsv1.Deployment{ObjectMeta: sandboxpod.ChildMeta(claim, "x")}), msgDeployment},
		"another Deployment deleted":  {remove(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: sandboxpodtest.Namespace}}), msgDeployment},
		"a Deployment in kube-system": {remove(in("kube-system", &appsv1.Deployment{ObjectMeta: sandboxpod.ChildMeta(claim, claim.Name)})), msgSystemNS},
		"another install's pod in mine": {func() request {
			r := create(in("airlock-two", pod))
			r.user = "system:serviceaccount:airlock-two:airlock-operator"
			return r
		}(), msgOwnNS},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			applies, refused := p.admit(t, tc.r)
			if !applies {
				t.Fatal("the policy does not apply")
			}
			if len(refused) == 0 {
				t.Fatal("admitted")
			}
			if !strings.HasPrefix(refused[0], tc.want) {
				t.Errorf("refused by:\n%s\nwant %q", strings.Join(refused, "\n"), tc.want)
			}
			// One rule broken: one refusal (a system namespace breaks the namespace rule only;
			// deleting another's object breaks its labels rule, which may be its kind's two; a
			// privileged container allows privilege escalation, or the API server refuses it).
			extra := slices.DeleteFunc(slices.Clone(refused[1:]), func(m string) bool {
				return tc.want == msgPrivileged && strings.HasPrefix(m, msgCaps) ||
					slices.ContainsFunc(alsoBroken[name], func(also string) bool { return strings.HasPrefix(m, also) })
			})
			if len(extra) > 0 && !strings.HasPrefix(name, "another") && !strings.HasPrefix(name, "an unlabelled") {
				t.Errorf("refused by more than the rule broken:\n%s", strings.Join(refused, "\n"))
			}
		})
	}
}

// TestPolicyAppliesToTheOperatorOnly: others' writes are not the policy's (its matchCondition),
// and the operator's are, whatever the namespace it is installed in.
func TestPolicyAppliesToTheOperatorOnly(t *testing.T) {
	policy, binding := loadPolicy(t)
	p := compile(t, policy)
	privileged := hostilePod(func(_ *corev1.Pod, _ *corev1.PodSpec, c *corev1.Container) {
		c.SecurityContext.Privileged = ptr.To(true)
	})
	for user, want := range map[string]bool{
		operatorUser: true,
		"system:serviceaccount:airlock-two:airlock-operator":         true,
		"system:serviceaccount:airlock-system:airlock-egress":        false,
		"system:serviceaccount:kube-system:replicaset-controller":    false,
		"system:serviceaccount:airlock-system:airlock-operator-evil": false,
		"airlock-operator": false,
		"kubernetes-admin": false,
	} {
		r := create(privileged)
		r.user = user
		if applies, _ := p.admit(t, r); applies != want {
			t.Errorf("the policy applies to %s: %v, want %v", user, applies, want)
		}
	}
	if policy.Spec.FailurePolicy == nil || *policy.Spec.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("failurePolicy %v, want Fail (closed)", policy.Spec.FailurePolicy)
	}
	if binding.Spec.PolicyName != policy.Name || !slices.Equal(binding.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) ||
		binding.Spec.ParamRef != nil || binding.Spec.MatchResources != nil {
		t.Errorf("binding %+v: want one of %s, Deny, every resource the policy matches", binding.Spec, policy.Name)
	}
}

// TestPolicyCoversTheOperatorsWrites: every resource the operator's ClusterRole lets it create,
// change or delete is the policy's, but those that are airlock's own (its API, but the session
// records, which it alone writes: their shape is the policy's), the events it reports and the
// TokenReviews it asks.
func TestPolicyCoversTheOperatorsWrites(t *testing.T) {
	policy, _ := loadPolicy(t)
	p := compile(t, policy)
	roles := decodeAll[rbacv1.ClusterRole](t, documents(t), "ClusterRole")
	kindOfResource := map[[2]string]string{}
	for kind, gr := range resourceOf {
		kindOfResource[gr] = kind
	}
	exempt := map[[2]string]bool{{"", "events"}: true, {"authentication.k8s.io", "tokenreviews"}: true}
	ops := map[string]admissionregistrationv1.OperationType{"create": admissionregistrationv1.Create, "update": admissionregistrationv1.Update,
		"patch": admissionregistrationv1.Update, "delete": admissionregistrationv1.Delete}
	checked := 0
	for _, role := range roles {
		for _, rule := range role.Rules {
			for _, group := range rule.APIGroups {
				for _, res := range rule.Resources {
					gr := [2]string{group, res}
					if (group == airlockv1alpha1.GroupName && res != "sessionrecords") || exempt[gr] {
						continue
					}
					for _, verb := range rule.Verbs {
						op, writes := ops[verb]
						if !writes {
							continue
						}
						kind, known := kindOfResource[gr]
						if !known || !p.matches(kind, "", op) {
							t.Errorf("the operator may %s %s.%s, which the policy does not check", verb, res, group)
						}
						checked++
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no write of the ClusterRole checked")
	}
}
