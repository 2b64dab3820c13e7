//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimname"
	"github.com/airlock-dev/airlock/pkg/claimtoken"
	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
	"github.com/airlock-dev/airlock/pkg/recordstore"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// operatorUser is the operator's ServiceAccount as the API server names it.
const operatorUser = "system:serviceaccount:" + operatorNamespaceName + ":" + operatorServiceAccount

// policyRefusal is how the API server says the operator's admission policy refused a write
// (manifests/rbac/admission_policy.yaml).
const policyRefusal = "ValidatingAdmissionPolicy 'airlock-operator' with binding 'airlock-operator' denied request"

// asOperator returns a clientset that impersonates the operator's ServiceAccount, groups and all.
func asOperator(t *testing.T) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(operatorConfig())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// asOperatorAirlock is asOperator's airlock.dev clientset (SessionRecords).
func asOperatorAirlock(t *testing.T) airlockclientset.Interface {
	t.Helper()
	c, err := airlockclientset.NewForConfig(operatorConfig())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// operatorConfig is the suite's config impersonating the operator's ServiceAccount.
func operatorConfig() *rest.Config {
	cfg := rest.CopyConfig(restConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: operatorUser,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + operatorNamespaceName, "system:authenticated"}}
	return cfg
}

// policyClaim is a claim of namespace ns as the operator's builders read it: named, with a UID
// and a frozen record of a workspace and a scratch volume.
func policyClaim(ns string) *airlockv1alpha1.SandboxClaim {
	class := validClass("policy")
	class.Spec.AllowedServices = []airlockv1alpha1.ServiceReference{{Namespace: "mirrors", Name: "goproxy"}}
	registry := validRegistry(ns)
	claim := &airlockv1alpha1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-0123456789", Namespace: ns, UID: types.UID("00000000-0000-0000-0000-000000000001"),
			Labels: map[string]string{airlockv1alpha1.LabelClaimShard: claimname.Shard("agent-0123456789")}},
		Spec: airlockv1alpha1.SandboxClaimSpec{RuntimeName: "agent", Session: "s", Handle: "codegen/default", Sandbox: "codegen",
			ClassName: class.Name, WorkspaceDir: ns + "/sandboxes/agent-0123456789"},
	}
	claim.Status.Frozen = sandboxpod.Freeze(class, &registry.Spec.Sandboxes[0])
	claim.Status.Frozen.SyncImage = policySyncImage
	return claim
}

// policyClaimPod is the claim's pod as the operator creates it, the controller child of the
// claim (servePolicyClaim's, which exists: the pod is only ever written with dry run).
func policyClaimPod(claim *airlockv1alpha1.SandboxClaim) *corev1.Pod {
	pod := sandboxpod.ClaimPod(claim, claim.Status.Frozen)
	sandboxpod.UseTokenSecret(pod, claimtoken.ClaimSecretName(claim.Name, "token"))
	return pod
}

// TestOperatorWritesOnlyWhatAirlockBuilds: as installed, the operator's ServiceAccount can
// create what airlock builds and nothing of another shape (docs/security.md).
func TestOperatorWritesOnlyWhatAirlockBuilds(t *testing.T) {
	checkOperatorWritesOnlyWhatAirlockBuilds(t)
}

// checkOperatorWritesOnlyWhatAirlockBuilds is TestOperatorWritesOnlyWhatAirlockBuilds, for the
// real node's suite too. The namespace enforces no Pod Security level, so that every refusal is
// the policy's own; writes that must pass are made with dry run where nothing needs to stay.
func checkOperatorWritesOnlyWhatAirlockBuilds(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := newNamespaceAt(t, "airlock-policy", "privileged")
	op := asOperator(t)
	claim := servePolicyClaim(t, ctx, policyClaim(ns))
	pod := policyClaimPod(claim)
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	privileged := pod.DeepCopy()
	// Privileged, so escalation allowed too (the API server refuses the two together).
	privileged.Spec.Containers[0].SecurityContext.Privileged = ptr.To(true)
	privileged.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil

	// The policy is in force once the API server's policy informer has it: wait for that.
	eventually(t, time.Minute, "the operator's admission policy to refuse a privileged pod", func(ctx context.Context) (bool, error) {
		_, err := op.CoreV1().Pods(ns).Create(ctx, privileged, dryRun)
		if err == nil {
			return false, nil
		}
		if strings.Contains(err.Error(), policyRefusal) {
			return true, nil
		}
		return false, err
	})

	// kubectl --as the operator: a privileged pod, and a sandbox pod in kube-system.
	inKubeSystem := pod.DeepCopy()
	inKubeSystem.Namespace = metav1.NamespaceSystem
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want string
	}{
		"a privileged pod":     {privileged, "a pod the airlock operator writes runs no privileged container"},
		"a pod in kube-system": {inKubeSystem, "the airlock operator writes nothing in kube-system"},
	} {
		out, err := kubectlCreateAs(t, ctx, operatorUser, tc.pod)
		if err == nil || !strings.Contains(out, policyRefusal) || !strings.Contains(out, tc.want) {
			t.Errorf("kubectl create --as=%s %s: %v\n%s\nwant refused: %s", operatorUser, name, err, out, tc.want)
		}
	}

	checkPolicyAdmits(t, ctx, op, claim, pod)
	checkPolicyRefuses(t, ctx, op, claim, pod)
	checkPolicyRefusesWhatAirlockNeverWrites(t, ctx, op, claim, pod)
	checkPolicyUpdatesAndDeletes(t, ctx, op, pod)
	checkRecordsWebhookRefuses(t, ctx, op, claim)

	// The policy is the operator's only: the suite's administrator may create the privileged pod.
	if _, err := kubeClient.CoreV1().Pods(ns).Create(ctx, privileged, dryRun); err != nil {
		t.Errorf("the administrator's privileged pod: %v, want admitted", err)
	}
}

// kubectlCreateAs runs `kubectl create --dry-run=server --as=user -f` with obj and returns its output.
func kubectlCreateAs(t *testing.T, ctx context.Context, user string, obj *corev1.Pod) (string, error) {
	t.Helper()
	obj = obj.DeepCopy()
	obj.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "pod.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return kubectl(ctx, "create", "--dry-run=server", "--as="+user, "-f", file)
}

// checkPolicyAdmits: what the operator's builders make is admitted (dry run).
func checkPolicyAdmits(t *testing.T, ctx context.Context, op kubernetes.Interface, claim *airlockv1alpha1.SandboxClaim, pod *corev1.Pod) {
	t.Helper()
	ns, record := claim.Namespace, claim.Status.Frozen
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	// The namespace's registry as it is (the records webhook asks for its UID), and the Service
	// the record allows (the webhook asks that a policy open to it select its pods).
	reg, err := airlockClient.AirlockV1alpha1().ToolRegistries(ns).Get(ctx, "tools", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reg = reg.DeepCopy()
	reg.Spec.Sandboxes[0].Warm = 1
	goproxy := ensureGoproxyService(t, ctx)
	key := sandboxpod.PoolKey(reg.UID, "codegen", record)
	member := sandboxpod.MemberPod(reg, "codegen", key, sandboxpod.MemberName(reg.Name, "codegen"), record)
	// A member of a class with egress: the bundle airlock-egress-ca mounted, the proxy
	// credential read from its own key Secret.
	egressRecord := record.DeepCopy()
	egressRecord.Egress = &airlockv1alpha1.FrozenEgress{
		Hosts: []airlockv1alpha1.EgressHost{{Host: "proxy.golang.org", Ports: []airlockv1alpha1.EgressPort{443}}},
		Gateway: airlockv1alpha1.EgressGateway{Namespace: "airlock-system", Service: "airlock-egress", Address: "10.96.0.50", Port: 3128,
			TargetPort: intstr.FromInt32(3128), PodSelector: map[string]string{"app.kubernetes.io/name": "airlock-egress"}, CABundleConfigMap: "airlock-egress-ca"},
	}
	egressMember := sandboxpod.MemberPod(reg, "codegen", sandboxpod.PoolKey(reg.UID, "codegen", egressRecord), sandboxpod.MemberName(reg.Name, "codegen"), egressRecord)
	// A resume member (docs/nothing-lost.md, "Resume members"): a member on the claim's kept
	// workspace, labelled with its record and runtime.
	services := []*corev1.Service{goproxy}
	// Every object keeps its controller owner, as the operator writes it (the policies and the
	// records webhook ask for it; every write here is a dry run).
	token := sandboxpod.TokenSecret(claim, claimtoken.ClaimSecretName(claim.Name, "token"), "token")
	claimPolicy := sandboxpod.ClaimNetworkPolicy(claim, record, services)
	poolPolicy := sandboxpod.PoolNetworkPolicy(reg, "codegen", key, record, services)
	defaultDeny := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "airlock-default-deny", Labels: map[string]string{"airlock.dev/default-deny": "true"}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: airlockv1alpha1.LabelClaim, Operator: metav1.LabelSelectorOpExists}}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
	writes := map[string]func() error{
		"a claim's pod":   func() error { _, err := op.CoreV1().Pods(ns).Create(ctx, pod, dryRun); return err },
		"a claim's token": func() error { _, err := op.CoreV1().Secrets(ns).Create(ctx, token, dryRun); return err },
		"a claim's policy": func() error {
			_, err := op.NetworkingV1().NetworkPolicies(ns).Create(ctx, claimPolicy, dryRun)
			return err
		},
		"a default-deny policy": func() error {
			_, err := op.NetworkingV1().NetworkPolicies(ns).Create(ctx, defaultDeny, dryRun)
			return err
		},
		"a sync-back Job": func() error { _, err := op.BatchV1().Jobs(ns).Create(ctx, policyJob(claim), dryRun); return err },
		"the CA bundle": func() error {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "airlock-ca", Labels: map[string]string{"airlock.dev/ca-bundle": "true"}}}
			_, err := op.CoreV1().ConfigMaps(ns).Create(ctx, cm, dryRun)
			return err
		},
		"a session record segment": func() error {
			sr, err := recordstore.SessionRecord(claim, recordstore.Segment{N: 3, Lines: [][]byte{[]byte("{}")}})
			if err != nil {
				return err
			}
			_, err = asOperatorAirlock(t).AirlockV1alpha1().SessionRecords(ns).Create(ctx, sr, dryRun)
			return err
		},
	}
	// Warm members, once the registry's status holds their pools' records (docs/security.md,
	// "Warm members are tied to their pool's record").
	if servePoolRecords(t, ctx, ns, reg.UID, record, egressRecord) {
		// A resume member of a kept record that exists, and a member's key Secret controlled by
		// a member that exists (both made here, on the API-only plane, where nothing runs
		// them: the record is suspended, the member kwok's).
		// The record of an earlier claim's workspace of the namespace (the claim's own record is
		// neverJobs' and heldRecordsRetry's).
		earlier := claim.DeepCopy()
		earlier.Name, earlier.UID = "agent-earlier0009", "00000000-0000-0000-0000-000000000009"
		earlier.Spec.WorkspaceDir = ns + "/sandboxes/" + earlier.Name
		kept, err := kubeClient.BatchV1().Jobs(ns).Create(ctx, resumePolicyRecord(earlier), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating the kept record: %v", err)
		}
		resumeMember := sandboxpod.ResumeMemberPod(reg, "codegen", key, sandboxpod.MemberName(reg.Name, "codegen"), record, kept)
		made, err := kubeClient.CoreV1().Pods(ns).Create(ctx, sandboxpod.MemberPod(reg, "codegen", key, sandboxpod.MemberName(reg.Name, "codegen"), record), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating a warm member: %v", err)
		}
		memberKey := sandboxpod.MemberSecret(made, "key", "")
		writes["a warm member's key"] = func() error { _, err := op.CoreV1().Secrets(ns).Create(ctx, memberKey, dryRun); return err }
		members := map[string]*corev1.Pod{"a warm member": member, "a warm member with egress": egressMember, "a resume member": resumeMember}
		for name, m := range members {
			writes[name] = func() error { _, err := op.CoreV1().Pods(ns).Create(ctx, m, dryRun); return err }
		}
		writes["a pool's policy"] = func() error {
			_, err := op.NetworkingV1().NetworkPolicies(ns).Create(ctx, poolPolicy, dryRun)
			return err
		}
		checkWarmRecordRefuses(t, ctx, op, member, poolPolicy)
	}
	for name, write := range writes {
		// AlreadyExists is admitted: validating admission runs before the storage's create (an
		// installed operator, on the real node, writes the namespace's deny-all and CA bundle
		// for the test's runtime before the test's dry run).
		if err := write(); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Errorf("the operator's %s: %v, want admitted", name, err)
		}
	}
}

// servePoolRecords writes on the status of the namespace's registry ("tools") the keys and
// records of its entry codegen's pools (the registry's UID taken as regUID), as the warm pool
// controller writes them before it creates a member, and waits until the API server's policies
// see them (a dry run of such a member is admitted). It returns false, writing nothing, where an
// operator installed in the cluster serves the namespace (the real node): its warm pool
// controller keeps every registry's status to the pools it builds itself, and the real-node
// warm tests (TestRealNodeWarm, TestRealNodeEgress's warm member) create real members under the
// policy.
func servePoolRecords(t *testing.T, ctx context.Context, ns string, regUID types.UID, records ...*airlockv1alpha1.FrozenSandbox) bool {
	t.Helper()
	nodes, err := kubeClient.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range nodes.Items {
		if n := &nodes.Items[i]; !kwokNode(n) {
			t.Logf("node %s is real: the operator installed in %s runs and keeps the registries' statuses; warm members' dry runs are left to its real members", n.Name, operatorNamespaceName)
			return false
		}
	}
	reg, err := airlockClient.AirlockV1alpha1().ToolRegistries(ns).Get(ctx, "tools", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range records {
		reg.Status.Warm = append(reg.Status.Warm, airlockv1alpha1.WarmPoolStatus{Name: "codegen", Key: sandboxpod.PoolKey(regUID, "codegen", r), Record: r})
	}
	// The status is a map by name: one entry per sandbox. The test's second record gets an entry
	// of its own name (the policy looks a member's key up in every entry).
	for i := 1; i < len(reg.Status.Warm); i++ {
		reg.Status.Warm[i].Name = fmt.Sprintf("codegen-%d", i)
	}
	if _, err := airlockClient.AirlockV1alpha1().ToolRegistries(ns).UpdateStatus(ctx, reg, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("writing the registry's pool records: %v", err)
	}
	probe := sandboxpod.MemberPod(reg, "codegen", sandboxpod.PoolKey(regUID, "codegen", records[0]), sandboxpod.MemberName(reg.Name, "codegen"), records[0])
	op := asOperator(t)
	eventually(t, time.Minute, "a member of the registry's pool record admitted", func(ctx context.Context) (bool, error) {
		_, err := op.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil, nil
	})
	return true
}

// checkWarmRecordRefuses (issue 39 item 4): warm members of another shape than their pool's
// record, each admitted by the policies before airlock-operator-warm-record, are refused by it.
func checkWarmRecordRefuses(t *testing.T, ctx context.Context, op kubernetes.Interface, member *corev1.Pod, poolPolicy *networkingv1.NetworkPolicy) {
	t.Helper()
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	const refusedBy = "ValidatingAdmissionPolicy 'airlock-operator-warm-record'"
	for name, tc := range map[string]struct {
		mutate func(p *corev1.Pod, s *corev1.PodSpec, c *corev1.Container)
		want   string
	}{
		"another image": {func(_ *corev1.Pod, _ *corev1.PodSpec, c *corev1.Container) { c.Image = "example.com/other:v1" }, "a warm member runs its pool's record"},
		"another command's arguments": {func(_ *corev1.Pod, _ *corev1.PodSpec, c *corev1.Container) { c.Args = append(c.Args, "--listen=:9090") },
			"a warm member runs its pool's record"},
		"another RuntimeClass": {func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) { s.RuntimeClassName = ptr.To("e2e-other") },
			"a warm member has its pool record's runtime class"},
		"another workload's PVC": {func(_ *corev1.Pod, s *corev1.PodSpec, _ *corev1.Container) {
			for i := range s.Volumes {
				if s.Volumes[i].PersistentVolumeClaim != nil {
					s.Volumes[i].PersistentVolumeClaim.ClaimName = "database-data"
				}
			}
		}, "a warm member has its pool record's runtime class"},
		"a pool the registry's status does not name": {func(p *corev1.Pod, _ *corev1.PodSpec, _ *corev1.Container) {
			p.Labels[airlockv1alpha1.LabelWarmPool] = "0123456789abcdef0123"
		}, "a warm member or a pool's policy is written only while its registry's status holds"},
	} {
		m := member.DeepCopy()
		tc.mutate(m, &m.Spec, &m.Spec.Containers[0])
		_, err := op.CoreV1().Pods(m.Namespace).Create(ctx, m, dryRun)
		if err == nil || !strings.Contains(err.Error(), refusedBy) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("a warm member with %s: %v; want refused by %s: %s", name, err, refusedBy, tc.want)
		}
	}
	// A pool's policy that lets its members out to labelled pods of another namespace.
	np := poolPolicy.DeepCopy()
	np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "payments"}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}})
	const want = "a pool's NetworkPolicy lets out only to the namespaces"
	if _, err := op.NetworkingV1().NetworkPolicies(np.Namespace).Create(ctx, np, dryRun); err == nil || !strings.Contains(err.Error(), refusedBy) || !strings.Contains(err.Error(), want) {
		t.Errorf("a pool's policy to another namespace's pods: %v; want refused by %s: %s", err, refusedBy, want)
	}
}

// resumePolicyRecord is the record of the claim's workspace, kept, as the claim controller
// writes it (a resume member is built from it).
func resumePolicyRecord(claim *airlockv1alpha1.SandboxClaim) *batchv1.Job {
	job := workspace.Record(claim, "workspace-content", sandboxpod.JobConfig(e2eImage()), time.Now())
	job.UID = "00000000-0000-0000-0000-000000000003"
	return job
}

// ensureGoproxyService is the Service mirrors/goproxy that policyClaim's record allows, created
// (with its namespace) by the suite's administrator if it is not there, and left for other tests.
func ensureGoproxyService(t *testing.T, ctx context.Context) *corev1.Service {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mirrors", Labels: map[string]string{"airlock.dev/e2e": "true"}}}
	if _, err := kubeClient.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "goproxy", Namespace: "mirrors"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "goproxy"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	got, err := kubeClient.CoreV1().Services("mirrors").Create(ctx, svc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, err = kubeClient.CoreV1().Services("mirrors").Get(ctx, "goproxy", metav1.GetOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// policyJob is a claim's sync-back Job as the claim controller builds it (workspace.SyncJob,
// labelled with the claim's UID, the record's sync image), the claim's controller child.
func policyJob(claim *airlockv1alpha1.SandboxClaim) *batchv1.Job {
	meta := sandboxpod.ChildMeta(claim, workspace.SyncJobName(claim))
	return workspace.SyncJob(meta, claim, claim.Status.Frozen.WorkspaceClaimName, sandboxpod.JobConfig(workspace.SyncImage(claim, e2eImage())), 1, false, workspace.DefaultTargetVersions)
}

// checkPolicyRefuses: each write of another shape is refused, by the policy, with the message of
// the rule it breaks.
func checkPolicyRefuses(t *testing.T, ctx context.Context, op kubernetes.Interface, claim *airlockv1alpha1.SandboxClaim, pod *corev1.Pod) {
	t.Helper()
	ns := claim.Namespace
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	podWith := func(mutate func(*corev1.Pod)) func() error {
		p := pod.DeepCopy()
		mutate(p)
		return func() error { _, err := op.CoreV1().Pods(p.Namespace).Create(ctx, p, dryRun); return err }
	}
	token := sandboxpod.TokenSecret(claim, claimtoken.ClaimSecretName(claim.Name, "token"), "token")
	token.OwnerReferences = nil
	np := sandboxpod.ClaimNetworkPolicy(claim, claim.Status.Frozen, nil)
	tests := map[string]struct {
		write func() error
		want  string
	}{
		"a hostPath volume": {podWith(func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		}), "has no hostPath, projected or other volume"},
		"the ServiceAccount token automounted": {podWith(func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = ptr.To(true) }),
			"gets no ServiceAccount token"},
		"hostNetwork":                    {podWith(func(p *corev1.Pod) { p.Spec.HostNetwork = true }), "shares no host namespace"},
		"hostPID":                        {podWith(func(p *corev1.Pod) { p.Spec.HostPID = true }), "shares no host namespace"},
		"a pod without airlock's labels": {podWith(func(p *corev1.Pod) { p.Labels = map[string]string{"app": "x"} }), "is a sandbox pod, labelled"},
		// A resume member mounts a kept workspace of its own namespace only (issue 39 item 5).
		"a resume member on another namespace's workspace": {func() error {
			reg := validRegistry(ns)
			reg.UID = "00000000-0000-0000-0000-000000000002"
			record := claim.Status.Frozen
			m := sandboxpod.ResumeMemberPod(reg, "codegen", sandboxpod.PoolKey(reg.UID, "codegen", record), sandboxpod.MemberName(reg.Name, "codegen"), record, resumePolicyRecord(claim))
			other := "other-namespace/sandboxes/" + strings.TrimPrefix(claim.Spec.WorkspaceDir, ns+"/sandboxes/")
			m.Annotations[airlockv1alpha1.AnnotationResumesDir] = other
			for i := range m.Spec.Containers[0].VolumeMounts {
				if v := &m.Spec.Containers[0].VolumeMounts[i]; v.SubPath != "" {
					v.SubPath = other
				}
			}
			_, err := op.CoreV1().Pods(ns).Create(ctx, m, dryRun)
			return err
		}, "mounts only its own workspace"},
		"a pod in the operator's namespace": {podWith(func(p *corev1.Pod) { p.Namespace = operatorNamespaceName }),
			"in its own namespace the airlock operator writes only its Secrets"},
		"another Secret mounted": {podWith(func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "x", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "db-credentials"}}})
		}), "reads no Secret but its own"},
		"a ServiceAccount token Secret": {func() error {
			s := token.DeepCopy()
			s.Type, s.Annotations = corev1.SecretTypeServiceAccountToken, map[string]string{corev1.ServiceAccountNameKey: "default"}
			_, err := op.CoreV1().Secrets(ns).Create(ctx, s, dryRun)
			return err
		}, "is of type Opaque"},
		"a policy of every pod": {func() error {
			n := np.DeepCopy()
			n.Spec.PodSelector = metav1.LabelSelector{}
			_, err := op.NetworkingV1().NetworkPolicies(ns).Create(ctx, n, dryRun)
			return err
		}, "selects only sandbox pods"},
		"egress to the world": {func() error {
			n := np.DeepCopy()
			n.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}}}}
			_, err := op.NetworkingV1().NetworkPolicies(ns).Create(ctx, n, dryRun)
			return err
		}, "no ipBlock"},
		"a privileged Job": {func() error {
			j := policyJob(claim)
			j.Spec.Template.Spec.Containers[0].SecurityContext.Privileged = ptr.To(true)
			j.Spec.Template.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil
			_, err := op.BatchV1().Jobs(ns).Create(ctx, j, dryRun)
			return err
		}, "runs no privileged container"},
		"another ConfigMap": {func() error {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Labels: map[string]string{"airlock.dev/ca-bundle": "true"}}}
			_, err := op.CoreV1().ConfigMaps(ns).Create(ctx, cm, dryRun)
			return err
		}, "the only ConfigMap the airlock operator writes"},
		"a session record in a ConfigMap": {func() error {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: recordstore.Name(claim.Name, claim.UID, 0),
				Labels: map[string]string{recordstore.LabelRecordOf: string(claim.UID), recordstore.LabelRecordClaim: claim.Name}}}
			_, err := op.CoreV1().ConfigMaps(ns).Create(ctx, cm, dryRun)
			return err
		}, "the only ConfigMap the airlock operator writes"},
		"a record segment of another claim's name": {func() error {
			sr, err := recordstore.SessionRecord(claim, recordstore.Segment{Lines: [][]byte{[]byte("{}")}})
			if err != nil {
				return err
			}
			sr.Labels[recordstore.LabelRecordClaim], sr.Spec.ClaimName = "someone-else", "someone-else"
			_, err = asOperatorAirlock(t).AirlockV1alpha1().SessionRecords(ns).Create(ctx, sr, dryRun)
			return err
		}, "a SessionRecord the airlock operator writes"},
		"a record segment without an owner": {func() error {
			sr, err := recordstore.SessionRecord(claim, recordstore.Segment{Lines: [][]byte{[]byte("{}")}})
			if err != nil {
				return err
			}
			sr.OwnerReferences = nil
			_, err = asOperatorAirlock(t).AirlockV1alpha1().SessionRecords(ns).Create(ctx, sr, dryRun)
			return err
		}, "a SessionRecord the airlock operator writes"},
	}
	// A claim's pod in the operator's namespace is refused by the first policy, or (no claim there)
	// by a param policy before it: admission_never_test.go.
	// A resume member where no pool record is on the registry's status (the real node: its
	// operator keeps the status) is refused for that first.
	or := map[string]string{"a pod in the operator's namespace": paramsNotFound,
		"a resume member on another namespace's workspace": "a warm member or a pool's policy is written only while its registry's status holds"}
	for name, tc := range tests {
		err := tc.write()
		if err == nil || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'airlock-operator") || !refusedAs(err, neverCase{want: tc.want, or: or[name]}) {
			t.Errorf("the operator's %s: %v; want refused by the policy: %s", name, err, tc.want)
		}
	}
}

// checkPolicyUpdatesAndDeletes: the operator adopts a warm member (a merge patch of its labels),
// may not strip its airlock labels, may delete it, and may not delete a pod that is not airlock's.
func checkPolicyUpdatesAndDeletes(t *testing.T, ctx context.Context, op kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	ns := pod.Namespace
	created, err := op.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the operator's pod: %v", err)
	}
	patch := func(labels map[string]any) error {
		b, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": created.UID, "labels": labels}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = op.CoreV1().Pods(ns).Patch(ctx, created.Name, types.MergePatchType, b, metav1.PatchOptions{})
		return err
	}
	if err := patch(map[string]any{airlockv1alpha1.LabelWarmPool: nil, airlockv1alpha1.LabelRuntime: "agent"}); err != nil {
		t.Errorf("the operator's label patch of its pod: %v, want admitted", err)
	}
	if err := patch(map[string]any{airlockv1alpha1.LabelClaim: nil}); err == nil || !strings.Contains(err.Error(), policyRefusal) {
		t.Errorf("the operator's patch dropping airlock.dev/claim: %v, want refused by the policy", err)
	}
	web := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "not-airlocks", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: e2eImage()}}}}
	other, err := kubeClient.CoreV1().Pods(ns).Create(ctx, web, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the administrator's pod: %v", err)
	}
	if err := op.CoreV1().Pods(ns).Delete(ctx, other.Name, metav1.DeleteOptions{}); err == nil || !strings.Contains(err.Error(), policyRefusal) {
		t.Errorf("the operator's deletion of a pod that is not airlock's: %v, want refused by the policy", err)
	}
	if err := op.CoreV1().Pods(ns).Delete(ctx, created.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &created.UID}}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("the operator's deletion of its pod: %v, want admitted", err)
	}
}
