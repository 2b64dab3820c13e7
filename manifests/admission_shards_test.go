package manifests

// The claim-record policy's bindings, one per shard (rbac/admission_policy_claim_shards.yaml),
// and the policy that keeps a claim's shard label, and its children's, true.

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimname"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// shardChars are the characters a claim's name can end in (a DNS subdomain ends in [a-z0-9]).
const shardChars = "0123456789abcdefghijklmnopqrstuvwxyz"

// TestClaimRecordBoundPerShard: the claim-record policy is bound once per shard, each binding
// taking as params the claims of its shard and matching only the objects of that shard, and
// never to every claim of the namespace (the cost docs/security.md measured).
func TestClaimRecordBoundPerShard(t *testing.T) {
	_, bindings := paramPolicies(t)
	seen := map[string]bool{}
	for name, b := range bindings {
		if b.Spec.PolicyName != "airlock-operator-claim-record" {
			continue
		}
		ref := b.Spec.ParamRef
		if ref == nil || ref.Selector == nil || len(ref.Selector.MatchLabels) != 1 || len(ref.Selector.MatchExpressions) != 0 {
			t.Errorf("binding %s: paramRef %+v, want a selector of one shard", name, ref)
			continue
		}
		shard, ok := ref.Selector.MatchLabels[airlockv1alpha1.LabelClaimShard]
		if !ok || len(shard) != 1 || seen[shard] {
			t.Errorf("binding %s: shard %q (seen before: %v)", name, shard, seen[shard])
			continue
		}
		seen[shard] = true
		if ref.ParameterNotFoundAction == nil || *ref.ParameterNotFoundAction != admissionregistrationv1.AllowAction {
			t.Errorf("binding %s: parameterNotFoundAction %v, want Allow (a claim the API server does not show yet ties nothing)", name, ref.ParameterNotFoundAction)
		}
		m := b.Spec.MatchResources
		want := metav1.LabelSelector{MatchLabels: map[string]string{airlockv1alpha1.LabelClaimShard: shard}}
		if m == nil || m.ObjectSelector == nil || len(m.ObjectSelector.MatchExpressions) != 0 ||
			len(m.ObjectSelector.MatchLabels) != 1 || m.ObjectSelector.MatchLabels[airlockv1alpha1.LabelClaimShard] != shard {
			t.Errorf("binding %s: matchResources %+v, want objects of shard %q only (%v)", name, m, shard, want)
		} else if len(m.ResourceRules) != 0 || len(m.ExcludeResourceRules) != 0 || m.NamespaceSelector != nil {
			t.Errorf("binding %s: matchResources narrows more than the shard: %+v", name, m)
		}
		if len(b.Spec.ValidationActions) != 1 || b.Spec.ValidationActions[0] != admissionregistrationv1.Deny {
			t.Errorf("binding %s: actions %v", name, b.Spec.ValidationActions)
		}
	}
	for _, c := range shardChars {
		if !seen[string(c)] {
			t.Errorf("no binding of the claim-record policy for shard %q: a claim whose name ends in it has pods no record ties", c)
		}
	}
	// Every name the Sandbox API gives a claim falls in a bound shard.
	for _, name := range []string{claimname.For("agent", "s1", "codegen/default"), claimname.Replacement(claimname.For("agent", "s1", "codegen/default"))} {
		if !seen[claimname.Shard(name)] {
			t.Errorf("claim %s: shard %q unbound", name, claimname.Shard(name))
		}
	}
}

// TestClaimShardPolicy: the operator writes a claim only with its shard label, and a claim's pod
// and NetworkPolicy only with their claim's shard, so that every one of them is matched by the
// claim-record binding whose params hold its claim.
func TestClaimShardPolicy(t *testing.T) {
	policies, _ := policiesOf(t, shardsPolicyFile)
	if len(policies) != 1 || policies["airlock-operator-claim-shard"] == nil {
		t.Fatalf("policies of %s: %v, want airlock-operator-claim-shard", shardsPolicyFile, policies)
	}
	p := compile(t, policies["airlock-operator-claim-shard"])
	claim := testClaim(testRecord())
	replacement := with(claim, func(c *airlockv1alpha1.SandboxClaim) {
		c.Name = claimname.Replacement(c.Name)
		c.Labels[airlockv1alpha1.LabelClaimShard] = claimname.Shard(c.Name)
	})
	pod := claimPod(claim)
	np := sandboxpod.ClaimNetworkPolicy(claim, claim.Status.Frozen, allowedServices())
	const msg = "a claim, and a claim's pod, NetworkPolicy or Job, carries airlock.dev/claim-shard, the last character of the claim's name"
	const msgUID = "a Job that names a claim names its UID too (label airlock.dev/claim-uid), or is the child of that claim or of a kept workspace's record Job"
	job, kept := syncJob(claim), keptRecord(claim, true)
	const msgOwner = "a claim's pod or NetworkPolicy is the controller child of the claim it names (a pod of its airlock.dev/claim-uid)"
	const msgRetry = "a Job owned by a Job is a retry of that record, labelled airlock.dev/retry-of with its name"
	// A retry of a record an earlier operator wrote (without the claim's UID).
	olderRecord := with(kept, func(j *batchv1.Job) { j.UID = "uid-kept"; delete(j.Labels, airlockv1alpha1.LabelClaimUID) })
	retry := workspace.RetryJob(olderRecord, "workspace-content", sandboxpod.JobConfig("ghcr.io/airlock-dev/airlock:v0.1.0"))
	unlabel := func(c *airlockv1alpha1.SandboxClaim) { delete(c.Labels, airlockv1alpha1.LabelClaimShard) }
	tests := map[string]policyCase{
		"a claim as the Sandbox API builds it": {r: create(claim)},
		"a replacement claim":                  {r: create(replacement)},
		// The acquire's trace context (docs/record.md §1): metadata only, admitted as any annotation.
		"a claim with the acquire's traceparent": {r: create(with(claim, func(c *airlockv1alpha1.SandboxClaim) {
			c.Annotations = map[string]string{airlockv1alpha1.AnnotationTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
		}))},
		"a claim updated":                      {r: update(claim, with(claim, func(c *airlockv1alpha1.SandboxClaim) { c.Annotations = map[string]string{"a": "b"} }))},
		"a claim's pod":                        {r: create(pod)},
		"a claim's NetworkPolicy":              {r: create(np)},
		"a claim's NetworkPolicy updated":      {r: update(np, np)},
		"a claim without its shard":            {r: create(with(claim, unlabel)), want: msg},
		"a claim in another shard":             {r: create(with(claim, func(c *airlockv1alpha1.SandboxClaim) { c.Labels[airlockv1alpha1.LabelClaimShard] = "x" })), want: msg},
		"a claim's shard dropped by an update": {r: update(claim, with(claim, unlabel)), want: msg},
		"a replacement in its original's shard": {r: create(with(replacement, func(c *airlockv1alpha1.SandboxClaim) {
			c.Labels[airlockv1alpha1.LabelClaimShard] = claimname.Shard(claim.Name)
		})), want: msg},
		"a claim's pod without a shard":          {r: create(with(pod, func(p *corev1.Pod) { delete(p.Labels, airlockv1alpha1.LabelClaimShard) })), want: msg},
		"a claim's pod in another claim's shard": {r: create(with(pod, func(p *corev1.Pod) { p.Labels[airlockv1alpha1.LabelClaimShard] = "x" })), want: msg},
		"a claim's NetworkPolicy updated out of its shard": {r: update(np, with(np, func(n *networkingv1.NetworkPolicy) {
			n.Labels[airlockv1alpha1.LabelClaimShard] = "x"
		})), want: msg},
		"a claim's sync-back Job":                         {r: create(job)},
		"a claim's sync-back Job, by its owner only":      {r: create(with(job, func(j *batchv1.Job) { delete(j.Labels, airlockv1alpha1.LabelClaimUID) }))},
		"a kept workspace's record":                       {r: create(kept)},
		"a retry Job (a record's child, an older record)": {r: create(retry)},
		"a claim's Job without a shard":                   {r: create(with(job, func(j *batchv1.Job) { delete(j.Labels, airlockv1alpha1.LabelClaimShard) })), want: msg},
		"a record in another claim's shard":               {r: create(with(kept, func(j *batchv1.Job) { j.Labels[airlockv1alpha1.LabelClaimShard] = "x" })), want: msg},
		"a record that names no claim's UID":              {r: create(with(kept, func(j *batchv1.Job) { delete(j.Labels, airlockv1alpha1.LabelClaimUID) })), want: msgUID},
		"a retry naming no record":                        {r: create(with(retry, func(j *batchv1.Job) { delete(j.Labels, airlockv1alpha1.LabelRetryOf) })), want: msgRetry},
		"a retry naming another record":                   {r: create(with(retry, func(j *batchv1.Job) { j.Labels[airlockv1alpha1.LabelRetryOf] = "airlock-kept-other" })), want: msgRetry},
		"a Job owned by no controller": {r: create(with(job, func(j *batchv1.Job) {
			delete(j.Labels, airlockv1alpha1.LabelClaimUID)
			j.OwnerReferences[0].Controller = nil
		})), want: msgUID},
		// A claim's pod and policy are its controller children (a pod of the UID it carries):
		// one naming a claim that does not exist is garbage collected.
		"a claim's pod of no owner":              {r: create(with(pod, func(p *corev1.Pod) { p.OwnerReferences = nil })), want: msgOwner},
		"a claim's pod of another claim's":       {r: create(with(pod, func(p *corev1.Pod) { p.OwnerReferences[0].Name = "agent-9999999999" })), want: msgOwner},
		"a claim's pod owned by another UID":     {r: create(with(pod, func(p *corev1.Pod) { p.OwnerReferences[0].UID = "00000000-0000-0000-0000-0000000000e1" })), want: msgOwner},
		"a claim's pod, its owner no controller": {r: create(with(pod, func(p *corev1.Pod) { p.OwnerReferences[0].Controller = nil })), want: msgOwner},
		"a claim's NetworkPolicy of no owner":    {r: create(with(np, func(n *networkingv1.NetworkPolicy) { n.OwnerReferences = nil })), want: msgOwner},
		"a warm member (no claim yet)":           {r: create(memberPod(testRecord())), notApply: true},
		"someone else's claim": {r: request{user: "system:serviceaccount:team:deployer", operation: admissionregistrationv1.Create,
			namespace: claim.Namespace, object: with(claim, unlabel)}, notApply: true},
	}
	checkPolicyCases(t, p, tests)
}
