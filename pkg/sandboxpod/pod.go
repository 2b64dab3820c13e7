package sandboxpod

import (
	"net"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
	"github.com/airlock-dev/airlock/pkg/claimname"
	"github.com/airlock-dev/airlock/pkg/isolation"
	"github.com/airlock-dev/airlock/pkg/workspace"
)

// What the operator builds for a claim (SPEC section 5). The builders are pure: they return the
// desired object, and drift repair compares the live object with it. They read the claim and its
// frozen record (status.frozen, record.go), never the live class or registry.
//
// The pod template spells out the API server's defaults for every field it sets (probe timings,
// termination message path, image pull policy, secret volume mode, ...), so that a template read
// back from the API server is semantically equal to a freshly built one, and a re-sync that
// finds no drift writes nothing.

const (
	// ContainerName is the sandbox container's name.
	ContainerName = "sandbox"
	// TokenKey is the key of the bearer token in the claim's Secret.
	TokenKey = airlockv1alpha1.ClaimTokenKey
	// TokenMountPath is where the token Secret is mounted in the sandbox.
	TokenMountPath = "/var/run/airlock/auth"
	// TokenFile is the token's path in the sandbox, passed to sandboxd as --auth-token-file.
	TokenFile = TokenMountPath + "/" + TokenKey
	// TokenVolumeName is the token Secret's volume; class volumes may not use it.
	TokenVolumeName = "airlock-auth-token"

	// LabelClaimUID is on a claim's sandbox pods: the claim's UID.
	LabelClaimUID = airlockv1alpha1.LabelClaimUID
	// AnnotationClassGeneration is on a claim's sandbox pod: the class generation of its record.
	AnnotationClassGeneration = airlockv1alpha1.AnnotationClassGeneration

	// UID is the uid and gid of sandbox and sync-back pods.
	UID = 65532
)

// ChildLabels are the labels of every child of the claim and of its sandbox pods; the claim's
// shard among them, so that the admission policy weighs them against their claim's record.
func ChildLabels(claim *airlockv1alpha1.SandboxClaim) map[string]string {
	return map[string]string{
		airlockv1alpha1.LabelClaim:      claim.Name,
		airlockv1alpha1.LabelClaimShard: claimname.Shard(claim.Name),
		airlockv1alpha1.LabelRuntime:    claim.Spec.RuntimeName,
		airlockv1alpha1.LabelSandbox:    claim.Spec.Sandbox,
	}
}

// SelectorLabels select the claim's own sandbox pods, by its name and UID. A pod of an earlier
// claim of the same name (closed and acquired again; its pod terminates in the background, Ready
// until it does) is never taken for the new claim's: by name alone, the new claim's address
// reached the old sandbox, which answered to the old token (seen by TestRealNodeReacquire).
func SelectorLabels(claim *airlockv1alpha1.SandboxClaim) map[string]string {
	return map[string]string{airlockv1alpha1.LabelClaim: claim.Name, LabelClaimUID: string(claim.UID)}
}

// PolicySelector selects the pods the claim's NetworkPolicy confines: every pod of the claim's
// name, an earlier claim's still terminating among them, so that no pod bearing the name is
// ever left without a policy while its own is deleted with its claim.
func PolicySelector(claim *airlockv1alpha1.SandboxClaim) map[string]string {
	return map[string]string{airlockv1alpha1.LabelClaim: claim.Name}
}

// PodLabels are the labels of the claim's sandbox pods: the child labels and the claim's UID, so
// that a pod of an earlier claim of the same name (still terminating after a close and a new
// acquire) is never taken for this claim's.
func PodLabels(claim *airlockv1alpha1.SandboxClaim) map[string]string {
	l := ChildLabels(claim)
	l[LabelClaimUID] = string(claim.UID)
	return l
}

// OwnerReference makes the claim the controller of a child.
func OwnerReference(claim *airlockv1alpha1.SandboxClaim) metav1.OwnerReference {
	return *metav1.NewControllerRef(claim, airlockv1alpha1.SchemeGroupVersion.WithKind("SandboxClaim"))
}

func ChildMeta(claim *airlockv1alpha1.SandboxClaim, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:            name,
		Namespace:       claim.Namespace,
		Labels:          ChildLabels(claim),
		OwnerReferences: []metav1.OwnerReference{OwnerReference(claim)},
	}
}

// RestrictedPodSecurityContext meets the restricted Pod Security Standard.
func RestrictedPodSecurityContext() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](UID),
		RunAsGroup:     ptr.To[int64](UID),
		FSGroup:        ptr.To[int64](UID),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// RestrictedContainerSecurityContext meets the restricted Pod Security Standard, except for
// readOnlyRootFilesystem (SPEC section 5: the toolchains write where they please).
func RestrictedContainerSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// JobConfig is what a workspace's Jobs (its sync-back, its record) are built with: the image of
// `airlock sync`, run as the sandbox's user with the restricted contexts above, so that the copy
// reads and writes the workspace as the sandbox does.
func JobConfig(image string) workspace.JobConfig {
	return workspace.JobConfig{Image: image, PodSecurity: RestrictedPodSecurityContext, ContainerSecurity: RestrictedContainerSecurityContext}
}

// ContentClaimName is the content PVC that the claim's workspace is in: its record's, or for a
// claim admitted before records existed its class's, defaulted (empty when class is nil).
func ContentClaimName(claim *airlockv1alpha1.SandboxClaim, class *airlockv1alpha1.SandboxClass) string {
	switch {
	case claim.Status.Frozen != nil:
		return claim.Status.Frozen.WorkspaceClaimName
	case class == nil:
		return ""
	case class.Spec.WorkspaceClaimName == "":
		return DefaultWorkspaceClaimName
	}
	return class.Spec.WorkspaceClaimName
}

// ContentClaimNameOf is ContentClaimName with the claim's class read through getClass (a lister's
// Get) when its record does not say: empty when the class is gone.
func ContentClaimNameOf(claim *airlockv1alpha1.SandboxClaim, getClass func(name string) (*airlockv1alpha1.SandboxClass, error)) (string, error) {
	if claim.Status.Frozen != nil {
		return ContentClaimName(claim, nil), nil
	}
	class, err := getClass(claim.Spec.ClassName)
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return ContentClaimName(claim, class), nil
}

// Ports returns the record's ports (defaulted, for a record that has none).
func Ports(record *airlockv1alpha1.FrozenSandbox) []airlockv1alpha1.SandboxPort {
	return Defaulted(record).Ports
}

// pullPolicy is the API server's default pull policy for image.
func pullPolicy(image string) corev1.PullPolicy {
	if strings.Contains(image, "@") {
		return corev1.PullIfNotPresent
	}
	name := image[strings.LastIndex(image, "/")+1:]
	i := strings.LastIndex(name, ":")
	if i < 0 || name[i+1:] == "latest" {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

// defaultedResources applies the API server's default: a limit without a request requests the limit.
func defaultedResources(in corev1.ResourceRequirements) corev1.ResourceRequirements {
	out := *in.DeepCopy()
	for name, limit := range out.Limits {
		if _, ok := out.Requests[name]; !ok {
			if out.Requests == nil {
				out.Requests = corev1.ResourceList{}
			}
			out.Requests[name] = limit.DeepCopy()
		}
	}
	return out
}

// ClaimPod returns the claim's sandbox pod, named after the claim and controlled by it: the
// recorded container under the restricted Pod Security level, with the claim's workspace, the
// class's volumes and the token Secret. It is one pod, the claim's only one: a name is one
// object, so two pods never write one workspace (docs/decisions.md, "Children: a pod, no
// Service").
func ClaimPod(claim *airlockv1alpha1.SandboxClaim, record *airlockv1alpha1.FrozenSandbox) *corev1.Pod {
	meta := ChildMeta(claim, claim.Name)
	meta.Labels = PodLabels(claim)
	meta.Annotations = map[string]string{AnnotationClassGeneration: strconv.FormatInt(record.ClassGeneration, 10)}
	secret := corev1.Volume{Name: TokenVolumeName, VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{
			SecretName:  claim.Name,
			Items:       []corev1.KeyToPath{{Key: TokenKey, Path: TokenKey}},
			DefaultMode: ptr.To[int32](0o440),
		},
	}}
	mount := corev1.VolumeMount{Name: TokenVolumeName, MountPath: TokenMountPath, ReadOnly: true}
	pod := sandboxPod(meta, record, workspace.DirOf(claim), ClaimArgs(record), secret, mount)
	withEgress(pod, record, ProxyUsername(claim), claim.Name)
	return pod
}

// withEgress gives the pod what a sandbox with egress gets (egress.go): the operator's
// variables last, with the credential of username from the Secret secretName, the class's of
// the same names dropped, and the CA bundle beside the token or key; the node's address after
// them (withNodeIP). Nothing when the record has no egress with its gateway.
func withEgress(pod *corev1.Pod, record *airlockv1alpha1.FrozenSandbox, username, secretName string) {
	c := &pod.Spec.Containers[0]
	c.Env = withNodeIP(withoutReserved(c.Env, egressEnv(username, record, secretName)))
	if v, m := egressVolume(record); v != nil {
		pod.Spec.Volumes = append(pod.Spec.Volumes, *v)
		c.VolumeMounts = append(c.VolumeMounts, *m)
	}
}

// sandboxPod returns a sandbox pod of meta running what record says, with args, the workspace
// dir of the content PVC, the class's volumes, and secret (the claim's token, or a warm
// member's key) mounted at mount.
func sandboxPod(meta metav1.ObjectMeta, record *airlockv1alpha1.FrozenSandbox, workspaceDir string, args []string, secret corev1.Volume, mount corev1.VolumeMount) *corev1.Pod {
	record = Defaulted(record)
	ports := record.Ports
	containerPorts := make([]corev1.ContainerPort, len(ports))
	for i, p := range ports {
		containerPorts[i] = corev1.ContainerPort{Name: p.Name, ContainerPort: p.Port, Protocol: corev1.ProtocolTCP}
	}
	var (
		volumes = make([]corev1.Volume, 0, len(record.Volumes)+1)
		mounts  = make([]corev1.VolumeMount, 0, len(record.Volumes)+1)
	)
	for _, v := range record.Volumes {
		switch {
		case v.Workspace != nil:
			volumes = append(volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: record.WorkspaceClaimName},
			}})
			mounts = append(mounts, corev1.VolumeMount{Name: v.Name, MountPath: v.MountPath, SubPath: workspaceDir})
		case v.Scratch != nil:
			emptyDir := &corev1.EmptyDirVolumeSource{}
			if v.Scratch.SizeLimit != nil {
				emptyDir.SizeLimit = ptr.To(v.Scratch.SizeLimit.DeepCopy())
			}
			volumes = append(volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{EmptyDir: emptyDir}})
			mounts = append(mounts, corev1.VolumeMount{Name: v.Name, MountPath: v.MountPath})
		}
	}
	volumes = append(volumes, secret)
	mounts = append(mounts, mount)

	container := corev1.Container{
		Name:            ContainerName,
		Image:           record.Image,
		Args:            args,
		Ports:           containerPorts,
		Env:             withNodeIP(record.Env),
		Resources:       defaultedResources(record.Resources),
		VolumeMounts:    mounts,
		SecurityContext: RestrictedContainerSecurityContext(),
		ReadinessProbe: &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path:   "/readyz",
				Port:   intstr.FromString(ports[0].Name),
				Scheme: corev1.URISchemeHTTP,
			}},
			TimeoutSeconds: 1,
			// The kubelet probes once as soon as the container runs, before sandboxd may be
			// listening; a failed first probe is tried again a period later, which a new or
			// resumed claim waits for (docs/nothing-lost.md, "The split of a re-acquire").
			PeriodSeconds:    1,
			SuccessThreshold: 1,
			FailureThreshold: 3,
		},
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		ImagePullPolicy:          pullPolicy(record.Image),
	}
	return &corev1.Pod{
		ObjectMeta: meta,
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{container},
			Volumes:                       volumes,
			RestartPolicy:                 corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: ptr.To[int64](corev1.DefaultTerminationGracePeriodSeconds),
			DNSPolicy:                     corev1.DNSClusterFirst,
			SecurityContext:               RestrictedPodSecurityContext(),
			SchedulerName:                 corev1.DefaultSchedulerName,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			RuntimeClassName:              record.RuntimeClassName,
		},
	}
}

// withNodeIP returns env with the node's address (isolation.NodeIPEnv, the downward API's
// status.hostIP) last and once, for sandboxd's node probe (docs/isolation.md, "Evidence"): any
// other variable of that name (a class's: ClassConflict refuses such a class) is dropped, so that
// no class points the probe elsewhere.
func withNodeIP(env []corev1.EnvVar) []corev1.EnvVar {
	out := make([]corev1.EnvVar, 0, len(env)+1)
	for _, e := range env {
		if e.Name != isolation.NodeIPEnv {
			out = append(out, e)
		}
	}
	return append(out, corev1.EnvVar{Name: isolation.NodeIPEnv, ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.hostIP"},
	}})
}

// Addresses are the claim's addresses: one per recorded port, at its pod's IP. The pod is Ready
// when the claim is Bound, so the address answers the moment the acquire returns it: no Service
// endpoint or proxy rule has to catch up first, and no DNS answer of an earlier claim of the same
// name can be cached (docs/decisions.md).
func Addresses(podIP string, record *airlockv1alpha1.FrozenSandbox) []airlockv1alpha1.ClaimAddress {
	ports := Ports(record)
	out := make([]airlockv1alpha1.ClaimAddress, len(ports))
	for i, p := range ports {
		out[i] = airlockv1alpha1.ClaimAddress{
			Name: p.Name,
			URL:  "http://" + net.JoinHostPort(podIP, strconv.Itoa(int(p.Port))),
		}
	}
	return out
}

// TokenSecret returns the claim's token Secret, named name (claimtoken.ClaimSecretName).
func TokenSecret(claim *airlockv1alpha1.SandboxClaim, name, token string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: ChildMeta(claim, name),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{TokenKey: []byte(token)},
	}
}

// TokenSecretWithProxy is TokenSecret with the claim's proxy credential under ProxyKey (a claim
// with egress): the pod reads it through a secretKeyRef, so that it is never in the pod's spec.
func TokenSecretWithProxy(claim *airlockv1alpha1.SandboxClaim, name, token, proxyCredential string) *corev1.Secret {
	s := TokenSecret(claim, name, token)
	s.Data[ProxyKey] = []byte(proxyCredential)
	return s
}

// UseTokenSecret points the pod's token volume, and its proxy credential's variable, at the
// Secret name.
func UseTokenSecret(pod *corev1.Pod, name string) {
	for i := range pod.Spec.Volumes {
		if v := &pod.Spec.Volumes[i]; v.Name == TokenVolumeName && v.Secret != nil {
			v.Secret.SecretName = name
		}
	}
	for i := range pod.Spec.Containers {
		for j := range pod.Spec.Containers[i].Env {
			if e := &pod.Spec.Containers[i].Env[j]; e.Name == ProxyCredentialEnv && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				e.ValueFrom.SecretKeyRef.Name = name
			}
		}
	}
}

// TokenSecretOf returns the Secret the pod's token volume names.
func TokenSecretOf(pod *corev1.Pod) string {
	for _, v := range pod.Spec.Volumes {
		if v.Name == TokenVolumeName && v.Secret != nil {
			return v.Secret.SecretName
		}
	}
	return ""
}
