package manifests

// The param policies (rbac/admission_policy_params.yaml), evaluated with cel-go as the API server
// evaluates them for one param: the claim-record policy against the claim the object names. The
// API server's own answers, params looked up and all, are e2e/admission_never_test.go's.

import (
	"maps"
	"os"
	"strings"
	"testing"

	"github.com/google/cel-go/common/types"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

const paramsPolicyFile = "rbac/admission_policy_params.yaml"

// shardsPolicyFile holds the claim-record policy's bindings, one per shard, and the policy that
// keeps the shard labels true.
const shardsPolicyFile = "rbac/admission_policy_claim_shards.yaml"

// paramPolicies are the policies of paramsPolicyFile, and the bindings of it and of
// shardsPolicyFile, by name.
func paramPolicies(t *testing.T) (map[string]*admissionregistrationv1.ValidatingAdmissionPolicy, map[string]*admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	policies, bindings := policiesOf(t, paramsPolicyFile)
	_, shardBindings := policiesOf(t, shardsPolicyFile)
	maps.Copy(bindings, shardBindings)
	return policies, bindings
}

// policiesOf are the policies and the bindings of file, by name.
func policiesOf(t *testing.T, file string) (map[string]*admissionregistrationv1.ValidatingAdmissionPolicy, map[string]*admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	policies := map[string]*admissionregistrationv1.ValidatingAdmissionPolicy{}
	bindings := map[string]*admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "ValidatingAdmissionPolicy":
			p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
			if err := yaml.UnmarshalStrict([]byte(doc), p); err != nil {
				t.Fatal(err)
			}
			policies[p.Name] = p
		case "ValidatingAdmissionPolicyBinding":
			bd := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
			if err := yaml.UnmarshalStrict([]byte(doc), bd); err != nil {
				t.Fatal(err)
			}
			bindings[bd.Name] = bd
		}
	}
	return policies, bindings
}

// TestParamPoliciesCompileAndAreBound: every param policy compiles, has a paramKind, fails
// closed, and is bound (with a paramRef) to deny.
func TestParamPoliciesCompileAndAreBound(t *testing.T) {
	policies, bindings := paramPolicies(t)
	if len(policies) != 7 {
		t.Errorf("%d param policies, want 7", len(policies))
	}
	for name, p := range policies {
		compile(t, p)
		if p.Spec.ParamKind == nil || ptr.Deref(p.Spec.FailurePolicy, "") != admissionregistrationv1.Fail {
			t.Errorf("%s: paramKind %v, failurePolicy %v", name, p.Spec.ParamKind, p.Spec.FailurePolicy)
		}
		bound := false
		for _, b := range bindings {
			if b.Spec.PolicyName == name {
				bound = true
				if b.Spec.ParamRef == nil || len(b.Spec.ValidationActions) != 1 || b.Spec.ValidationActions[0] != admissionregistrationv1.Deny {
					t.Errorf("binding %s: paramRef %v, actions %v", b.Name, b.Spec.ParamRef, b.Spec.ValidationActions)
				}
			}
		}
		if !bound {
			t.Errorf("%s is bound by no binding", name)
		}
	}
}

// asParam is obj as the API server hands a param to CEL.
func asParam(t *testing.T, obj runtime.Object) map[string]any {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// boundClaim is claim as the API server has it: with a UID, its record frozen.
func boundClaim(record *airlockv1alpha1.FrozenSandbox) *airlockv1alpha1.SandboxClaim {
	c := testClaim(record)
	c.Status.Frozen = record
	return c
}

// policyCase is a request and what a policy answers it: "" admitted, or the message of the one
// validation that refuses it (a prefix of it, for long messages); with param, the policy is
// evaluated for that param (its paramKind's object); notApply: the policy does not apply.
type policyCase struct {
	r        request
	param    runtime.Object
	want     string
	notApply bool
}

// checkPolicyCases evaluates p on every case, each a subtest.
func checkPolicyCases(t *testing.T, p *compiledPolicy, tests map[string]policyCase) {
	t.Helper()
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var params any = types.NullValue
			if tc.param != nil {
				params = asParam(t, tc.param)
			}
			applies, refused := p.admitWith(t, tc.r, params)
			switch {
			case tc.notApply && applies:
				t.Errorf("the policy applies (refused %v), want not", refused)
			case tc.notApply:
			case !applies:
				t.Error("the policy does not apply")
			case tc.want == "" && len(refused) > 0:
				t.Errorf("refused:\n%s", strings.Join(refused, "\n"))
			case tc.want != "" && (len(refused) != 1 || !strings.HasPrefix(refused[0], tc.want)):
				t.Errorf("refused by:\n%s\nwant only %q", strings.Join(refused, "\n"), tc.want)
			}
		})
	}
}

func TestClaimRecordPolicy(t *testing.T) {
	policies, _ := paramPolicies(t)
	p := compile(t, policies["airlock-operator-claim-record"])
	record, egress := testRecord(), egressRecord(t)
	record.AllowedServices = []airlockv1alpha1.ServiceReference{{Namespace: "mirrors", Name: "goproxy"}}
	claim, egressClaim := boundClaim(record), boundClaim(egress)
	pod, egressPod := claimPod(claim), claimPod(egressClaim)
	other := boundClaim(record)
	other.Name, other.UID = "agent-9999999999", "00000000-0000-0000-0000-000000000009"
	withPod := func(mutate func(s *corev1.PodSpec, c *corev1.Container)) *corev1.Pod {
		p := pod.DeepCopy()
		mutate(&p.Spec, &p.Spec.Containers[0])
		return p
	}
	np := sandboxpod.ClaimNetworkPolicy(claim, record, allowedServices())
	tests := map[string]policyCase{
		"a claim's pod":                          {r: create(pod), param: claim},
		"a claim's pod, another claim":           {r: create(pod), param: other, notApply: true},
		"a claim's pod with egress":              {r: create(egressPod), param: egressClaim},
		"a claim's NetworkPolicy":                {r: create(np), param: claim},
		"a claim's NetworkPolicy, egress":        {r: create(sandboxpod.ClaimNetworkPolicy(egressClaim, egress, nil)), param: egressClaim},
		"a claim's pod, its record not seen yet": {r: create(pod), param: with(claim, func(c *airlockv1alpha1.SandboxClaim) { c.Status.Frozen = nil })},
		"another image":                          {r: create(withPod(func(_ *corev1.PodSpec, c *corev1.Container) { c.Image = "example.com/other:v1" })), param: claim, want: "a claim's pod runs its claim's record"},
		"another argument":                       {r: create(withPod(func(_ *corev1.PodSpec, c *corev1.Container) { c.Args = append(c.Args, "--listen=:9090") })), param: claim, want: "a claim's pod runs its claim's record"},
		"another claim's UID":                    {r: create(with(pod, func(p *corev1.Pod) { p.Labels[airlockv1alpha1.LabelClaimUID] = string(other.UID) })), param: claim, want: "a claim's pod runs its claim's record"},
		"another PVC": {r: create(withPod(func(s *corev1.PodSpec, _ *corev1.Container) {
			s.Volumes[0].PersistentVolumeClaim.ClaimName = "database-data"
		})), param: claim, want: "a claim's pod has its record's runtime class"},
		"a RuntimeClass the record lacks": {r: create(withPod(func(s *corev1.PodSpec, _ *corev1.Container) { s.RuntimeClassName = ptr.To("runc-unconfined") })), param: claim, want: "a claim's pod has its record's runtime class"},
		"another ConfigMap as the bundle": {r: create(with(egressPod, func(p *corev1.Pod) { lastConfigMap(p).Name = "settings" })), param: egressClaim, want: "a claim's pod has its record's runtime class"},
		"a ConfigMap the record's env lacks": {r: create(withPod(func(_ *corev1.PodSpec, c *corev1.Container) {
			c.Env = append(c.Env, corev1.EnvVar{Name: "X", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "x"}}})
		})), param: claim, want: "a claim's pod reads in its environment no ConfigMap"},
		"egress to labelled pods of another namespace": {r: create(with(np, func(n *networkingv1.NetworkPolicy) {
			n.Spec.Egress = append(n.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "payments"}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}})
		})), param: claim, want: "a claim's NetworkPolicy lets out only to the namespaces"},
		"egress to other pods of the gateway's namespace": {r: create(with(sandboxpod.ClaimNetworkPolicy(egressClaim, egress, nil), func(n *networkingv1.NetworkPolicy) {
			n.Spec.Egress[0].To[0].PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/component": "operator"}}
		})), param: egressClaim, want: "a claim's NetworkPolicy lets out in its egress gateway's namespace only"},
	}
	checkPolicyCases(t, p, tests)
}

// lastConfigMap is the ConfigMap volume of p (the egress CA bundle's).
func lastConfigMap(p *corev1.Pod) *corev1.ConfigMapVolumeSource {
	for i := range p.Spec.Volumes {
		if cm := p.Spec.Volumes[i].ConfigMap; cm != nil {
			return cm
		}
	}
	panic("no ConfigMap volume")
}

// TestClaimRecordPolicyJobs: a claim's workspace Jobs (its sync-back, its kept workspace's
// record) mount its record's workspace PVC only and run the sync image its record froze, when
// they carry its UID (label, or the claim as controller owner). A record frozen before the image
// was names none; a Job of an earlier claim of the same name is not tied to this one's record.
func TestClaimRecordPolicyJobs(t *testing.T) {
	policies, _ := policiesOf(t, paramsPolicyFile)
	p := compile(t, policies["airlock-operator-claim-record"])
	record := testRecord()
	record.SyncImage = "ghcr.io/airlock-dev/airlock:v0.1.0" // syncJob's
	claim := boundClaim(record)
	older := boundClaim(testRecord()) // frozen before the sync image was
	other := boundClaim(record)
	other.Name, other.UID = "agent-9999999999", "00000000-0000-0000-0000-000000000009"
	job, kept := syncJob(claim), keptRecord(claim, true)
	image := func(image string) func(*batchv1.Job) {
		return func(j *batchv1.Job) { j.Spec.Template.Spec.Containers[0].Image = image }
	}
	pvc := func(name string) func(*batchv1.Job) {
		return func(j *batchv1.Job) { j.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = name }
	}
	const msg = "a claim's workspace Job mounts only its record's workspace PVC and runs the sync image its record froze"
	tests := map[string]policyCase{
		"a claim's sync-back Job":                {r: create(job), param: claim},
		"a kept workspace's record":              {r: create(kept), param: claim},
		"a claim's sync-back Job, another claim": {r: create(with(job, image("example.com/exfil:v1"))), param: other, notApply: true},
		"a record frozen without a sync image":   {r: create(with(job, image("ghcr.io/airlock-dev/airlock:v0.2.0"))), param: older},
		"its record not seen yet":                {r: create(job), param: with(claim, func(c *airlockv1alpha1.SandboxClaim) { c.Status.Frozen = nil })},
		"another image":                          {r: create(with(job, image("example.com/exfil:v1"))), param: claim, want: msg},
		"another image, tied by its owner only":  {r: create(with(with(job, image("example.com/exfil:v1")), func(j *batchv1.Job) { delete(j.Labels, airlockv1alpha1.LabelClaimUID) })), param: claim, want: msg},
		"a record running another image":         {r: create(with(kept, image("example.com/exfil:v1"))), param: claim, want: msg},
		"another workload's PVC":                 {r: create(with(job, pvc("database-data"))), param: claim, want: msg},
		"a record on another workload's PVC":     {r: create(with(kept, pvc("database-data"))), param: claim, want: msg},
		"a second volume": {r: create(with(job, func(j *batchv1.Job) {
			j.Spec.Template.Spec.Volumes = append(j.Spec.Template.Spec.Volumes, corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		})), param: claim, want: msg},
		// The residual (docs/security.md): a record made after its claim went carries that
		// claim's UID, and a newer claim of the same name is not its param.
		"an earlier claim's record, a newer claim of the name": {r: create(with(kept, func(j *batchv1.Job) {
			j.Labels[airlockv1alpha1.LabelClaimUID] = "00000000-0000-0000-0000-0000000000e1"
			pvc("other-content")(j)
		})), param: claim},
	}
	checkPolicyCases(t, p, tests)
}

// TestRetryRecordPolicy: a held record's retry Job is admitted as workspace.RetryJob builds it
// (the record's controller child, its PVC, its image), and refused with another image, another
// PVC, or an owner that is not the record of its name by UID.
func TestRetryRecordPolicy(t *testing.T) {
	policies, _ := policiesOf(t, paramsPolicyFile)
	p := compile(t, policies["airlock-operator-retry-record"])
	claim := boundClaim(testRecord())
	record := with(keptRecord(claim, true), func(j *batchv1.Job) { j.UID = "00000000-0000-0000-0000-0000000000a1" })
	other := with(record, func(j *batchv1.Job) { j.Name, j.UID = "airlock-kept-other", "00000000-0000-0000-0000-0000000000a2" })
	retry := workspace.RetryJob(record, "workspace-content", sandboxpod.JobConfig(workspace.RecordImage(record, "unused")))
	const msg = "a retry Job is the controller child of the record it names (airlock.dev/retry-of), mounts only that record's PVC and runs its image"
	tests := map[string]policyCase{
		"a retry as built":        {r: create(retry), param: record},
		"a retry, another record": {r: create(with(retry, func(j *batchv1.Job) { j.Spec.Template.Spec.Containers[0].Image = "example.com/exfil:v1" })), param: other},
		"another image":           {r: create(with(retry, func(j *batchv1.Job) { j.Spec.Template.Spec.Containers[0].Image = "example.com/exfil:v1" })), param: record, want: msg},
		"another workload's PVC": {r: create(with(retry, func(j *batchv1.Job) {
			j.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = "database-data"
		})), param: record, want: msg},
		"a record of its name, recreated": {r: create(with(retry, func(j *batchv1.Job) { j.OwnerReferences[0].UID = "00000000-0000-0000-0000-0000000000a3" })), param: record, want: msg},
		"not its controller":              {r: create(with(retry, func(j *batchv1.Job) { j.OwnerReferences[0].Controller = nil })), param: record, want: msg},
	}
	checkPolicyCases(t, p, tests)
}
