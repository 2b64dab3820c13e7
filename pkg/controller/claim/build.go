package claim

import (
	"net"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	airlockv1alpha1 "github.com/airlock-dev/airlock/pkg/apis/airlock/v1alpha1"
)

// What the operator builds for a claim (SPEC section 5). The builders are pure: they return the
// desired object, and drift repair compares the live object with it. They read the claim and its
// frozen record (status.frozen, freeze.go), never the live class or registry.
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
	// tokenVolumeName is the token Secret's volume; class volumes may not use it.
	tokenVolumeName = "airlock-auth-token"

	// LabelClaimUID is on a claim's sandbox pods: the claim's UID.
	LabelClaimUID             = airlockv1alpha1.LabelClaimUID
	LabelSyncOf               = airlockv1alpha1.LabelSyncOf
	AnnotationSyncAttempt     = airlockv1alpha1.AnnotationSyncAttempt
	AnnotationClassGeneration = airlockv1alpha1.AnnotationClassGeneration
	AnnotationSyncFailures    = airlockv1alpha1.AnnotationSyncFailures
	// syncContainerName is the sync-back container's name.
	syncContainerName = "sync"
	// contentMountPath is where sync-back Jobs mount the content PVC.
	contentMountPath = "/content"
	// contentVolumeName is the content PVC's volume in sync-back Jobs.
	contentVolumeName = "content"

	// sandboxUID is the uid and gid of sandbox and sync-back pods.
	sandboxUID = 65532
	// defaultWorkspaceClaimName is SandboxClass.spec.workspaceClaimName's default.
	defaultWorkspaceClaimName = airlockv1alpha1.DefaultWorkspaceClaimName
)

// defaultArgs are SandboxClass.spec.args' default.
var defaultArgs = []string{"sandboxd", "--listen=:8080", "--workspace=/workspace"}

// defaultPorts are SandboxClass.spec.ports' default.
var defaultPorts = []airlockv1alpha1.SandboxPort{{Name: "mcp", Port: 8080}}

// workspaceClaimName is the class's content PVC, defaulted: only for the sync-back of a claim
// admitted before records existed (every other reader uses the record's).
func workspaceClaimName(class *airlockv1alpha1.SandboxClass) string {
	if class.Spec.WorkspaceClaimName == "" {
		return defaultWorkspaceClaimName
	}
	return class.Spec.WorkspaceClaimName
}

// childLabels are the labels of every child of the claim and of its sandbox pods.
func childLabels(claim *airlockv1alpha1.SandboxClaim) map[string]string {
	return map[string]string{
		LabelClaim:                   claim.Name,
		airlockv1alpha1.LabelRuntime: claim.Spec.RuntimeName,
		airlockv1alpha1.LabelSandbox: claim.Spec.Sandbox,
	}
}

// selectorLabels select the claim's own sandbox pods, by its name and UID. A pod of an earlier
// claim of the same name (closed and acquired again; its pod terminates in the background, Ready
// until it does) is never taken for the new claim's: by name alone, the new claim's address
// reached the old sandbox, which answered to the old token (seen by TestRealNodeReacquire).
func selectorLabels(claim *airlockv1alpha1.SandboxClaim) map[string]string {
	return map[string]string{LabelClaim: claim.Name, LabelClaimUID: string(claim.UID)}
}

// policySelector selects the pods the claim's NetworkPolicy confines: every pod of the claim's
// name, an earlier claim's still terminating among them, so that no pod bearing the name is
// ever left without a policy while its own is deleted with its claim.
func policySelector(claim *airlockv1alpha1.SandboxClaim) map[string]string {
	return map[string]string{LabelClaim: claim.Name}
}

// podLabels are the labels of the claim's sandbox pods: the child labels and the claim's UID, so
// that a pod of an earlier claim of the same name (still terminating after a close and a new
// acquire) is never taken for this claim's.
func podLabels(claim *airlockv1alpha1.SandboxClaim) map[string]string {
	l := childLabels(claim)
	l[LabelClaimUID] = string(claim.UID)
	return l
}

// ownerReference makes the claim the controller of a child.
func ownerReference(claim *airlockv1alpha1.SandboxClaim) metav1.OwnerReference {
	return *metav1.NewControllerRef(claim, airlockv1alpha1.SchemeGroupVersion.WithKind("SandboxClaim"))
}

func childMeta(claim *airlockv1alpha1.SandboxClaim, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:            name,
		Namespace:       claim.Namespace,
		Labels:          childLabels(claim),
		OwnerReferences: []metav1.OwnerReference{ownerReference(claim)},
	}
}

// restrictedPodSecurityContext meets the restricted Pod Security Standard.
func restrictedPodSecurityContext() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](sandboxUID),
		RunAsGroup:     ptr.To[int64](sandboxUID),
		FSGroup:        ptr.To[int64](sandboxUID),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// restrictedContainerSecurityContext meets the restricted Pod Security Standard, except for
// readOnlyRootFilesystem (SPEC section 5: the toolchains write where they please).
func restrictedContainerSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// sandboxArgs are the record's args plus the per-claim switches of sandboxd: always an explicit
// --allowed-tools list (a record's list is never empty: freeze writes every tool out, and the
// CRD requires one at least), and the token file.
func sandboxArgs(record *airlockv1alpha1.FrozenSandbox) []string {
	args := append([]string(nil), record.Args...)
	if len(args) == 0 {
		args = append(args, defaultArgs...)
	}
	tools := make([]string, len(record.AllowedTools))
	for i, t := range record.AllowedTools {
		tools[i] = string(t)
	}
	args = append(args, "--allowed-tools="+strings.Join(tools, ","))
	return append(args, "--auth-token-file="+TokenFile)
}

// recordPorts returns the record's ports (defaulted, for a record that has none).
func recordPorts(record *airlockv1alpha1.FrozenSandbox) []airlockv1alpha1.SandboxPort {
	if len(record.Ports) == 0 {
		return defaultPorts
	}
	return record.Ports
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

// buildPod returns the claim's sandbox pod, named after the claim and controlled by it: the
// recorded container under the restricted Pod Security level, with the claim's workspace, the
// class's volumes and the token Secret. It is one pod, the claim's only one: a name is one
// object, so two pods never write one workspace (docs/decisions.md, "Children: a pod, no
// Service").
func buildPod(claim *airlockv1alpha1.SandboxClaim, record *airlockv1alpha1.FrozenSandbox) *corev1.Pod {
	meta := childMeta(claim, claim.Name)
	meta.Labels = podLabels(claim)
	meta.Annotations = map[string]string{AnnotationClassGeneration: strconv.FormatInt(record.ClassGeneration, 10)}
	secret := corev1.Volume{Name: tokenVolumeName, VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{
			SecretName:  claim.Name,
			Items:       []corev1.KeyToPath{{Key: TokenKey, Path: TokenKey}},
			DefaultMode: ptr.To[int32](0o440),
		},
	}}
	mount := corev1.VolumeMount{Name: tokenVolumeName, MountPath: TokenMountPath, ReadOnly: true}
	return sandboxPod(meta, record, claim.Spec.WorkspaceDir, sandboxArgs(record), secret, mount)
}

// sandboxPod returns a sandbox pod of meta running what record says, with args, the workspace
// dir of the content PVC, the class's volumes, and secret (the claim's token, or a warm
// member's key) mounted at mount.
func sandboxPod(meta metav1.ObjectMeta, record *airlockv1alpha1.FrozenSandbox, workspaceDir string, args []string, secret corev1.Volume, mount corev1.VolumeMount) *corev1.Pod {
	ports := recordPorts(record)
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
		Env:             append([]corev1.EnvVar(nil), record.Env...),
		Resources:       defaultedResources(record.Resources),
		VolumeMounts:    mounts,
		SecurityContext: restrictedContainerSecurityContext(),
		ReadinessProbe: &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path:   "/readyz",
				Port:   intstr.FromString(ports[0].Name),
				Scheme: corev1.URISchemeHTTP,
			}},
			TimeoutSeconds:   1,
			PeriodSeconds:    2,
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
			SecurityContext:               restrictedPodSecurityContext(),
			SchedulerName:                 corev1.DefaultSchedulerName,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			RuntimeClassName:              record.RuntimeClassName,
		},
	}
}

// addresses are the claim's addresses: one per recorded port, at its pod's IP. The pod is Ready
// when the claim is Bound, so the address answers the moment the acquire returns it: no Service
// endpoint or proxy rule has to catch up first, and no DNS answer of an earlier claim of the same
// name can be cached (docs/decisions.md).
func addresses(podIP string, record *airlockv1alpha1.FrozenSandbox) []airlockv1alpha1.ClaimAddress {
	ports := recordPorts(record)
	out := make([]airlockv1alpha1.ClaimAddress, len(ports))
	for i, p := range ports {
		out[i] = airlockv1alpha1.ClaimAddress{
			Name: p.Name,
			URL:  "http://" + net.JoinHostPort(podIP, strconv.Itoa(int(p.Port))),
		}
	}
	return out
}

// buildNetworkPolicy returns the claim's NetworkPolicy. Egress reaches nothing but the pods of
// the allowed Services that exist (allowed), on their target ports, and DNS when the record
// allows any Service; ingress is the
// recorded ports from pods in the claim's namespace.
func buildNetworkPolicy(claim *airlockv1alpha1.SandboxClaim, record *airlockv1alpha1.FrozenSandbox, allowed []*corev1.Service) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: childMeta(claim, claim.Name),
		Spec:       networkPolicySpec(claim.Namespace, policySelector(claim), record, allowed),
	}
}

// networkPolicySpec is the policy of the sandbox pods selected by selector in namespace, built
// from record: default deny, the recorded ports open to the namespace's pods, egress only to the
// allowed Services' pods (and DNS when the record allows any Service).
func networkPolicySpec(namespace string, selector map[string]string, record *airlockv1alpha1.FrozenSandbox, allowed []*corev1.Service) networkingv1.NetworkPolicySpec {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	var egress []networkingv1.NetworkPolicyEgressRule
	for _, svc := range allowed {
		if len(svc.Spec.Selector) == 0 {
			continue // no selector: no pods to name (ExternalName, manual endpoints)
		}
		rule := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: svc.Namespace}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: svc.Spec.Selector},
		}}}
		for _, p := range svc.Spec.Ports {
			protocol := p.Protocol
			if protocol == "" {
				protocol = corev1.ProtocolTCP
			}
			target := p.TargetPort
			if target.Type == intstr.Int && target.IntVal == 0 || target.Type == intstr.String && target.StrVal == "" {
				target = intstr.FromInt32(p.Port) // an unset targetPort is the port
			}
			rule.Ports = append(rule.Ports, networkingv1.NetworkPolicyPort{Protocol: ptr.To(protocol), Port: ptr.To(target)})
		}
		egress = append(egress, rule)
	}
	if len(record.AllowedServices) > 0 {
		// DNS whenever the record allows some Service (SPEC section 5), whether or not the
		// Service exists yet or names pods: the sandbox reaches it by name.
		egress = append(egress, networkingv1.NetworkPolicyEgressRule{
			To: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: metav1.NamespaceSystem}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
			}},
			Ports: []networkingv1.NetworkPolicyPort{
				{Protocol: ptr.To(udp), Port: ptr.To(intstr.FromInt32(53))},
				{Protocol: ptr.To(tcp), Port: ptr.To(intstr.FromInt32(53))},
			},
		})
	}
	var ingressPorts []networkingv1.NetworkPolicyPort
	for _, p := range recordPorts(record) {
		ingressPorts = append(ingressPorts, networkingv1.NetworkPolicyPort{Protocol: ptr.To(tcp), Port: ptr.To(intstr.FromInt32(p.Port))})
	}
	return networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: selector},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: namespace}},
			}},
			Ports: ingressPorts,
		}},
		Egress: egress,
	}
}

// buildSecret returns the claim's token Secret, named name (claimtoken.ClaimSecretName).
func buildSecret(claim *airlockv1alpha1.SandboxClaim, name, token string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: childMeta(claim, name),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{TokenKey: []byte(token)},
	}
}

// useTokenSecret points the pod's token volume at the Secret name.
func useTokenSecret(pod *corev1.Pod, name string) {
	for i := range pod.Spec.Volumes {
		if v := &pod.Spec.Volumes[i]; v.Name == tokenVolumeName && v.Secret != nil {
			v.Secret.SecretName = name
		}
	}
}

// tokenSecretOf returns the Secret the pod's token volume names.
func tokenSecretOf(pod *corev1.Pod) string {
	for _, v := range pod.Spec.Volumes {
		if v.Name == tokenVolumeName && v.Secret != nil {
			return v.Secret.SecretName
		}
	}
	return ""
}

// syncJobName is the name of the claim's sync-back Job.
func syncJobName(claim *airlockv1alpha1.SandboxClaim) string {
	return claim.Name + "-sync"
}

// buildSyncJob returns the claim's sync-back Job: `airlock sync` (the image's entrypoint is
// airlock) copying workspaceDir into targetPath inside the content PVC, and removing the
// workspace afterwards when removeWorkspace is set (syncJobArgs). It does not retry by
// itself (backoffLimit 0): the controller retries with its own backoff. An attempt ends by
// syncDeadline (activeDeadlineSeconds) whatever happens to its pod.
func buildSyncJob(claim *airlockv1alpha1.SandboxClaim, contentClaimName, image string, attempt int, removeWorkspace bool) *batchv1.Job {
	meta := childMeta(claim, syncJobName(claim))
	meta.Annotations = map[string]string{AnnotationSyncAttempt: strconv.Itoa(attempt)}
	return &batchv1.Job{
		ObjectMeta: meta,
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr.To[int32](0),
			ActiveDeadlineSeconds: ptr.To(int64(syncDeadline / time.Second)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelSyncOf: claim.Name}},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					AutomountServiceAccountToken: ptr.To(false),
					EnableServiceLinks:           ptr.To(false),
					SecurityContext:              restrictedPodSecurityContext(),
					Containers: []corev1.Container{{
						Name:  syncContainerName,
						Image: image,
						Args:  syncJobArgs(claim, removeWorkspace),

						VolumeMounts:             []corev1.VolumeMount{{Name: contentVolumeName, MountPath: contentMountPath}},
						SecurityContext:          restrictedContainerSecurityContext(),
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
					}},
					Volumes: []corev1.Volume{{Name: contentVolumeName, VolumeSource: corev1.VolumeSource{
						PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: contentClaimName},
					}}},
				},
			},
		},
	}
}
