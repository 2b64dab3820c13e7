package sandboxpod

// What the operator builds for a warm pool (docs/decisions.md, "Warm pools"): members, each a
// sandbox pod built exactly as a claim's would be from the registry entry's record (restricted
// pod, no ServiceAccount token, a fresh workspace of its own) with a key Secret instead of a
// token, and one default-deny NetworkPolicy per pool, created before the pool's first pod.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"

	"github.com/airlock-dev/airlock/pkg/admission"
	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

const (
	// MemberKeyMountPath is where a warm member's key Secret is mounted.
	MemberKeyMountPath = "/var/run/airlock/warm"
	// memberKeyField is the key's field in the member's Secret (claimtoken.MemberKeyField).
	memberKeyField = "key"
	// MemberKeyFile is the key's path in a member, passed to sandboxd as --warm-key-file.
	MemberKeyFile = MemberKeyMountPath + "/" + memberKeyField
	// memberKeyVolumeName is the member key Secret's volume; class volumes may not use it.
	memberKeyVolumeName = "airlock-warm-key"
	// memberSuffixLen is the length of the random end of a member's name: longer than the 10 hex
	// digits that end a claim's name, so that a member and a claim never share a name.
	memberSuffixLen = 12
	// memberPrefixMax bounds the registry-entry part of a member's name (names are label values).
	memberPrefixMax = 63 - 1 - memberSuffixLen
)

// WarmWanted says whether a registry entry keeps a warm pool: a static one (warm > 0) or one that
// follows demand (warmPolicy, whose target may be zero at times).
func WarmWanted(entry *airlockv1alpha1.RegistrySandbox) bool {
	return entry.Warm > 0 || entry.WarmPolicy != nil
}

// WarmEligible says whether a claim can adopt a warm member: it works in a fresh workspace of its
// own (not a session's, not a mount role's, not a Failed predecessor's). Its own is the per-claim
// directory with its runtime's UID (workspace.ClaimDirName), or the one earlier versions gave
// it, without (`<ns>/sandboxes/<claim>`). The claim controller adopts for these claims only (and
// not for one that resumes a kept workspace); the pool controller counts them as its demand.
func WarmEligible(claim *airlockv1alpha1.SandboxClaim) bool {
	if claim.Spec.MountRole != "" {
		return false
	}
	dir, sandboxes := claim.Spec.WorkspaceDir, workspace.SandboxesDir(claim.Namespace)
	if uid := admission.RuntimeUID(claim); uid != "" && dir == sandboxes+"/"+workspace.ClaimDirName(claim.Name, uid) {
		return true
	}
	return dir == sandboxes+"/"+claim.Name
}

// PoolKey identifies a pool: the registry (by UID: a registry deleted and created again has
// other members), the entry, and the record its members are built from. A member whose key is
// not its entry's current one is stale (the class or the entry changed) and, while idle,
// replaced; a claim adopts only a member of the key its own record gives, so that no claim gets
// a member of another entry or of an older class or registry generation.
func PoolKey(registryUID types.UID, entry string, record *airlockv1alpha1.FrozenSandbox) string {
	if record != nil && record.SyncImage != "" {
		// Members run no Job: a claim's record (with the image) gives its pool's key.
		r := *record
		r.SyncImage = ""
		record = &r
	}
	data, _ := json.Marshal(record) // a struct of plain fields: cannot fail
	h := sha256.New()
	h.Write([]byte(registryUID))
	h.Write([]byte{0})
	h.Write([]byte(entry))
	h.Write([]byte{0})
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))[:20]
}

// MemberName returns a new member's name: <registry>-<entry>, cut, and 12 random characters.
func MemberName(registry, entry string) string {
	prefix := registry + "-" + entry
	if len(prefix) > memberPrefixMax {
		prefix = strings.TrimRight(prefix[:memberPrefixMax], "-.")
	}
	return prefix + "-" + utilrand.String(memberSuffixLen)
}

// MemberSecretName is the name of a member's key Secret.
func MemberSecretName(member string) string {
	return member + "-key"
}

// PoolPolicyName is the name of a pool's NetworkPolicy.
func PoolPolicyName(entry, key string) string {
	prefix := entry
	if len(prefix) > 40 {
		prefix = strings.TrimRight(prefix[:40], "-.")
	}
	return prefix + "-warm-" + key[:12]
}

// RegistryRef makes the registry the controller of a pool object.
func RegistryRef(reg *airlockv1alpha1.ToolRegistry) metav1.OwnerReference {
	return *metav1.NewControllerRef(reg, airlockv1alpha1.SchemeGroupVersion.WithKind("ToolRegistry"))
}

// MemberLabels are the labels of an idle member: LabelClaim with no value (claimed by nobody,
// and so in the operator's filtered cache), its registry, entry, pool and name.
func MemberLabels(reg *airlockv1alpha1.ToolRegistry, entry, key, member string) map[string]string {
	return map[string]string{
		airlockv1alpha1.LabelClaim:        "",
		airlockv1alpha1.LabelSandbox:      entry,
		airlockv1alpha1.LabelWarmRegistry: reg.Name,
		airlockv1alpha1.LabelWarmPool:     key,
		airlockv1alpha1.LabelWarmMember:   member,
	}
}

// MemberPod returns a new member's pod, controlled by the registry.
func MemberPod(reg *airlockv1alpha1.ToolRegistry, entry, key, member string, record *airlockv1alpha1.FrozenSandbox) *corev1.Pod {
	meta := metav1.ObjectMeta{
		Name:            member,
		Namespace:       reg.Namespace,
		Labels:          MemberLabels(reg, entry, key, member),
		OwnerReferences: []metav1.OwnerReference{RegistryRef(reg)},
	}
	return memberPod(meta, reg, member, record, workspace.MemberDir(reg.Namespace, member))
}

// ResumeMemberPod returns a new resume member's pod (docs/nothing-lost.md, "Resume members"): a
// member of the pool exactly as MemberPod builds it (the same record, key Secret, pool label and
// so pool policy), except that its workspace is the directory of the kept workspace whose record
// is kept, and that it says so: LabelResumes (the record's name), LabelResumesUID (its UID),
// LabelResumesRuntimeUID (whose workspace it is) and AnnotationResumesDir (the directory). Only
// the claim that would take that record adopts it (pkg/controller/claim, adopt.go).
func ResumeMemberPod(reg *airlockv1alpha1.ToolRegistry, entry, key, member string, record *airlockv1alpha1.FrozenSandbox, kept *batchv1.Job) *corev1.Pod {
	dir := kept.Annotations[airlockv1alpha1.AnnotationKeptDir]
	l := MemberLabels(reg, entry, key, member)
	l[airlockv1alpha1.LabelResumes] = kept.Name
	l[airlockv1alpha1.LabelResumesUID] = string(kept.UID)
	l[airlockv1alpha1.LabelResumesRuntimeUID] = kept.Annotations[airlockv1alpha1.AnnotationKeptRuntimeUID]
	meta := metav1.ObjectMeta{
		Name:            member,
		Namespace:       reg.Namespace,
		Labels:          l,
		Annotations:     map[string]string{airlockv1alpha1.AnnotationResumesDir: dir},
		OwnerReferences: []metav1.OwnerReference{RegistryRef(reg)},
	}
	return memberPod(meta, reg, member, record, dir)
}

// IsResumeMember says whether the pod is a resume member (LabelResumes).
func IsResumeMember(pod *corev1.Pod) bool {
	return pod.Labels[airlockv1alpha1.LabelResumes] != ""
}

// MemberWorkspaceDir is the workspace a member mounts: a resume member's kept directory, any
// other member's own.
func MemberWorkspaceDir(pod *corev1.Pod) string {
	if IsResumeMember(pod) {
		return pod.Annotations[airlockv1alpha1.AnnotationResumesDir]
	}
	return workspace.MemberDir(pod.Namespace, pod.Name)
}

// ResumeWindow is how long after a workspace of the entry is kept a resume member may wait on it:
// the entry's resumeWindow (defaulted), 0 when it keeps no warm pool or sets 0.
func ResumeWindow(entry *airlockv1alpha1.RegistrySandbox) time.Duration {
	if !WarmWanted(entry) || entry.Workspace == airlockv1alpha1.WorkspaceSession || entry.MountRole != "" {
		return 0
	}
	if entry.ResumeWindow == nil {
		return airlockv1alpha1.DefaultResumeWindow
	}
	return max(0, entry.ResumeWindow.Duration)
}

// ResumeBound is how many resume members of the entry may exist at once: its pool's own bound
// (warm, or warmPolicy.max), apart from the pool's members.
func ResumeBound(entry *airlockv1alpha1.RegistrySandbox) int {
	if entry.WarmPolicy != nil {
		return int(entry.WarmPolicy.Max)
	}
	return int(entry.Warm)
}

// memberPod is a member's pod of meta, built from record, its workspace dir.
func memberPod(meta metav1.ObjectMeta, reg *airlockv1alpha1.ToolRegistry, member string, record *airlockv1alpha1.FrozenSandbox, dir string) *corev1.Pod {
	secret := corev1.Volume{Name: memberKeyVolumeName, VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{
			SecretName:  MemberSecretName(member),
			Items:       []corev1.KeyToPath{{Key: memberKeyField, Path: memberKeyField}},
			DefaultMode: ptr.To[int32](0o440),
		},
	}}
	mount := corev1.VolumeMount{Name: memberKeyVolumeName, MountPath: MemberKeyMountPath, ReadOnly: true}
	pod := sandboxPod(meta, record, dir, MemberArgs(record), secret, mount)
	// Egress: a claim's environment and bundle, with the member's own proxy credential (from its
	// key Secret, under ProxyKey), which the gateway takes for the adopting claim's once a claim
	// has adopted the member, and for no one's before (docs/egress.md, "Warm members of a class
	// with egress").
	withEgress(pod, record, MemberProxyUsername(reg.Namespace, member), MemberSecretName(member))
	return pod
}

// MemberSecret returns a member's key Secret, controlled by its pod: created after the pod
// (which does not start before it exists) and gone with it. A member of a record with egress
// also gets its proxy credential (claimtoken.DeriveMemberProxy of the pod) under ProxyKey, which
// its environment reads; proxyCredential is "" for one without.
func MemberSecret(pod *corev1.Pod, encodedKey, proxyCredential string) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      MemberSecretName(pod.Name),
			Namespace: pod.Namespace,
			Labels: map[string]string{
				airlockv1alpha1.LabelWarmMember: pod.Name,
			},
			// Nothing waits on the Secret: no blockOwnerDeletion (which would also ask for an
			// update of pods/finalizers where OwnerReferencesPermissionEnforcement is on).
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: ptr.To(true),
			}},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{memberKeyField: []byte(encodedKey)},
	}
	if proxyCredential != "" {
		s.Data[ProxyKey] = []byte(proxyCredential)
	}
	return s
}

// PoolNetworkPolicy returns a pool's NetworkPolicy: the one a claim of the record gets,
// selecting the pool's members by their pool label (an adopted member keeps it until its claim's
// own policy is in place: leavePool).
func PoolNetworkPolicy(reg *airlockv1alpha1.ToolRegistry, entry, key string, record *airlockv1alpha1.FrozenSandbox, allowed []*corev1.Service) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name:      PoolPolicyName(entry, key),
			Namespace: reg.Namespace,
			Labels: map[string]string{
				airlockv1alpha1.LabelClaim:        "",
				airlockv1alpha1.LabelSandbox:      entry,
				airlockv1alpha1.LabelWarmRegistry: reg.Name,
				airlockv1alpha1.LabelWarmPool:     key,
			},
			OwnerReferences: []metav1.OwnerReference{RegistryRef(reg)},
		},
		Spec: policySpec(reg.Namespace, map[string]string{airlockv1alpha1.LabelWarmPool: key}, record, allowed),
	}
}
