// Package recordwebhook is the admission webhook that closes what the operator's in-tree admission
// policies cannot: that the record an object names exists. The policies
// (manifests/rbac/admission_policy*.yaml) hold a claim's pod to its claim's status.frozen, a warm
// member to its pool's record and a retry to its kept record, for every param their binding
// selects; a pod that names a claim no claim has passes that "for every param" vacuously. This
// webhook, a component of its own with a read-only ServiceAccount, is asked only about the
// operator's writes of airlock's objects, and refuses one whose claim, registry, pool record, kept
// record, controlling pod or allowed Service does not exist as it says (docs/security.md, "The
// records webhook"). Review is the decision, over a Lookup; the rest serves it.
package recordwebhook

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// Lookup reads the objects a request names. Each returns nil and no error when the object does
// not exist; an error is a failed read, which refuses the request (fail closed).
type Lookup interface {
	Claim(ctx context.Context, namespace, name string) (*airlockv1alpha1.SandboxClaim, error)
	Registry(ctx context.Context, namespace, name string) (*airlockv1alpha1.ToolRegistry, error)
	Job(ctx context.Context, namespace, name string) (*batchv1.Job, error)
	Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	Service(ctx context.Context, namespace, name string) (*corev1.Service, error)
	// Served says whether the namespace holds an AgentRuntime or a ToolRegistry.
	Served(ctx context.Context, namespace string) (bool, error)
	Class(ctx context.Context, name string) (*airlockv1alpha1.SandboxClass, error)
	Runtime(ctx context.Context, namespace, name string) (*airlockv1alpha1.AgentRuntime, error)
}

// Verdict is Review's answer: Allowed, or refused for Reason (a sentence a person can act on).
type Verdict struct {
	Allowed bool
	Reason  string
}

func allow() Verdict { return Verdict{Allowed: true} }

func refuse(format string, args ...any) Verdict {
	return Verdict{Reason: fmt.Sprintf(format, args...)}
}

// object is what Review reads of every kind: its metadata.
type object struct {
	metav1.ObjectMeta `json:"metadata"`
}

// Config is what the webhook is told of the operator it holds.
type Config struct {
	// SyncImage is the operator's --sync-image: the image of the record of a claim that no longer
	// exists (pkg/controller/workspacegc, orphan.go).
	SyncImage string
}

// Review decides a request of the operator's: a CREATE of a pod, Secret, NetworkPolicy or Job
// airlock labels, or an UPDATE that changes what record it names (an adoption: its naming labels
// or its controller) or a policy's peers; the CREATE of an Event; the status write that brings a
// claim's record. Anything else is allowed: the policies have judged it, and a DELETE names
// nothing that must exist.
func Review(ctx context.Context, req *admissionv1.AdmissionRequest, look Lookup, cfg Config) Verdict {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return allow()
	}
	var obj object
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return refuse("the %s could not be read: %v", req.Kind.Kind, err)
	}
	obj.Namespace = req.Namespace
	r := reviewer{ctx: ctx, look: look, cfg: cfg, raw: req.Object.Raw, obj: &obj.ObjectMeta, update: req.Operation == admissionv1.Update}
	if req.Kind.Kind == "SandboxClaim" {
		if req.SubResource != "status" || req.Operation != admissionv1.Update {
			return allow()
		}
		return r.claimRecord(req.OldObject.Raw)
	}
	if req.Operation == admissionv1.Update {
		var old object
		if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
			return refuse("the %s's previous version could not be read: %v", req.Kind.Kind, err)
		}
		if sameNames(&old.ObjectMeta, &obj.ObjectMeta) && (req.Kind.Kind != "NetworkPolicy" || samePeers(req.OldObject.Raw, req.Object.Raw)) {
			return allow()
		}
	}
	switch req.Kind.Kind {
	case "Pod":
		return r.pod()
	case "Secret":
		return r.secret()
	case "NetworkPolicy":
		return r.networkPolicy()
	case "Job":
		return r.job()
	case "Event":
		return r.event()
	}
	return allow()
}

// namingLabels are the labels by which an object names a record; an UPDATE that changes none of
// them names nothing new.
var namingLabels = []string{
	airlockv1alpha1.LabelClaim, airlockv1alpha1.LabelClaimUID, airlockv1alpha1.LabelWarmRegistry,
	airlockv1alpha1.LabelWarmPool, airlockv1alpha1.LabelWarmMember, airlockv1alpha1.LabelResumes,
	airlockv1alpha1.LabelResumesUID, airlockv1alpha1.LabelRetryOf, airlockv1alpha1.LabelKeptWorkspace,
}

// sameNames says whether two versions of an object name the same records: the same naming
// labels and the same controller.
func sameNames(a, b *metav1.ObjectMeta) bool {
	for _, k := range namingLabels {
		va, oka := a.Labels[k]
		vb, okb := b.Labels[k]
		if oka != okb || va != vb {
			return false
		}
	}
	ca, cb := metav1.GetControllerOfNoCopy(a), metav1.GetControllerOfNoCopy(b)
	return (ca == nil) == (cb == nil) && (ca == nil || ca.UID == cb.UID && ca.Kind == cb.Kind && ca.Name == cb.Name)
}

// samePeers says whether two versions of a NetworkPolicy open their pods to the same peers: an
// update that opens nothing new (its peers are judged when they change: the operator writes a
// policy again when an allowed Service's selector changes).
func samePeers(oldRaw, newRaw []byte) bool {
	var a, b networkingv1.NetworkPolicy
	if json.Unmarshal(oldRaw, &a) != nil || json.Unmarshal(newRaw, &b) != nil {
		return false
	}
	return equality.Semantic.DeepEqual(a.Spec.Egress, b.Spec.Egress) && equality.Semantic.DeepEqual(a.Spec.Ingress, b.Spec.Ingress)
}

type reviewer struct {
	ctx  context.Context
	look Lookup
	cfg  Config
	raw  []byte
	// update: an UPDATE that names a record anew (an adoption), not a CREATE.
	update bool
	obj    *metav1.ObjectMeta
}

func (r reviewer) label(k string) string { return r.obj.Labels[k] }

// controller is the object's controlling owner reference, or nil.
func (r reviewer) controller() *metav1.OwnerReference {
	return metav1.GetControllerOfNoCopy(r.obj)
}

func (r reviewer) pod() Verdict {
	var pod corev1.Pod
	if err := json.Unmarshal(r.raw, &pod); err != nil {
		return refuse("the pod could not be read: %v", err)
	}
	if name := r.label(airlockv1alpha1.LabelClaim); name != "" {
		claim, v := r.claimChild("pod", name, nil)
		if !v.Allowed || r.update {
			return v // an adopted member keeps the directory it was made on
		}
		return r.workspaceDir(&pod, workspace.DirOf(claim), "its claim's")
	}
	if r.label(airlockv1alpha1.LabelWarmRegistry) == "" {
		return allow()
	}
	_, v := r.poolRecord("warm member")
	if !v.Allowed {
		return v
	}
	kept := r.label(airlockv1alpha1.LabelResumes)
	if kept == "" {
		return r.workspaceDir(&pod, workspace.MemberDir(r.obj.Namespace, r.obj.Name), "its own member")
	}
	job, v := r.keptRecord("resume member", kept, types.UID(r.label(airlockv1alpha1.LabelResumesUID)))
	if !v.Allowed {
		return v
	}
	dir := job.Annotations[airlockv1alpha1.AnnotationKeptDir]
	if dir == "" || pod.Annotations[airlockv1alpha1.AnnotationResumesDir] != dir {
		return refuse("the resume member %s/%s names the directory %q, not its record %s's %q", r.obj.Namespace, r.obj.Name,
			pod.Annotations[airlockv1alpha1.AnnotationResumesDir], kept, dir)
	}
	return r.workspaceDir(&pod, dir, "its kept record's")
}

// workspaceDir checks that every volume of the pod's PVCs is mounted at dir (the subPath of the
// content volume), and nowhere else.
func (r reviewer) workspaceDir(pod *corev1.Pod, dir, whose string) Verdict {
	pvcs := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			pvcs[v.Name] = true
		}
	}
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		for _, m := range c.VolumeMounts {
			if pvcs[m.Name] && (m.SubPath != dir || m.SubPathExpr != "") {
				return refuse("the pod %s/%s mounts the workspace volume at %q, not %s directory %q", r.obj.Namespace, r.obj.Name, m.SubPath, whose, dir)
			}
		}
	}
	return allow()
}

func (r reviewer) secret() Verdict {
	if claim := r.label(airlockv1alpha1.LabelClaim); claim != "" {
		_, v := r.claimChild("Secret", claim, nil)
		return v
	}
	member := r.label(airlockv1alpha1.LabelWarmMember)
	if member == "" {
		return allow()
	}
	ref := r.controller()
	if ref == nil || ref.Kind != "Pod" || ref.Name != member {
		return refuse("the warm member's Secret %s/%s is not controlled by the member %s it names", r.obj.Namespace, r.obj.Name, member)
	}
	pod, err := r.look.Pod(r.ctx, r.obj.Namespace, member)
	if err != nil {
		return refuse("reading the warm member %s/%s: %v", r.obj.Namespace, member, err)
	}
	if pod == nil || pod.UID != ref.UID || pod.Labels[airlockv1alpha1.LabelWarmMember] != member {
		return refuse("the warm member %s/%s (UID %s) that the Secret %s names does not exist", r.obj.Namespace, member, ref.UID, r.obj.Name)
	}
	return allow()
}

func (r reviewer) networkPolicy() Verdict {
	var np networkingv1.NetworkPolicy
	if err := json.Unmarshal(r.raw, &np); err != nil {
		return refuse("the NetworkPolicy could not be read: %v", err)
	}
	if claim := r.label(airlockv1alpha1.LabelClaim); claim != "" {
		_, v := r.claimChild("NetworkPolicy", claim, &np)
		return v
	}
	if r.label(airlockv1alpha1.LabelWarmRegistry) == "" {
		return allow() // the standing default-deny: its shape is the policies'
	}
	rec, v := r.poolRecord("pool's NetworkPolicy")
	if !v.Allowed {
		return v
	}
	return r.peers(&np, rec)
}

// claimChild checks that the claim an object names exists in its namespace with the UID the
// object names (a pod's label; its controller), and has its record; and, for a NetworkPolicy,
// that its peers are the record's.
func (r reviewer) claimChild(what, name string, np *networkingv1.NetworkPolicy) (*airlockv1alpha1.SandboxClaim, Verdict) {
	var uids []types.UID
	if uid := r.label(airlockv1alpha1.LabelClaimUID); uid != "" {
		uids = append(uids, types.UID(uid))
	}
	if ref := r.controller(); ref != nil {
		if ref.Kind != "SandboxClaim" || ref.Name != name {
			return nil, refuse("the %s %s/%s names the claim %s but is controlled by %s %s", what, r.obj.Namespace, r.obj.Name, name, ref.Kind, ref.Name)
		}
		uids = append(uids, ref.UID)
	}
	if len(uids) == 0 {
		return nil, refuse("the %s %s/%s names the claim %s but not its UID (label %s or controller)", what, r.obj.Namespace, r.obj.Name, name, airlockv1alpha1.LabelClaimUID)
	}
	claim, err := r.look.Claim(r.ctx, r.obj.Namespace, name)
	if err != nil {
		return nil, refuse("reading the claim %s/%s: %v", r.obj.Namespace, name, err)
	}
	for _, uid := range uids {
		if claim == nil || claim.UID != uid {
			return nil, refuse("the claim %s/%s (UID %s) that the %s %s names does not exist", r.obj.Namespace, name, uid, what, r.obj.Name)
		}
	}
	if claim.Status.Frozen == nil {
		if r.update && np == nil {
			// An adoption: the claim writes its record (the member's pool's) with its
			// admission, after the member is its own; the member was held to that record
			// when it was created.
			return claim, allow()
		}
		return nil, refuse("the claim %s/%s that the %s %s names has no record (status.frozen) yet", r.obj.Namespace, name, what, r.obj.Name)
	}
	if np != nil {
		return claim, r.peers(np, claim.Status.Frozen)
	}
	return claim, allow()
}

// poolRecord checks that the registry a warm member's object names exists, controls it, and
// holds the record of the pool it names, and returns that record.
func (r reviewer) poolRecord(what string) (*airlockv1alpha1.FrozenSandbox, Verdict) {
	name, key := r.label(airlockv1alpha1.LabelWarmRegistry), r.label(airlockv1alpha1.LabelWarmPool)
	ref := r.controller()
	if ref == nil || ref.Kind != "ToolRegistry" || ref.Name != name {
		return nil, refuse("the %s %s/%s is not controlled by the ToolRegistry %s it names", what, r.obj.Namespace, r.obj.Name, name)
	}
	reg, err := r.look.Registry(r.ctx, r.obj.Namespace, name)
	if err != nil {
		return nil, refuse("reading the ToolRegistry %s/%s: %v", r.obj.Namespace, name, err)
	}
	if reg == nil || reg.UID != ref.UID {
		return nil, refuse("the ToolRegistry %s/%s (UID %s) that the %s %s names does not exist", r.obj.Namespace, name, ref.UID, what, r.obj.Name)
	}
	for i := range reg.Status.Warm {
		if p := &reg.Status.Warm[i]; key != "" && p.Key == key && p.Record != nil {
			return p.Record, allow()
		}
	}
	return nil, refuse("the ToolRegistry %s/%s has no record of the pool %q that the %s %s names", r.obj.Namespace, name, key, what, r.obj.Name)
}

// keptRecord checks that the kept workspace's record name (with uid) exists in the namespace,
// and returns it.
func (r reviewer) keptRecord(what, name string, uid types.UID) (*batchv1.Job, Verdict) {
	job, err := r.look.Job(r.ctx, r.obj.Namespace, name)
	if err != nil {
		return nil, refuse("reading the kept workspace's record %s/%s: %v", r.obj.Namespace, name, err)
	}
	if job == nil || job.UID != uid || !workspace.IsRecord(job) {
		return nil, refuse("the kept workspace's record %s/%s (UID %s) that the %s %s names does not exist", r.obj.Namespace, name, uid, what, r.obj.Name)
	}
	return job, allow()
}

// job checks a retry (its record), a claim's sync-back (its claim) and a kept record (its
// claim's, or the operator's sync image).
func (r reviewer) job() Verdict {
	if of := r.label(airlockv1alpha1.LabelRetryOf); of != "" {
		ref := r.controller()
		if ref == nil || ref.Kind != "Job" || ref.Name != of {
			return refuse("the retry %s/%s is not controlled by the record %s it names", r.obj.Namespace, r.obj.Name, of)
		}
		_, v := r.keptRecord("retry", of, ref.UID)
		return v
	}
	name, uid := r.label(airlockv1alpha1.LabelClaim), types.UID(r.label(airlockv1alpha1.LabelClaimUID))
	kept := r.label(airlockv1alpha1.LabelKeptWorkspace) != ""
	if name == "" && !kept {
		return allow()
	}
	var claim *airlockv1alpha1.SandboxClaim
	if name != "" {
		var err error
		if claim, err = r.look.Claim(r.ctx, r.obj.Namespace, name); err != nil {
			return refuse("reading the claim %s/%s: %v", r.obj.Namespace, name, err)
		}
	}
	if kept {
		return r.record(claim, uid)
	}
	ref := r.controller()
	if ref == nil || ref.Kind != "SandboxClaim" || ref.Name != name {
		return refuse("the Job %s/%s names the claim %s but is not controlled by it", r.obj.Namespace, r.obj.Name, name)
	}
	if claim == nil || claim.UID != ref.UID || uid != "" && uid != ref.UID {
		return refuse("the claim %s/%s (UID %s) that the Job %s names does not exist", r.obj.Namespace, name, ref.UID, r.obj.Name)
	}
	if claim.Status.Frozen == nil {
		return refuse("the claim %s/%s that the Job %s names has no record (status.frozen)", r.obj.Namespace, name, r.obj.Name)
	}
	return allow()
}

// event checks an Event of the operator's: about its Lease (the policies keep that one to its
// own namespace), or about a claim or Job that exists by the UID it names, or, for the last
// events of one just deleted, in a namespace airlock serves (an AgentRuntime or a ToolRegistry).
// An Event about a claim in a namespace airlock does not serve is refused.
func (r reviewer) event() Verdict {
	var ev corev1.Event
	if err := json.Unmarshal(r.raw, &ev); err != nil {
		return refuse("the Event could not be read: %v", err)
	}
	about := ev.InvolvedObject
	if about.Kind == "Lease" {
		return allow()
	}
	var uid types.UID
	switch about.Kind {
	case "SandboxClaim":
		claim, err := r.look.Claim(r.ctx, r.obj.Namespace, about.Name)
		if err != nil {
			return refuse("reading the claim %s/%s: %v", r.obj.Namespace, about.Name, err)
		}
		if claim != nil {
			uid = claim.UID
		}
	case "Job":
		job, err := r.look.Job(r.ctx, r.obj.Namespace, about.Name)
		if err != nil {
			return refuse("reading the Job %s/%s: %v", r.obj.Namespace, about.Name, err)
		}
		if job != nil {
			uid = job.UID
		}
	default:
		return refuse("the Event %s/%s is about a %s, not a claim, a kept workspace's Job or the operator's Lease", r.obj.Namespace, r.obj.Name, about.Kind)
	}
	if uid != "" && uid == about.UID {
		return allow()
	}
	served, err := r.look.Served(r.ctx, r.obj.Namespace)
	if err != nil {
		return refuse("reading the runtimes and registries of %s: %v", r.obj.Namespace, err)
	}
	if !served {
		return refuse("the Event %s/%s is about the %s %s (UID %s), which does not exist, in a namespace with no AgentRuntime or ToolRegistry",
			r.obj.Namespace, r.obj.Name, about.Kind, about.Name, about.UID)
	}
	return allow()
}

// record checks a kept workspace's record. While the claim it names is there (by UID), the
// policies (airlock-operator-claim-record) hold it to that claim's record. A record outlives its
// claim and may be written after it went (a claim garbage collection deleted with its runtime),
// or after a claim of that name was created again: then no object holds what it may run, and it
// runs the operator's --sync-image and nothing else.
func (r reviewer) record(claim *airlockv1alpha1.SandboxClaim, uid types.UID) Verdict {
	if claim != nil && uid != "" && claim.UID == uid {
		return allow()
	}
	var job batchv1.Job
	if err := json.Unmarshal(r.raw, &job); err != nil {
		return refuse("the Job could not be read: %v", err)
	}
	spec := job.Spec.Template.Spec
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		if c.Image != r.cfg.SyncImage || r.cfg.SyncImage == "" {
			return refuse("the record %s/%s of a claim that does not exist (%s, UID %s) runs %q, not the operator's sync image %q",
				r.obj.Namespace, r.obj.Name, r.label(airlockv1alpha1.LabelClaim), uid, c.Image, r.cfg.SyncImage)
		}
	}
	if len(spec.EphemeralContainers) != 0 {
		return refuse("the record %s/%s has ephemeral containers", r.obj.Namespace, r.obj.Name)
	}
	return allow()
}

// peers checks the NetworkPolicy's peers in other namespaces: each is the egress gateway of
// record, kube-dns, or the pods of a Service the record allows, selected exactly as that
// Service selects them now (the operator follows a Service's selector; a policy written with an
// old one is refused and written again).
func (r reviewer) peers(np *networkingv1.NetworkPolicy, rec *airlockv1alpha1.FrozenSandbox) Verdict {
	for _, rule := range np.Spec.Egress {
		for _, p := range rule.To {
			if v := r.peer(p, rec); !v.Allowed {
				return v
			}
		}
	}
	return allow() // ingress: its own namespace and the operator's pods, the policies' shapes
}

func (r reviewer) peer(p networkingv1.NetworkPolicyPeer, rec *airlockv1alpha1.FrozenSandbox) Verdict {
	if p.NamespaceSelector == nil {
		return allow() // its own namespace: the policies judge its shape
	}
	ns, ok := p.NamespaceSelector.MatchLabels[corev1.LabelMetadataName]
	if !ok || len(p.NamespaceSelector.MatchLabels) != 1 || len(p.NamespaceSelector.MatchExpressions) != 0 {
		return refuse("the NetworkPolicy %s/%s has a peer whose namespace is not named", r.obj.Namespace, r.obj.Name)
	}
	if p.PodSelector == nil || len(p.PodSelector.MatchExpressions) != 0 || len(p.PodSelector.MatchLabels) == 0 {
		return refuse("the NetworkPolicy %s/%s has a peer in %s that selects pods by no labels", r.obj.Namespace, r.obj.Name, ns)
	}
	sel := p.PodSelector.MatchLabels
	if rec.Egress != nil && ns == rec.Egress.Gateway.Namespace && maps.Equal(sel, rec.Egress.Gateway.PodSelector) {
		return allow()
	}
	if ns == metav1.NamespaceSystem && maps.Equal(sel, map[string]string{"k8s-app": "kube-dns"}) {
		return allow() // whether DNS is allowed at all is the policies' (airlock-operator-claim-record)
	}
	for _, ref := range rec.AllowedServices {
		if ref.Namespace != ns {
			continue
		}
		svc, err := r.look.Service(r.ctx, ref.Namespace, ref.Name)
		if err != nil {
			return refuse("reading the Service %s/%s: %v", ref.Namespace, ref.Name, err)
		}
		if svc != nil && maps.Equal(sel, svc.Spec.Selector) {
			return allow()
		}
	}
	return refuse("the NetworkPolicy %s/%s opens pods %v of %s, which no Service its record allows selects (allowed: %v)",
		r.obj.Namespace, r.obj.Name, sel, ns, serviceNames(rec.AllowedServices))
}

func serviceNames(refs []airlockv1alpha1.ServiceReference) []string {
	out := make([]string, 0, len(refs))
	for _, s := range refs {
		out = append(out, s.Namespace+"/"+s.Name)
	}
	slices.Sort(out)
	return out
}
