package recordwebhook

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/sandboxpod/sandboxpodtest"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

const testSyncImage = "ghcr.io/airlock-dev/airlock:test"

// fakeLookup holds the cluster's objects by namespace/name; err fails every read.
type fakeLookup struct {
	claims     map[string]*airlockv1alpha1.SandboxClaim
	registries map[string]*airlockv1alpha1.ToolRegistry
	jobs       map[string]*batchv1.Job
	pods       map[string]*corev1.Pod
	services   map[string]*corev1.Service
	classes    map[string]*airlockv1alpha1.SandboxClass
	runtimes   map[string]*airlockv1alpha1.AgentRuntime
	err        error
}

func get[T any](l *fakeLookup, m map[string]*T, ns, name string) (*T, error) {
	if l.err != nil {
		return nil, l.err
	}
	return m[ns+"/"+name], nil
}

func (l *fakeLookup) Claim(_ context.Context, ns, name string) (*airlockv1alpha1.SandboxClaim, error) {
	return get(l, l.claims, ns, name)
}
func (l *fakeLookup) Registry(_ context.Context, ns, name string) (*airlockv1alpha1.ToolRegistry, error) {
	return get(l, l.registries, ns, name)
}
func (l *fakeLookup) Job(_ context.Context, ns, name string) (*batchv1.Job, error) {
	return get(l, l.jobs, ns, name)
}
func (l *fakeLookup) Pod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	return get(l, l.pods, ns, name)
}
func (l *fakeLookup) Service(_ context.Context, ns, name string) (*corev1.Service, error) {
	return get(l, l.services, ns, name)
}

// Served: a runtime or a registry in ns.
func (l *fakeLookup) Served(_ context.Context, ns string) (bool, error) {
	for _, o := range l.runtimes {
		if o.Namespace == ns {
			return true, l.err
		}
	}
	for _, o := range l.registries {
		if o.Namespace == ns {
			return true, l.err
		}
	}
	return false, l.err
}
func (l *fakeLookup) Class(_ context.Context, name string) (*airlockv1alpha1.SandboxClass, error) {
	return get(l, l.classes, "", name)
}
func (l *fakeLookup) Runtime(_ context.Context, ns, name string) (*airlockv1alpha1.AgentRuntime, error) {
	return get(l, l.runtimes, ns, name)
}

// world is a namespace with a claim (its record allows one Service, in another namespace), a
// registry with a pool and its record, a member pod, and a kept record.
type world struct {
	class  *airlockv1alpha1.SandboxClass
	claim  *airlockv1alpha1.SandboxClaim
	reg    *airlockv1alpha1.ToolRegistry
	key    string
	member *corev1.Pod
	kept   *batchv1.Job
	svc    *corev1.Service
	look   *fakeLookup
}

func newWorld() *world {
	w := &world{}
	class := sandboxpodtest.Class("codegen")
	class.Generation = 3
	class.Spec.AllowedServices = []airlockv1alpha1.ServiceReference{{Namespace: "db", Name: "postgres"}}
	reg := sandboxpodtest.WarmRegistry(1)
	record := sandboxpod.Freeze(class, &reg.Spec.Sandboxes[0])
	record.SyncImage = testSyncImage
	w.class = class
	w.svc = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "postgres"}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "postgres"}, Ports: []corev1.ServicePort{{Port: 5432}}}}
	w.claim = sandboxpodtest.Claim("c1", "s1", airlockv1alpha1.ClaimBinding, sandboxpodtest.T0)
	w.claim.Status.Frozen = record
	w.reg = reg
	w.key = sandboxpod.PoolKey(reg.UID, "codegen", record)
	reg.Status.Warm = []airlockv1alpha1.WarmPoolStatus{{Name: "codegen", Key: w.key, Record: record}}
	w.member = sandboxpod.MemberPod(reg, "codegen", w.key, "codegen-warm-abc", record)
	w.member.UID = "uid-member"
	kept := w.claim.DeepCopy()
	kept.Spec.WorkspaceDir = sandboxpodtest.Namespace + "/sandboxes/kept"
	w.kept = workspace.Record(kept, "workspace-content", sandboxpod.JobConfig(testSyncImage), sandboxpodtest.T0)
	w.kept.UID = "uid-kept"
	ns := sandboxpodtest.Namespace + "/"
	w.look = &fakeLookup{
		claims:     map[string]*airlockv1alpha1.SandboxClaim{ns + "c1": w.claim},
		registries: map[string]*airlockv1alpha1.ToolRegistry{ns + reg.Name: reg},
		jobs:       map[string]*batchv1.Job{ns + w.kept.Name: w.kept},
		pods:       map[string]*corev1.Pod{ns + w.member.Name: w.member},
		services:   map[string]*corev1.Service{"db/postgres": w.svc},
		classes:    map[string]*airlockv1alpha1.SandboxClass{"/codegen": class},
		runtimes: map[string]*airlockv1alpha1.AgentRuntime{ns + "agent": {
			ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: sandboxpodtest.Namespace},
			Spec:       airlockv1alpha1.AgentRuntimeSpec{ToolRegistryRef: airlockv1alpha1.LocalObjectReference{Name: reg.Name}},
		}},
	}
	return w
}

// adopted is the world's member as the claim controller's adoption leaves it: the claim's labels
// and the claim its controller.
func (w *world) adopted() *corev1.Pod {
	adopted := w.member.DeepCopy()
	for k, v := range sandboxpod.PodLabels(w.claim) {
		adopted.Labels[k] = v
	}
	adopted.OwnerReferences = []metav1.OwnerReference{sandboxpod.OwnerReference(w.claim)}
	return adopted
}

func (w *world) claimPolicy() *networkingv1.NetworkPolicy {
	return sandboxpod.ClaimNetworkPolicy(w.claim, w.claim.Status.Frozen, []*corev1.Service{w.svc})
}

func request(op admissionv1.Operation, kind string, obj, old runtime.Object) *admissionv1.AdmissionRequest {
	raw := func(o runtime.Object) runtime.RawExtension {
		if o == nil {
			return runtime.RawExtension{}
		}
		b, err := json.Marshal(o)
		if err != nil {
			panic(err)
		}
		return runtime.RawExtension{Raw: b}
	}
	return &admissionv1.AdmissionRequest{
		UID: "req-1", Kind: metav1.GroupVersionKind{Kind: kind}, Namespace: sandboxpodtest.Namespace,
		Operation: op, Object: raw(obj), OldObject: raw(old),
	}
}

// TestReview: what airlock builds, as its builders make it, is allowed; each object that names a
// record which does not exist as it says is refused, with a reason that names it.
func TestReview(t *testing.T) {
	type tc struct {
		req  func(w *world) *admissionv1.AdmissionRequest
		want string // "" allowed; else a part of the reason
	}
	create := func(kind string, obj func(w *world) runtime.Object) func(w *world) *admissionv1.AdmissionRequest {
		return func(w *world) *admissionv1.AdmissionRequest { return request(admissionv1.Create, kind, obj(w), nil) }
	}
	claimPod := func(w *world) *corev1.Pod { return sandboxpod.ClaimPod(w.claim, w.claim.Status.Frozen) }
	syncJob := func(w *world) *batchv1.Job {
		return workspace.SyncJob(sandboxpod.ChildMeta(w.claim, workspace.SyncJobName(w.claim)), w.claim, "workspace-content", sandboxpod.JobConfig(testSyncImage), 1, false, 3)
	}
	orphanRecord := func(w *world, image string) *batchv1.Job {
		gone := w.claim.DeepCopy()
		gone.UID = "uid-gone"
		return workspace.Record(gone, "workspace-content", sandboxpod.JobConfig(image), sandboxpodtest.T0)
	}
	tests := map[string]tc{
		"claim pod": {req: create("Pod", func(w *world) runtime.Object { return claimPod(w) })},
		"claim pod naming a claim that does not exist": {req: create("Pod", func(w *world) runtime.Object {
			delete(w.look.claims, sandboxpodtest.Namespace+"/c1")
			return claimPod(w)
		}), want: "does not exist"},
		"claim pod naming a claim by another UID (created again)": {req: create("Pod", func(w *world) runtime.Object {
			p := claimPod(w)
			p.Labels[airlockv1alpha1.LabelClaimUID] = "uid-old"
			p.OwnerReferences[0].UID = "uid-old"
			return p
		}), want: "does not exist"},
		"claim pod whose label and owner name two UIDs": {req: create("Pod", func(w *world) runtime.Object {
			p := claimPod(w)
			p.Labels[airlockv1alpha1.LabelClaimUID] = "uid-other"
			return p
		}), want: "does not exist"},
		"claim pod naming no UID": {req: create("Pod", func(w *world) runtime.Object {
			p := claimPod(w)
			delete(p.Labels, airlockv1alpha1.LabelClaimUID)
			p.OwnerReferences = nil
			return p
		}), want: "not its UID"},
		"claim pod controlled by another object": {req: create("Pod", func(w *world) runtime.Object {
			p := claimPod(w)
			p.OwnerReferences[0].Kind = "ToolRegistry"
			return p
		}), want: "controlled by ToolRegistry"},
		"claim pod of a claim without a record": {req: create("Pod", func(w *world) runtime.Object {
			p := claimPod(w)
			w.claim.Status.Frozen = nil
			return p
		}), want: "no record"},
		"claim pod when the claim cannot be read": {req: create("Pod", func(w *world) runtime.Object {
			w.look.err = errors.New("etcd is down")
			return claimPod(w)
		}), want: "etcd is down"},
		"claim pod on another workspace directory": {req: create("Pod", func(w *world) runtime.Object {
			p := claimPod(w)
			for i := range p.Spec.Containers[0].VolumeMounts {
				if m := &p.Spec.Containers[0].VolumeMounts[i]; m.SubPath != "" {
					m.SubPath = sandboxpodtest.Namespace + "/sandboxes/someone-else"
				}
			}
			return p
		}), want: "not its claim's directory"},
		"warm member on another member's directory": {req: create("Pod", func(w *world) runtime.Object {
			m := w.member.DeepCopy()
			for i := range m.Spec.Containers[0].VolumeMounts {
				if v := &m.Spec.Containers[0].VolumeMounts[i]; v.SubPath != "" {
					v.SubPath = workspace.MemberDir(sandboxpodtest.Namespace, "codegen-warm-other")
				}
			}
			return m
		}), want: "not its own member directory"},
		"resume member on a directory its record does not name": {req: create("Pod", func(w *world) runtime.Object {
			p := sandboxpod.ResumeMemberPod(w.reg, "codegen", w.key, "codegen-warm-res", w.reg.Status.Warm[0].Record, w.kept)
			w.kept.Annotations[airlockv1alpha1.AnnotationKeptDir] = sandboxpodtest.Namespace + "/sandboxes/another"
			return p
		}), want: "not its record"},
		"token Secret": {req: create("Secret", func(w *world) runtime.Object { return sandboxpod.TokenSecret(w.claim, "c1-pod-key", "t") })},
		"token Secret of a claim that does not exist": {req: create("Secret", func(w *world) runtime.Object {
			s := sandboxpod.TokenSecret(w.claim, "c1-pod-key", "t")
			s.Labels[airlockv1alpha1.LabelClaim] = "c9"
			s.OwnerReferences[0].Name = "c9"
			return s
		}), want: "does not exist"},
		"claim NetworkPolicy": {req: create("NetworkPolicy", func(w *world) runtime.Object { return w.claimPolicy() })},
		"claim NetworkPolicy open to pods no allowed Service selects": {req: create("NetworkPolicy", func(w *world) runtime.Object {
			np := w.claimPolicy()
			np.Spec.Egress[0].To[0].PodSelector.MatchLabels = map[string]string{"app": "vault"}
			return np
		}), want: "which no Service its record allows selects"},
		"claim NetworkPolicy with the Service's old selector": {req: create("NetworkPolicy", func(w *world) runtime.Object {
			np := w.claimPolicy()
			w.svc.Spec.Selector = map[string]string{"app": "postgres", "tier": "db"}
			return np
		}), want: "which no Service its record allows selects"},
		"claim NetworkPolicy open to a namespace by expression": {req: create("NetworkPolicy", func(w *world) runtime.Object {
			np := w.claimPolicy()
			np.Spec.Egress[0].To[0].NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: metav1.LabelSelectorOpExists}}}
			return np
		}), want: "namespace is not named"},
		"claim NetworkPolicy open to every pod of a namespace": {req: create("NetworkPolicy", func(w *world) runtime.Object {
			np := w.claimPolicy()
			np.Spec.Egress[0].To[0].PodSelector = nil
			return np
		}), want: "selects pods by no labels"},
		"warm member": {req: create("Pod", func(w *world) runtime.Object { return w.member })},
		"warm member of a registry that does not exist": {req: create("Pod", func(w *world) runtime.Object {
			w.look.registries = nil
			return w.member
		}), want: "does not exist"},
		"warm member of a pool with no record": {req: create("Pod", func(w *world) runtime.Object {
			m := w.member.DeepCopy()
			m.Labels[airlockv1alpha1.LabelWarmPool] = "0123456789abcdef"
			return m
		}), want: "no record of the pool"},
		"warm member controlled by another registry": {req: create("Pod", func(w *world) runtime.Object {
			m := w.member.DeepCopy()
			m.OwnerReferences[0].UID = "uid-reg-old"
			return m
		}), want: "does not exist"},
		"resume member": {req: create("Pod", func(w *world) runtime.Object {
			return sandboxpod.ResumeMemberPod(w.reg, "codegen", w.key, "codegen-warm-res", w.reg.Status.Warm[0].Record, w.kept)
		})},
		"resume member of a record that does not exist": {req: create("Pod", func(w *world) runtime.Object {
			p := sandboxpod.ResumeMemberPod(w.reg, "codegen", w.key, "codegen-warm-res", w.reg.Status.Warm[0].Record, w.kept)
			w.look.jobs = nil
			return p
		}), want: "record"},
		"member Secret": {req: create("Secret", func(w *world) runtime.Object { return sandboxpod.MemberSecret(w.member, "k", "") })},
		"member Secret of a pod that does not exist": {req: create("Secret", func(w *world) runtime.Object {
			s := sandboxpod.MemberSecret(w.member, "k", "")
			w.look.pods = nil
			return s
		}), want: "does not exist"},
		"pool NetworkPolicy": {req: create("NetworkPolicy", func(w *world) runtime.Object {
			return sandboxpod.PoolNetworkPolicy(w.reg, "codegen", w.key, w.reg.Status.Warm[0].Record, []*corev1.Service{w.svc})
		})},
		"pool NetworkPolicy of a registry that does not exist": {req: create("NetworkPolicy", func(w *world) runtime.Object {
			w.look.registries = nil
			return sandboxpod.PoolNetworkPolicy(w.reg, "codegen", w.key, w.reg.Status.Warm[0].Record, nil)
		}), want: "does not exist"},
		"standing default deny": {req: create("NetworkPolicy", func(w *world) runtime.Object {
			return sandboxpod.DefaultDenyPolicy(sandboxpodtest.Namespace)
		})},
		"sync-back Job": {req: create("Job", func(w *world) runtime.Object { return syncJob(w) })},
		"sync-back Job of a claim that does not exist": {req: create("Job", func(w *world) runtime.Object {
			w.look.claims = nil
			return syncJob(w)
		}), want: "does not exist"},
		"kept record of a live claim": {req: create("Job", func(w *world) runtime.Object {
			return workspace.Record(w.claim, "workspace-content", sandboxpod.JobConfig("registry.local/frozen:v0"), sandboxpodtest.T0)
		})},
		"kept record of a gone claim, the sync image": {req: create("Job", func(w *world) runtime.Object { return orphanRecord(w, testSyncImage) })},
		"kept record of a gone claim, another image":  {req: create("Job", func(w *world) runtime.Object { return orphanRecord(w, "evil.example/exfil:v1") }), want: "not the operator's sync image"},
		"kept record naming no claim, another image": {req: create("Job", func(w *world) runtime.Object {
			j := orphanRecord(w, "evil.example/exfil:v1")
			delete(j.Labels, airlockv1alpha1.LabelClaim)
			return j
		}), want: "not the operator's sync image"},
		"retry of a record": {req: create("Job", func(w *world) runtime.Object {
			return workspace.RetryJob(w.kept, "workspace-content", sandboxpod.JobConfig(testSyncImage))
		})},
		"retry of a record that does not exist": {req: create("Job", func(w *world) runtime.Object {
			j := workspace.RetryJob(w.kept, "workspace-content", sandboxpod.JobConfig(testSyncImage))
			w.look.jobs = nil
			return j
		}), want: "does not exist"},
		"adoption of a member by a claim": {req: func(w *world) *admissionv1.AdmissionRequest {
			return request(admissionv1.Update, "Pod", w.adopted(), w.member)
		}},
		"adoption by a claim whose record is written after it": {req: func(w *world) *admissionv1.AdmissionRequest {
			adopted := w.adopted()
			w.claim.Status.Frozen = nil
			return request(admissionv1.Update, "Pod", adopted, w.member)
		}},
		"adoption by a claim that does not exist": {req: func(w *world) *admissionv1.AdmissionRequest {
			adopted := w.adopted()
			w.look.claims = nil
			return request(admissionv1.Update, "Pod", adopted, w.member)
		}, want: "does not exist"},
		"an update of a claim's policy that opens it to other pods": {req: func(w *world) *admissionv1.AdmissionRequest {
			np := w.claimPolicy()
			opened := np.DeepCopy()
			opened.Spec.Egress[0].To[0].PodSelector.MatchLabels = map[string]string{"app": "vault"}
			return request(admissionv1.Update, "NetworkPolicy", opened, np)
		}, want: "which no Service its record allows selects"},
		"an update of a claim's policy to its Service's new selector": {req: func(w *world) *admissionv1.AdmissionRequest {
			np := w.claimPolicy()
			w.svc.Spec.Selector = map[string]string{"app": "postgres", "tier": "db"}
			return request(admissionv1.Update, "NetworkPolicy", w.claimPolicy(), np)
		}},
		"an update of a pool's policy that opens nothing new, its key no longer current": {req: func(w *world) *admissionv1.AdmissionRequest {
			np := sandboxpod.PoolNetworkPolicy(w.reg, "codegen", w.key, w.reg.Status.Warm[0].Record, []*corev1.Service{w.svc})
			relabelled := np.DeepCopy()
			relabelled.Annotations = map[string]string{"x": "y"}
			w.reg.Status.Warm = nil
			return request(admissionv1.Update, "NetworkPolicy", relabelled, np)
		}},
		"an update that hands a claim's pod to another controller": {req: func(w *world) *admissionv1.AdmissionRequest {
			p := claimPod(w)
			q := p.DeepCopy()
			q.OwnerReferences[0].UID = "uid-other"
			return request(admissionv1.Update, "Pod", q, p)
		}, want: "does not exist"},
		"an update that names nothing new, its claim gone": {req: func(w *world) *admissionv1.AdmissionRequest {
			p := claimPod(w)
			q := p.DeepCopy()
			q.Annotations = map[string]string{"x": "y"}
			w.look.claims = nil
			return request(admissionv1.Update, "Pod", q, p)
		}},
		"a deletion": {req: func(w *world) *admissionv1.AdmissionRequest {
			w.look.claims = nil
			r := request(admissionv1.Delete, "Pod", nil, claimPod(w))
			return r
		}},
		"an Event about a claim": {req: create("Event", func(w *world) runtime.Object { return event(w.claim.Name, w.claim.UID, "SandboxClaim") })},
		"an Event about a claim just deleted, in a namespace airlock serves": {req: create("Event", func(w *world) runtime.Object {
			w.look.claims = nil
			return event(w.claim.Name, w.claim.UID, "SandboxClaim")
		})},
		"an Event about a claim in a namespace airlock does not serve": {req: create("Event", func(w *world) runtime.Object {
			w.look.claims, w.look.runtimes, w.look.registries = nil, nil, nil
			return event("c9", "uid-c9", "SandboxClaim")
		}), want: "no AgentRuntime or ToolRegistry"},
		"an Event about a kept record": {req: create("Event", func(w *world) runtime.Object {
			w.look.runtimes, w.look.registries = nil, nil // its runtime gone: the record is still there
			return event(w.kept.Name, w.kept.UID, "Job")
		})},
		"an Event about the operator's Lease": {req: create("Event", func(w *world) runtime.Object {
			w.look.runtimes, w.look.registries = nil, nil
			return event("airlock-operator", "uid-lease", "Lease")
		})},
		"an Event about a pod": {req: create("Event", func(w *world) runtime.Object { return event("p", "uid-p", "Pod") }), want: "not a claim"},
		"an object that is not JSON": {req: func(w *world) *admissionv1.AdmissionRequest {
			r := request(admissionv1.Create, "Pod", nil, nil)
			r.Object.Raw = []byte("{")
			return r
		}, want: "could not be read"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			w := newWorld()
			req := tc.req(w)
			v := Review(context.Background(), req, w.look, Config{SyncImage: testSyncImage})
			checkVerdict(t, v, tc.want)
			checkCached(t, w, req, tc.want)
		})
	}
}

// TestReviewUIDs: a claim's pod built for the claim as it is now is allowed, and for the claim's
// earlier incarnation (same name, another UID) refused, through the labels alone.
func TestReviewUIDs(t *testing.T) {
	w := newWorld()
	p := sandboxpod.ClaimPod(w.claim, w.claim.Status.Frozen)
	w.claim.UID = types.UID("uid-c1-again")
	v := Review(context.Background(), request(admissionv1.Create, "Pod", p, nil), w.look, Config{SyncImage: testSyncImage})
	if v.Allowed {
		t.Fatal("a pod of the claim's earlier UID was allowed")
	}
}

// event is an Event of the operator's about the object kind/name with uid, in the test namespace.
func event(name string, uid types.UID, kind string) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name + ".1", Namespace: sandboxpodtest.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: kind, Name: name, Namespace: sandboxpodtest.Namespace, UID: uid},
		Reason:         "Test",
	}
}

// TestReviewClaimRecord: the first write of a claim's record is what its class and its runtime's
// registry entry freeze now, with the operator's sync image and, with egress, a gateway frozen
// from an airlock egress gateway Service; anything else is refused.
func TestReviewClaimRecord(t *testing.T) {
	gatewaySvc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "airlock-system", Name: "airlock-egress", Labels: EgressServiceLabels},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.50", Selector: map[string]string{"app.kubernetes.io/component": "egress"},
			Ports: []corev1.ServicePort{{Port: 3128}}},
	}
	withEgress := func(w *world) {
		w.class.Spec.Egress = &airlockv1alpha1.SandboxEgress{Hosts: []airlockv1alpha1.EgressHost{{Host: "proxy.golang.org", Ports: []airlockv1alpha1.EgressPort{443}}}}
		w.look.services["airlock-system/airlock-egress"] = gatewaySvc.DeepCopy()
	}
	frozen := func(w *world) *airlockv1alpha1.FrozenSandbox {
		rec := sandboxpod.Freeze(w.class, &w.reg.Spec.Sandboxes[0])
		rec.SyncImage = testSyncImage
		if rec.Egress != nil {
			gw, why := sandboxpod.FreezeGateway(&sandboxpod.GatewayRef{Namespace: "airlock-system", Name: "airlock-egress", Port: 3128, CABundleConfigMap: "airlock-egress-ca"}, gatewaySvc)
			if why != "" {
				panic(why)
			}
			rec.Egress.Gateway = *gw
		}
		return rec
	}
	tests := map[string]struct {
		setup  func(w *world)
		record func(w *world, r *airlockv1alpha1.FrozenSandbox)
		had    bool // the claim had a record before the write
		none   bool // the write carries no record
		want   string
	}{
		"as frozen":                       {},
		"as frozen, with egress":          {setup: withEgress},
		"a status write without a record": {none: true},
		"a record already there":          {had: true, record: func(_ *world, r *airlockv1alpha1.FrozenSandbox) { r.Image = "evil.example/x:v1" }},
		"another image": {record: func(_ *world, r *airlockv1alpha1.FrozenSandbox) { r.Image = "evil.example/x:v1" },
			want: "not what its class codegen (generation 3)"},
		"another workspace PVC": {record: func(_ *world, r *airlockv1alpha1.FrozenSandbox) { r.WorkspaceClaimName = "database-data" },
			want: "not what its class"},
		"another Service allowed": {record: func(_ *world, r *airlockv1alpha1.FrozenSandbox) {
			r.AllowedServices = append(r.AllowedServices, airlockv1alpha1.ServiceReference{Namespace: "vault", Name: "vault"})
		}, want: "not what its class"},
		"an older generation of the class": {record: func(_ *world, r *airlockv1alpha1.FrozenSandbox) { r.ClassGeneration = 2 }, want: "not what its class"},
		"another sync image": {record: func(_ *world, r *airlockv1alpha1.FrozenSandbox) { r.SyncImage = "evil.example/sync:v1" },
			want: "not the operator's"},
		"a class that does not exist":         {setup: func(w *world) { w.look.classes = nil }, want: "does not exist"},
		"a runtime that does not exist":       {setup: func(w *world) { w.look.runtimes = nil }, want: "does not exist"},
		"an entry the registry does not have": {setup: func(w *world) { w.reg.Spec.Sandboxes[0].Name = "other" }, want: "which has none"},
		"egress the class does not have": {record: func(_ *world, r *airlockv1alpha1.FrozenSandbox) {
			r.Egress = &airlockv1alpha1.FrozenEgress{Hosts: []airlockv1alpha1.EgressHost{{Host: "evil.example", Ports: []airlockv1alpha1.EgressPort{443}}}}
		}, want: "has egress true"},
		"a gateway of kube-dns's pods": {setup: withEgress, record: func(_ *world, r *airlockv1alpha1.FrozenSandbox) {
			r.Egress.Gateway.Namespace, r.Egress.Gateway.Service = "kube-system", "kube-dns"
		}, want: "not an airlock egress gateway's"},
		"a gateway of other pods than its Service's": {setup: withEgress, record: func(_ *world, r *airlockv1alpha1.FrozenSandbox) {
			r.Egress.Gateway.PodSelector = map[string]string{"app": "anything"}
		}, want: "not what its Service"},
		"a gateway Service of no airlock gateway": {setup: func(w *world) {
			withEgress(w)
			w.look.services["airlock-system/airlock-egress"].Labels = nil
		}, want: "not an airlock egress gateway's"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			w := newWorld()
			if tc.setup != nil {
				tc.setup(w)
			}
			old, cur := w.claim.DeepCopy(), w.claim.DeepCopy()
			old.Status.Frozen, cur.Status.Frozen = nil, nil
			if !tc.none {
				cur.Status.Frozen = frozen(w)
				if tc.had {
					old.Status.Frozen = frozen(w)
				}
				if tc.record != nil {
					tc.record(w, cur.Status.Frozen)
				}
			}
			req := request(admissionv1.Update, "SandboxClaim", cur, old)
			req.SubResource = "status"
			v := Review(context.Background(), req, w.look, Config{SyncImage: testSyncImage})
			checkVerdict(t, v, tc.want)
			checkCached(t, w, req, tc.want)
		})
	}
}

// checkVerdict fails t unless v is allowed (want "") or refused with want in its reason.
func checkVerdict(t *testing.T, v Verdict, want string) {
	t.Helper()
	switch {
	case want == "" && !v.Allowed:
		t.Fatalf("refused (%s), want allowed", v.Reason)
	case want != "" && v.Allowed:
		t.Fatalf("allowed, want refused with %q", want)
	case want != "" && !strings.Contains(v.Reason, want):
		t.Fatalf("refused with %q, want %q in it", v.Reason, want)
	}
}
