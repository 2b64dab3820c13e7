//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// idleMembers returns the registry's idle warm members (not being deleted), by name: the pool's
// own, not its resume members (resumeMembers).
func (e *claimEnv) idleMembers(ctx context.Context) (map[string]*corev1.Pod, error) {
	return e.members(ctx, false)
}

// resumeMembers returns the registry's idle resume members (not being deleted), by name.
func (e *claimEnv) resumeMembers(ctx context.Context) (map[string]*corev1.Pod, error) {
	return e.members(ctx, true)
}

func (e *claimEnv) members(ctx context.Context, resume bool) (map[string]*corev1.Pod, error) {
	pods, err := kubeClient.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{
		airlockv1alpha1.LabelWarmRegistry: e.runtime.Spec.ToolRegistryRef.Name,
		airlockv1alpha1.LabelClaim:        "",
	}).String()})
	if err != nil {
		return nil, err
	}
	out := map[string]*corev1.Pod{}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil && sandboxpod.IsResumeMember(p) == resume {
			out[p.Name] = p
		}
	}
	return out, nil
}

// waitWarm waits until the registry's status says ready of wanted members, for its current
// generation, and as many idle Ready members exist; it returns them.
func (e *claimEnv) waitWarm(t *testing.T, ready int32, timeout time.Duration) map[string]*corev1.Pod {
	t.Helper()
	defer func() {
		if t.Failed() {
			e.dumpWarm(t)
		}
	}()
	var members map[string]*corev1.Pod
	eventually(t, timeout, fmt.Sprintf("%d warm members Ready", ready), func(ctx context.Context) (bool, error) {
		r, err := airlockClient.AirlockV1alpha1().ToolRegistries(e.ns).Get(ctx, e.runtime.Spec.ToolRegistryRef.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if r.Status.ObservedGeneration != r.Generation || r.Status.WarmReady != ready {
			return false, nil
		}
		if members, err = e.idleMembers(ctx); err != nil {
			return false, err
		}
		n := int32(0)
		for _, p := range members {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					n++
				}
			}
		}
		return n == ready && int32(len(members)) == ready, nil
	})
	return members
}

// dumpWarm logs what a wait for the pool saw last: the registry's status and every pod of the
// namespace, with its node, phase and conditions.
func (e *claimEnv) dumpWarm(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r, err := airlockClient.AirlockV1alpha1().ToolRegistries(e.ns).Get(ctx, e.runtime.Spec.ToolRegistryRef.Name, metav1.GetOptions{}); err != nil {
		t.Logf("the registry: %v", err)
	} else {
		t.Logf("the registry: generation %d, observed %d, warmReady %d", r.Generation, r.Status.ObservedGeneration, r.Status.WarmReady)
		for _, w := range r.Status.Warm {
			t.Logf("  pool %s: wanted %d ready %d starting %d, record %v, message %q", w.Name, w.Wanted, w.Ready, w.Starting, w.Record != nil, w.Message)
		}
	}
	pods, err := kubeClient.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("the pods: %v", err)
		return
	}
	for _, p := range pods.Items {
		t.Logf("pod %s: node %q, phase %s, deleting %v, labels %v, conditions %v", p.Name, p.Spec.NodeName, p.Status.Phase,
			p.DeletionTimestamp != nil, p.Labels, p.Status.Conditions)
	}
}

// TestWarmPoolAdoption (issue 14): a registry sandbox with warm: 2 gets two Ready members under
// the namespace's restricted Pod Security level, each behind the pool's default-deny policy with
// a key Secret of its own; a claim adopts one (the same pod, not restarted, now the claim's) and
// is Bound at its IP; the pool refills; a member deleted is replaced; an edit of the entry
// replaces the idle members only.
func TestWarmPoolAdoption(t *testing.T) {
	ctx := context.Background()
	e := newClaimEnv(t, "airlock-warm", claimEnvOptions{maxConcurrent: 10, maxPerSession: 3, maxInstances: 20})
	e.updateRegistry(t, func(r *airlockv1alpha1.ToolRegistry) { r.Spec.Sandboxes[0].Warm = 2 })
	startClaimOperator(t, e.ns)
	members := e.waitWarm(t, 2, 60*time.Second)

	policies, err := kubeClient.NetworkingV1().NetworkPolicies(e.ns).List(ctx, metav1.ListOptions{LabelSelector: airlockv1alpha1.LabelWarmRegistry})
	if err != nil || len(policies.Items) != 1 {
		t.Fatalf("pool policies %v (%v), want one", policies, err)
	}
	pol := policies.Items[0]
	for name, m := range members {
		if !labels.SelectorFromSet(pol.Spec.PodSelector.MatchLabels).Matches(labels.Set(m.Labels)) {
			t.Errorf("the pool policy does not select member %s", name)
		}
		if m.CreationTimestamp.Before(&pol.CreationTimestamp) {
			t.Errorf("member %s was created before the pool's policy", name)
		}
		// Created once the pod is in the pool controller's cache (kwok makes a pod Ready without
		// its Secret; a kubelet does not start it before).
		var secret *corev1.Secret
		eventually(t, 30*time.Second, "member "+name+"'s key Secret", func(ctx context.Context) (bool, error) {
			var err error
			secret, err = kubeClient.CoreV1().Secrets(e.ns).Get(ctx, name+"-key", metav1.GetOptions{})
			return err == nil, nil
		})
		if ref := metav1.GetControllerOf(secret); ref == nil || ref.UID != m.UID {
			t.Errorf("member %s key Secret controller %+v, want the pod", name, ref)
		}
	}

	// Adoption: the claim gets one of the members, the very pod.
	c := e.waitPhase(t, e.createClaim(t, "session-1", "codegen/default", "").Name, airlockv1alpha1.ClaimBound, 30*time.Second)
	if c.Status.Warm == nil {
		t.Fatalf("the claim was bound cold: %+v", c.Status)
	}
	member, ok := members[c.Status.Warm.Member]
	if !ok {
		t.Fatalf("the claim adopted %s, not one of the members %v", c.Status.Warm.Member, slices.Collect(maps.Keys(members)))
	}
	pod := e.pod(t, member.Name)
	if pod.UID != member.UID || !metav1.IsControlledBy(pod, c) || pod.Labels[airlockv1alpha1.LabelClaim] != c.Name {
		t.Errorf("the adopted pod: uid %s (was %s), controller %+v, claim label %q", pod.UID, member.UID, metav1.GetControllerOf(pod), pod.Labels[airlockv1alpha1.LabelClaim])
	}
	if want := "http://" + pod.Status.PodIP + ":8080"; len(c.Status.Addresses) != 1 || c.Status.Addresses[0].URL != want {
		t.Errorf("addresses %+v, want %s", c.Status.Addresses, want)
	}
	if _, err := kubeClient.CoreV1().Pods(e.ns).Get(ctx, c.Name, metav1.GetOptions{}); err == nil {
		t.Error("the warm claim also got a pod of its own")
	}
	// The claim's own policy selects the pod, and then the pool's no longer does.
	eventually(t, 30*time.Second, "the claim's own policy, and the pod out of the pool's", func(ctx context.Context) (bool, error) {
		np, err := kubeClient.NetworkingV1().NetworkPolicies(e.ns).Get(ctx, c.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		podLabels := labels.Set(e.pod(t, member.Name).Labels)
		return labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels).Matches(podLabels) &&
			!labels.SelectorFromSet(pol.Spec.PodSelector.MatchLabels).Matches(podLabels), nil
	})

	// The pool refills, with a new member.
	refilled := e.waitWarm(t, 2, 60*time.Second)
	if _, again := refilled[member.Name]; again {
		t.Errorf("the adopted member %s is counted idle again", member.Name)
	}

	// A member deleted is replaced.
	var victim string
	for name := range refilled {
		victim = name
		break
	}
	if err := kubeClient.CoreV1().Pods(e.ns).Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	replaced := e.waitWarm(t, 2, 60*time.Second)
	if _, still := replaced[victim]; still {
		t.Errorf("the deleted member %s is still counted", victim)
	}

	// An edit of the entry (another tool list: another record) replaces the idle members; the
	// adopted one is left as it is.
	e.updateRegistry(t, func(r *airlockv1alpha1.ToolRegistry) {
		r.Spec.Sandboxes[0].AllowedTools = []airlockv1alpha1.ToolName{"Read", "Bash", "Write"}
	})
	eventually(t, 60*time.Second, "the idle members replaced after the edit", func(ctx context.Context) (bool, error) {
		now, err := e.idleMembers(ctx)
		if err != nil {
			return false, err
		}
		for name := range replaced {
			if _, still := now[name]; still {
				return false, nil
			}
		}
		return len(now) == 2, nil
	})
	if p := e.pod(t, member.Name); p.UID != member.UID || p.DeletionTimestamp != nil || !metav1.IsControlledBy(p, c) {
		t.Errorf("the adopted member changed with the edit: uid %s, deleting %v", p.UID, p.DeletionTimestamp != nil)
	}
	// The old record's pool policy selects no pod any more: it is collected.
	eventually(t, 30*time.Second, "the old pool policy collected", func(ctx context.Context) (bool, error) {
		_, err := kubeClient.NetworkingV1().NetworkPolicies(e.ns).Get(ctx, pol.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if got, err := e.getClaim(ctx, c.Name); err != nil || got.Status.Phase != airlockv1alpha1.ClaimBound {
		t.Errorf("the warm claim after the edit: %v (%v)", got.Status.Phase, err)
	}
	// A claim admitted after the edit adopts a member of the new record only.
	after := e.waitPhase(t, e.createClaim(t, "session-2", "codegen/default", "").Name, airlockv1alpha1.ClaimBound, 30*time.Second)
	if after.Status.Warm != nil {
		if _, old := replaced[after.Status.Warm.Member]; old {
			t.Errorf("a claim admitted after the edit adopted %s, a member of the old record", after.Status.Warm.Member)
		}
	}
	if r := after.Status.Frozen; r == nil || !slices.Equal(r.AllowedTools, []airlockv1alpha1.ToolName{"Read", "Bash", "Write"}) {
		t.Errorf("the later claim's record %+v", r)
	}
}

// TestWarmPoolBurst (issue 14): a burst larger than the pool binds every claim; the oldest get
// the warm members, no member is given twice, and the rest are built cold, each with a pod of
// its own.
func TestWarmPoolBurst(t *testing.T) {
	ctx := context.Background()
	e := newClaimEnv(t, "airlock-warm-burst", claimEnvOptions{maxConcurrent: 10, maxPerSession: 3, maxInstances: 20})
	e.updateRegistry(t, func(r *airlockv1alpha1.ToolRegistry) { r.Spec.Sandboxes[0].Warm = 3 })
	// A slow refill, so that the burst meets a pool of 3. The refill rate is the operator's, for
	// every pool it sees: the pools of the namespaces earlier tests leave being deleted take
	// their turns too (a CI-equivalent run waited more than a minute), so the wait is long.
	startClaimOperatorWithArgs(t, e.ns, "--warm-refill-rate=0.2")
	e.waitWarm(t, 3, 3*time.Minute)

	const n = 7
	names := make([]string, n)
	for i := range n {
		names[i] = e.createClaim(t, fmt.Sprintf("session-%d", i), "codegen/default", "").Name
	}
	byMember := map[string]string{}
	var warm, cold []string
	var mu sync.Mutex
	for _, name := range names {
		c := e.waitPhase(t, name, airlockv1alpha1.ClaimBound, 60*time.Second)
		mu.Lock()
		if c.Status.Warm != nil {
			if other, dup := byMember[c.Status.Warm.Member]; dup {
				t.Errorf("member %s given to %s and %s", c.Status.Warm.Member, other, name)
			}
			byMember[c.Status.Warm.Member] = name
			warm = append(warm, name)
		} else {
			cold = append(cold, name)
			if p := e.pod(t, name); !metav1.IsControlledBy(p, c) {
				t.Errorf("cold claim %s: its pod is not its own", name)
			}
		}
		mu.Unlock()
	}
	if len(warm) < 1 || len(warm) > 3+1 || len(warm)+len(cold) != n {
		t.Errorf("warm %v cold %v: want at most the pool (3, and one refill) warm, the rest cold", warm, cold)
	}
	pods, err := kubeClient.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: airlockv1alpha1.LabelClaim})
	if err != nil {
		t.Fatal(err)
	}
	owners := map[string]int{}
	for _, p := range pods.Items {
		if ref := metav1.GetControllerOf(&p); ref != nil && ref.Kind == "SandboxClaim" && p.DeletionTimestamp == nil {
			owners[ref.Name]++
		}
	}
	for _, name := range names {
		if owners[name] != 1 {
			t.Errorf("claim %s controls %d pods, want 1", name, owners[name])
		}
	}
}

// TestWarmPoolRefusedMembersReported (issue 14): where the namespace refuses the members' pods
// (here a ResourceQuota of no pods; a Pod Security level they did not meet would be the same
// refusal), no member exists, and the registry's status says why.
func TestWarmPoolRefusedMembersReported(t *testing.T) {
	ctx := context.Background()
	e := newClaimEnv(t, "airlock-warm-quota", claimEnvOptions{maxConcurrent: 5, maxPerSession: 3, maxInstances: 10})
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "no-pods", Namespace: e.ns},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}},
	}
	if _, err := kubeClient.CoreV1().ResourceQuotas(e.ns).Create(ctx, quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The quota controller must have counted it before a pod is refused.
	eventually(t, 30*time.Second, "the quota's status", func(ctx context.Context) (bool, error) {
		q, err := kubeClient.CoreV1().ResourceQuotas(e.ns).Get(ctx, quota.Name, metav1.GetOptions{})
		return err == nil && q.Status.Hard != nil, err
	})
	e.updateRegistry(t, func(r *airlockv1alpha1.ToolRegistry) { r.Spec.Sandboxes[0].Warm = 2 })
	startClaimOperator(t, e.ns)
	eventually(t, 60*time.Second, "the registry's status to say why members are missing", func(ctx context.Context) (bool, error) {
		r, err := airlockClient.AirlockV1alpha1().ToolRegistries(e.ns).Get(ctx, "tools", metav1.GetOptions{})
		if err != nil || len(r.Status.Warm) != 1 {
			return false, err
		}
		st := r.Status.Warm[0]
		return st.Wanted == 2 && st.Ready == 0 && strings.Contains(st.Message, "forbidden"), nil
	})
	if members, err := e.idleMembers(ctx); err != nil || len(members) != 0 {
		t.Errorf("members %d (%v), want none", len(members), err)
	}
}

// TestWarmPoolWithoutReading (issue 38): with the operator's ingress on but no evidence read
// (--read-isolation-evidence=false, as on kwok, where no sandboxd runs), warm pools work as they
// did before members were read: members are adoptable unread and carry no evidence record, the
// pool's policy lets nothing of the operator in, and a claim of a class that takes any kernel
// adopts one and is Bound without a statement. A class that needs a kernel of its own never
// adopts (fail closed): its claim is built cold and fails IsolationNotMet, its pool's member
// left idle.
func TestWarmPoolWithoutReading(t *testing.T) {
	ctx := context.Background()
	e := newClaimEnv(t, "airlock-warm-noread", claimEnvOptions{maxConcurrent: 10, maxPerSession: 3, maxInstances: 20})
	e.updateRegistry(t, func(r *airlockv1alpha1.ToolRegistry) { r.Spec.Sandboxes[0].Warm = 1 })
	startClaimOperatorWithArgs(t, e.ns, "--operator-pod-labels=app.kubernetes.io/name=airlock,app.kubernetes.io/component=operator", "--read-isolation-evidence=false")
	for name, m := range e.waitWarm(t, 1, 60*time.Second) {
		if _, ok := m.Annotations[airlockv1alpha1.AnnotationIsolationEvidence]; ok {
			t.Errorf("member %s carries an evidence record, but nothing is read", name)
		}
	}
	policies, err := kubeClient.NetworkingV1().NetworkPolicies(e.ns).List(ctx, metav1.ListOptions{LabelSelector: airlockv1alpha1.LabelWarmRegistry})
	if err != nil || len(policies.Items) != 1 {
		t.Fatalf("pool policies %v (%v), want one", policies, err)
	}
	if in := policies.Items[0].Spec.Ingress; len(in) != 1 {
		t.Errorf("the pool's policy has ingress %+v, want the namespace's rule alone (the operator reads nothing)", in)
	}

	c := e.waitPhase(t, e.createClaim(t, "session-1", "codegen/default", "").Name, airlockv1alpha1.ClaimBound, 30*time.Second)
	if c.Status.Warm == nil || c.Status.Isolation != nil {
		t.Fatalf("claim warm %+v isolation %+v, want adopted, without a statement", c.Status.Warm, c.Status.Isolation)
	}

	// A kernel of its own: the pool is rebuilt for the new record, and its claim never adopts.
	before := e.waitWarm(t, 1, 60*time.Second)
	eventually(t, 10*time.Second, "the class update", func(ctx context.Context) (bool, error) {
		class, err := airlockClient.AirlockV1alpha1().SandboxClasses().Get(ctx, e.class, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		class.Spec.Isolation = &airlockv1alpha1.SandboxIsolation{Kernel: airlockv1alpha1.KernelDedicated}
		_, err = airlockClient.AirlockV1alpha1().SandboxClasses().Update(ctx, class, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	})
	var member string
	eventually(t, 60*time.Second, "a member of the new record Ready", func(ctx context.Context) (bool, error) {
		now, err := e.idleMembers(ctx)
		if err != nil {
			return false, err
		}
		for name, p := range now {
			if _, old := before[name]; old {
				return false, nil
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					member = name
				}
			}
		}
		return member != "", nil
	})
	d := e.waitPhase(t, e.createClaim(t, "session-2", "codegen/default", "").Name, airlockv1alpha1.ClaimFailed, 60*time.Second)
	if d.Status.Warm != nil || d.Status.Reason != "IsolationNotMet" || !strings.Contains(d.Status.Message, "reads no sandbox's evidence") {
		t.Errorf("the Dedicated claim: warm %+v, reason %s, message %q; want built cold and IsolationNotMet", d.Status.Warm, d.Status.Reason, d.Status.Message)
	}
	if p := e.pod(t, member); p.Labels[airlockv1alpha1.LabelClaim] != "" || p.DeletionTimestamp != nil {
		t.Errorf("the member %s was taken (claim label %q)", member, p.Labels[airlockv1alpha1.LabelClaim])
	}
}
