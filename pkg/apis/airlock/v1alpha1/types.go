package v1alpha1

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Labels the operator puts on every SandboxClaim (SPEC section 2).
const (
	// LabelRuntime names the AgentRuntime a claim belongs to.
	LabelRuntime = "airlock.dev/runtime"
	// LabelSandbox names the ToolRegistry sandbox entry a claim was made for.
	LabelSandbox = "airlock.dev/sandbox"
	// LabelSessionHash is a hash of the claim's session, which may not be a valid label value itself.
	LabelSessionHash = "airlock.dev/session-hash"
)

// Well-known labels and keys of what the operator builds for a claim (SPEC section 5).
const (
	// LabelClaim is on every child of a claim and on its sandbox pods: the claim's name.
	LabelClaim = "airlock.dev/claim"
	// LabelClaimUID is on a claim's sandbox pods: the claim's UID, so that a pod of an earlier
	// claim of the same name is never taken for this one's.
	LabelClaimUID = "airlock.dev/claim-uid"
	// LabelClaimShard is on every claim and on its children and sandbox pods: the last character
	// of the claim's name. The admission policy that ties a claim's pod to the claim's record has
	// one binding per shard, so that the API server weighs a pod against the claims of its shard
	// only, not every claim of the namespace (docs/security.md, "Cost, measured").
	LabelClaimShard = "airlock.dev/claim-shard"
	// ClaimTokenKey is the key of the bearer token in a claim's Secret (named like the claim).
	ClaimTokenKey = "token"
	// LabelSyncOf is on sync-back Jobs and their pods: the claim whose workspace they copy. They do
	// not carry LabelClaim, so the claim's NetworkPolicy never selects them, nor is a sync-back pod
	// ever taken for the claim's sandbox pod.
	LabelSyncOf = "airlock.dev/sync-of"
	// AnnotationSyncAttempt numbers a sync-back Job's attempt (1, 2, ...).
	AnnotationSyncAttempt = "airlock.dev/sync-attempt"
	// AnnotationSyncFailures on a claim counts its failed sync-back attempts.
	AnnotationSyncFailures = "airlock.dev/sync-failures"
	// AnnotationClassGeneration on a claim's sandbox pod is the generation of the SandboxClass its
	// record (status.frozen) was built from.
	AnnotationClassGeneration = "airlock.dev/class-generation"
)

// Well-known labels of warm members (docs/decisions.md, "Warm pools"). A warm member is a sandbox
// pod built ahead of any claim; it carries LabelClaim with an empty value (claimed by nobody yet)
// until a claim adopts it and the value becomes the claim's name.
const (
	// LabelWarmRegistry is on a warm member while it is idle: the ToolRegistry whose pool it is
	// in. Adoption removes it.
	LabelWarmRegistry = "airlock.dev/warm-registry"
	// LabelWarmPool is on a warm member and on its pool's NetworkPolicy: a hash of the
	// registry's UID, the entry and the record the member was built from. The policy selects
	// the members by it; an adopted member loses it once its claim's own policy is in place.
	LabelWarmPool = "airlock.dev/warm-pool"
	// LabelWarmMember is on a warm member for good: its own name.
	LabelWarmMember = "airlock.dev/warm-member"
	// LabelResumes is on a resume member (docs/nothing-lost.md, "Resume members"): a warm member
	// whose workspace is a kept one, started for the claim that resumes it; the value is the
	// kept workspace's record name (workspace.RecordName of its directory). An ordinary claim
	// never adopts such a member, and a resuming claim adopts no other.
	LabelResumes = "airlock.dev/resumes"
	// LabelResumesUID is on a resume member: the UID of the record it was started for (a record
	// of the same name written again later is another one).
	LabelResumesUID = "airlock.dev/resumes-uid"
	// LabelResumesRuntimeUID is on a resume member: the UID of the runtime whose kept workspace
	// it mounts.
	LabelResumesRuntimeUID = "airlock.dev/resumes-runtime-uid"
	// AnnotationResumesDir is on a resume member: the kept workspace directory it mounts.
	AnnotationResumesDir = "airlock.dev/resumes-dir"
	// AnnotationIsolationEvidence is on a warm member once the operator read its isolation
	// evidence (at its readiness, before any adoption): what was read, with the Node's kernel,
	// sealed by the operator with a key of its own and bound to the pod's UID and node
	// (docs/isolation.md, "Warm members"). A member without it is not adopted while the
	// operator reads evidence.
	AnnotationIsolationEvidence = "airlock.dev/isolation-evidence"
)

// The defaults of the CRD schema (the +kubebuilder:default markers below), in one place for the
// code that reads objects which never went through an API server, or fields left unset; a test
// pins them to manifests/crd.
const (
	// DefaultMaxPerSession is AgentRuntime spec.sandbox.maxPerSession's default.
	DefaultMaxPerSession int32 = 3
	// DefaultMaxConcurrent is AgentRuntime spec.sandbox.maxConcurrent's default.
	DefaultMaxConcurrent int32 = 5
	// DefaultIdleTimeout is AgentRuntime spec.sandbox.idleTimeout's default.
	DefaultIdleTimeout = 30 * time.Minute
	// DefaultWorkspaceRetention is AgentRuntime spec.sandbox.workspaceRetention's default: a day,
	// so that a user who comes back to a conversation the next working day resumes with its files,
	// while a workspace nobody comes back to costs its space for one day at most
	// (docs/nothing-lost.md, "Resume without loss").
	DefaultWorkspaceRetention = 24 * time.Hour
	// DefaultTargetVersions is a ToolRegistry sandbox's targetVersions default: the older of two
	// sessions that share a target, and two sync-backs more, are recoverable.
	DefaultTargetVersions int32 = 3
	// DefaultMaxInstances is a ToolRegistry sandbox's maxInstances default.
	DefaultMaxInstances int32 = 10
	// DefaultWarmHeadroomPercent is a ToolRegistry sandbox's warmPolicy.headroomPercent default.
	DefaultWarmHeadroomPercent int32 = 50
	// DefaultResumeWindow is a ToolRegistry sandbox's resumeWindow default: how long after a
	// workspace is kept a resume member waits on it (docs/nothing-lost.md, "Resume members"). Ten
	// minutes covers a session closed and opened again, or a follow-up after a short pause,
	// while an idle member holds a pod's requests for no longer than that.
	DefaultResumeWindow = 10 * time.Minute
	// DefaultStartupTimeout is SandboxClass spec.startupTimeout's default.
	DefaultStartupTimeout = 5 * time.Minute
	// DefaultWorkspaceClaimName is SandboxClass spec.workspaceClaimName's default.
	DefaultWorkspaceClaimName = "workspace-content"
)

// ConditionPodLost is the SandboxClaim condition that says its pod cannot run and cannot be
// replaced yet (docs/nothing-lost.md): True while a pod of the claim is on a Node that is NotReady
// or unreachable, or is stuck terminating, with the reason (NodeNotReady, NodeUnreachable,
// NodeGone, NodeOutOfService, PodStuckTerminating) and a message naming the pod and its Node. The
// Sandbox API answers an acquire of such a claim with that reason and message rather than an
// address that does not answer.
const ConditionPodLost = "PodLost"

// ConditionSyncBack is the SandboxClaim condition of its sync-back (and workspace cleanup); the
// reasons below are those of a sync-back that is stuck or failing, which the AgentRuntime's
// status.claims.stuck counts (docs/nothing-lost.md).
const (
	ConditionSyncBack = "SyncBack"
	// ReasonSyncBackFailed: the last sync-back attempt failed; it is retried with backoff.
	ReasonSyncBackFailed = "SyncBackFailed"
	// ReasonWorkspaceCleanupFailed: the last workspace cleanup attempt failed; retried.
	ReasonWorkspaceCleanupFailed = "WorkspaceCleanupFailed"
	// ReasonSyncJobNotStarted: the last attempt's Job pod did not become ready within the sync
	// start timeout (an image that cannot be pulled, a PVC that cannot be mounted); retried.
	ReasonSyncJobNotStarted = "SyncJobNotStarted"
	// ReasonSyncBackGaveUp: the last attempt failed and no more are made (the claim is Failed).
	ReasonSyncBackGaveUp = "SyncBackGaveUp"
)

// ReasonWaitingForWorkspaceCollection is the Ready condition's reason of a Binding claim whose
// workspace directory holds another owner's kept workspace (a runtime deleted and created again
// under its name) being removed first: no pod is made on it until then (docs/nothing-lost.md).
// The Sandbox API answers an acquire of such a claim with it.
const ReasonWaitingForWorkspaceCollection = "WaitingForWorkspaceCollection"

// AnnotationReapRequested on a claim asks the leader to reap it now, with sync-back, as if its idle
// timeout had passed; the Sandbox API's sessions/close sets it (value: the RFC 3339 time of the
// request). A claim not yet Binding is deleted instead: it has no work to save.
const AnnotationReapRequested = "airlock.dev/reap-requested"

// AnnotationTraceparent on a claim is the W3C traceparent of the Sandbox API's acquire span
// that created it, so that the leader's spans of the claim join the runtime's trace
// (docs/record.md §1). Metadata only: nothing decides what the claim runs by it.
const AnnotationTraceparent = "airlock.dev/traceparent"

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:scope=Cluster,shortName=sbc,categories=airlock
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`
// +kubebuilder:printcolumn:name="Runtime-Class",type=string,JSONPath=`.spec.runtimeClassName`
// +kubebuilder:printcolumn:name="Valid",type=string,JSONPath=`.status.conditions[?(@.type=="Valid")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Valid")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// SandboxClass says what a sandbox pod is: an image, its ports and its filesystem. It grants no
// tools; the operator builds what the class declares.
type SandboxClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec SandboxClassSpec `json:"spec"`
	// +optional
	Status SandboxClassStatus `json:"status,omitempty"`
}

// SandboxClassSpec is the desired shape of every sandbox pod built from the class.
// +kubebuilder:validation:XValidation:rule="!has(self.volumes) || self.volumes.filter(v, has(v.workspace)).size() <= 1",message="at most one volume may be the workspace"
// +kubebuilder:validation:XValidation:rule="!has(self.args) || self.args.all(a, a.split('=')[0].replace('_', '-') != '--workspace' || a == '--workspace=/workspace' || (has(self.volumes) && self.volumes.exists(v, has(v.workspace) && a == '--workspace=' + v.mountPath)))",message="--workspace is the operator's: sandboxd always serves the workspace volume's mountPath (args may only repeat it, or the default --workspace=/workspace)"
// +kubebuilder:validation:XValidation:rule="!has(self.volumes) || self.volumes.all(v, !(v.name in ['airlock-auth-token', 'airlock-warm-key', 'airlock-egress-ca']))",message="volume names airlock-auth-token, airlock-warm-key and airlock-egress-ca are the operator's"
// +kubebuilder:validation:XValidation:rule="!has(self.volumes) || self.volumes.all(v, !(['/var/run/airlock', '/run/airlock'].exists(d, (v.mountPath + '/').startsWith(d + '/') || (d + '/').startsWith(v.mountPath.endsWith('/') ? v.mountPath : v.mountPath + '/'))))",message="a volume may not be mounted at, over or under /var/run/airlock or /run/airlock: the operator mounts the claim's token, a warm member's key and the egress CA there"
type SandboxClassSpec struct {
	// Image is the container image of the sandbox.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Image string `json:"image"`

	// Args are the container's arguments, run by the image's airlock entrypoint: sandboxd,
	// then flags written --name=value. The flags that decide what the sandbox may do are the
	// operator's alone (--allowed-tools, --auth-token-file, --warm-key-file, --readonly,
	// --workspace, --help): it passes them itself, the tools from the registry entry and the
	// workspace at the workspace volume's mountPath. A --workspace of that mountPath or of
	// /workspace (the default's) is accepted and left out: the operator passes its own.
	// +optional
	// +kubebuilder:default={"sandboxd","--listen=:8080","--workspace=/workspace"}
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="self.size() == 0 || (self[0] == 'sandboxd' && self.filter(a, a == 'sandboxd').size() == 1)",message="args must begin with sandboxd, once: the sandbox is airlock's sandboxd"
	// +kubebuilder:validation:XValidation:rule="self.all(a, a == 'sandboxd' || a.matches('^--[A-Za-z0-9][-_A-Za-z0-9]*='))",message="each arg after sandboxd must be a flag written --name=value: a bare flag, a value or -- could take the operator's flags for its own"
	// +kubebuilder:validation:XValidation:rule="self.all(a, !(a.split('=')[0].replace('_', '-') in ['--allowed-tools', '--auth-token-file', '--warm-key-file', '--readonly', '--help']))",message="args may not set --allowed-tools, --auth-token-file, --warm-key-file, --readonly or --help: the operator passes them (a class grants no tools)"
	Args []string `json:"args,omitempty"`

	// Ports are the container ports; acquire returns one address per port, at the sandbox pod's
	// IP (there is no Service: the address answers the moment the claim is Bound).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:default={{name: "mcp", port: 8080}}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Ports []SandboxPort `json:"ports,omitempty"`

	// Env is the container's environment, e.g. HOME, GOPATH, GOCACHE pointing into a scratch volume.
	// It reads no Secret: the agent can read its environment, and credentials reach the network
	// through the egress gateway instead (spec.egress.credentials).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:XValidation:rule="self.all(e, !has(e.valueFrom) || !has(e.valueFrom.secretKeyRef))",message="env may not read a Secret (valueFrom.secretKeyRef): the agent can read its environment; name credentials in spec.egress"
	Env []corev1.EnvVar `json:"env,omitempty"`

	// Resources are the container's compute resources.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// RuntimeClassName selects a RuntimeClass for the pod, e.g. gVisor or Kata.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	RuntimeClassName *string `json:"runtimeClassName,omitempty"`

	// Isolation is what the class needs of the boundary between its sandboxes and the node,
	// checked against the evidence each sandbox gives before it serves a tool (docs/isolation.md):
	// a claim whose evidence does not show it fails with reason IsolationNotMet, never Bound.
	// +optional
	Isolation *SandboxIsolation `json:"isolation,omitempty"`

	// Volumes declare the pod's filesystem: the claim's workspace, and scratch space.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Volumes []SandboxVolume `json:"volumes,omitempty"`

	// WorkspaceClaimName is the ReadWriteMany PersistentVolumeClaim, in the claim's namespace,
	// that holds workspaces and project content.
	// +optional
	// +kubebuilder:default="workspace-content"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	WorkspaceClaimName string `json:"workspaceClaimName,omitempty"`

	// AllowedServices are the in-cluster Services the sandbox may reach; empty reaches nothing.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	AllowedServices []ServiceReference `json:"allowedServices,omitempty"`

	// Egress is what the sandbox may reach outside the cluster, through airlock's egress gateway
	// (docs/egress.md): only the hosts it lists, with the credentials it names injected by the
	// gateway. Absent: the sandbox reaches nothing outside the cluster. A class with egress is
	// admitted only by an operator that knows its gateway (--egress-gateway-service).
	// +optional
	Egress *SandboxEgress `json:"egress,omitempty"`

	// StartupTimeout is how long a claim may take to become Bound before it is Failed.
	// +optional
	// +kubebuilder:default="5m"
	StartupTimeout *metav1.Duration `json:"startupTimeout,omitempty"`
}

// IsolationKernel is what a class needs of its sandboxes' kernel.
// +kubebuilder:validation:Enum=Dedicated;Any
type IsolationKernel string

const (
	// KernelDedicated: each sandbox runs on a kernel of its own (gVisor's, a VM's), never the
	// node's: its evidence must show a kernel release that is not the node's.
	KernelDedicated IsolationKernel = "Dedicated"
	// KernelAny: the node's kernel will do (runc); the evidence is still read and recorded.
	KernelAny IsolationKernel = "Any"
)

// SandboxIsolation is what a class needs of the boundary between its sandboxes and the node.
type SandboxIsolation struct {
	// Kernel is Dedicated (a kernel of the sandbox's own) or Any.
	// +optional
	// +kubebuilder:default=Any
	Kernel IsolationKernel `json:"kernel,omitempty"`
}

// SandboxPort is one container port of a sandbox.
type SandboxPort struct {
	// Name is the port's name (an IANA service name), e.g. "mcp".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// Port is the container port number.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
}

// SandboxVolume is one volume of a sandbox pod: exactly one of workspace or scratch.
// +kubebuilder:validation:XValidation:rule="has(self.workspace) != has(self.scratch)",message="exactly one of workspace or scratch must be set"
type SandboxVolume struct {
	// Name is the volume's name in the pod.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// MountPath is where the volume is mounted in the container: an absolute path without
	// empty, "." or ".." segments.
	// +required
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/`
	// +kubebuilder:validation:XValidation:rule="!self.contains('//') && !self.split('/').exists(s, s == '.' || s == '..')",message="mountPath may not hold empty, . or .. segments"
	MountPath string `json:"mountPath"`
	// Workspace mounts the claim's subtree of the workspace content PVC.
	// +optional
	Workspace *WorkspaceVolumeSource `json:"workspace,omitempty"`
	// Scratch is an emptyDir with a size limit.
	// +optional
	Scratch *ScratchVolumeSource `json:"scratch,omitempty"`
}

// WorkspaceVolumeSource marks a volume as the claim's workspace. It has no fields: the
// directory is the claim's, never the sandbox's to choose.
type WorkspaceVolumeSource struct{}

// ScratchVolumeSource is an emptyDir with a size limit.
type ScratchVolumeSource struct {
	// SizeLimit caps the emptyDir.
	// +optional
	SizeLimit *resource.Quantity `json:"sizeLimit,omitempty"`
}

// SandboxEgress is what a sandbox may reach through the egress gateway: nothing that no host
// entry or credential allows.
// +kubebuilder:validation:XValidation:rule="(has(self.hosts) && size(self.hosts) > 0) || (has(self.credentials) && size(self.credentials) > 0)",message="egress must list at least one host or credential"
// +kubebuilder:validation:XValidation:rule="!has(self.credentials) || !has(self.hosts) || self.credentials.all(c, !self.hosts.exists(h, h.host == c.host && c.port in h.ports))",message="a credential's host and port must not also be listed in hosts: requests would pass there without the credential (the credential entry allows the host itself)"
// +kubebuilder:validation:XValidation:rule="!has(self.credentials) || self.credentials.all(c, self.credentials.exists_one(d, d.host == c.host && d.port == c.port))",message="at most one credential per host and port"
type SandboxEgress struct {
	// Hosts are the hosts the sandbox may reach, each on its ports.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Hosts []EgressHost `json:"hosts,omitempty"`

	// Credentials are headers the gateway adds to the requests to one host (it terminates the TLS
	// of that host's tunnels with its own CA, which the sandbox trusts through the mounted CA
	// bundle). The sandbox never holds them: they live in Secrets of the operator's namespace.
	// Each credential also allows its host, on its port, with its methods and paths.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Credentials []EgressCredential `json:"credentials,omitempty"`
}

// EgressHost allows one host, or every name below a suffix, on some ports.
type EgressHost struct {
	// Host is an exact name ("proxy.golang.org") or a wildcard "*.suffix" ("*.githubusercontent.com":
	// every name below the suffix at any depth, not the suffix itself; the suffix has two labels
	// or more). Lower case, ASCII (IDNA A-labels: xn--...), no trailing dot; IP addresses are not
	// hosts.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^([*][.])?[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?([.][a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$')",message="host must be a lower-case DNS name (ASCII, IDNA A-labels, no trailing dot) or *.suffix"
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('*.') || self.split('.').size() >= 3",message="a wildcard needs a suffix of two labels or more (*.example.com, not *.com)"
	// +kubebuilder:validation:XValidation:rule="!self.matches('(^|[.])(0x[0-9a-f]*|[0-9]+)$')",message="host must be a name, not an IP address: its last label may not be numeric"
	Host string `json:"host"`

	// Ports are the allowed ports (443 for HTTPS).
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Ports []EgressPort `json:"ports"`

	// Methods, when set, are the only HTTP methods allowed. The gateway reads the requests only
	// of plain HTTP and of the tunnels it terminates: a CONNECT to a host whose every entry
	// restricts methods or paths is terminated (or refused by a gateway without a CA).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	Methods []EgressMethod `json:"methods,omitempty"`

	// PathPrefixes, when set, are the only paths allowed: a path matches a prefix it equals or
	// continues after a "/" ("/v1" matches "/v1" and "/v1/x", not "/v1beta").
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	PathPrefixes []EgressPathPrefix `json:"pathPrefixes,omitempty"`

	// AllowPrivate lets the host resolve to private (RFC 1918, ULA), CGNAT, reserved or cluster
	// addresses. Loopback, link-local (the metadata address) and multicast stay refused.
	// +optional
	AllowPrivate bool `json:"allowPrivate,omitempty"`
}

// EgressCredential is a header the gateway injects into the requests to one host.
type EgressCredential struct {
	// Host is the one exact name the credential is sent to (no wildcard, no address).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?([.][a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$')",message="a credential's host must be one lower-case DNS name (ASCII, no trailing dot): no wildcard"
	// +kubebuilder:validation:XValidation:rule="!self.matches('(^|[.])(0x[0-9a-f]*|[0-9]+)$')",message="host must be a name, not an IP address: its last label may not be numeric"
	Host string `json:"host"`

	// Port is the host's port (TLS: the credential never crosses the network in clear).
	// +optional
	// +kubebuilder:default=443
	Port EgressPort `json:"port,omitempty"`

	// Methods, when set, are the only methods the credential's requests may use.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	Methods []EgressMethod `json:"methods,omitempty"`

	// PathPrefixes, when set, are the only paths the credential's requests may ask for.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	PathPrefixes []EgressPathPrefix `json:"pathPrefixes,omitempty"`

	// Header is the header the gateway sets (replacing the sandbox's own), e.g. Authorization.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^[-!#$%&*+.^_|~0-9A-Za-z]+$')",message="header must be an HTTP header name (letters, digits and !#$%&*+-.^_|~)"
	// +kubebuilder:validation:XValidation:rule="!(self.lowerAscii() in ['host', 'connection', 'proxy-connection', 'keep-alive', 'proxy-authorization', 'proxy-authenticate', 'te', 'trailer', 'transfer-encoding', 'upgrade'])",message="header may not be Host nor a hop-by-hop header"
	Header string `json:"header"`

	// SecretName is the Secret, in the operator's namespace, that holds the header's whole value
	// (e.g. "Bearer ..."); the gateway reads it, the sandbox never does.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	SecretName string `json:"secretName"`
}

// EgressPort is a TCP port.
// +kubebuilder:validation:Minimum=1
// +kubebuilder:validation:Maximum=65535
type EgressPort int32

// EgressMethod is an HTTP method (CONNECT is the gateway's, never a rule's).
// +kubebuilder:validation:Enum=GET;HEAD;POST;PUT;PATCH;DELETE;OPTIONS
type EgressMethod string

// EgressPathPrefix is a path prefix: it starts with "/" and holds no dot segments, empty
// segments, %-escapes or backslashes (servers differ in how they read them).
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=256
// +kubebuilder:validation:XValidation:rule="self.startsWith('/')",message="a path prefix starts with /"
// +kubebuilder:validation:XValidation:rule="!self.contains('%') && !self.contains('\\\\') && !self.contains('?') && !self.contains('#')",message="a path prefix holds no %-escapes, backslashes, ? or #"
// +kubebuilder:validation:XValidation:rule="!self.matches('(^|/)[.][.]?(/|$)') && !self.contains('//')",message="a path prefix holds no dot segments and no empty segments"
type EgressPathPrefix string

// FrozenEgress is a claim's egress as frozen at admission: the class's policy and the gateway the
// operator named then. The gateway enforces the policy; the claim's NetworkPolicy opens the
// gateway's pods on its port, and the pod's environment points the proxy variables at it.
type FrozenEgress struct {
	// Hosts are the class's allowed hosts.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Hosts []EgressHost `json:"hosts,omitempty"`

	// Credentials are the class's credentials.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Credentials []EgressCredential `json:"credentials,omitempty"`

	// Gateway is where the sandbox reaches the gateway.
	// +required
	Gateway EgressGateway `json:"gateway"`
}

// EgressGateway is the egress gateway as the operator found it when the claim was admitted.
type EgressGateway struct {
	// Namespace of the gateway's Service and pods.
	// +required
	Namespace string `json:"namespace"`
	// Service is the gateway's Service's name.
	// +required
	Service string `json:"service"`
	// Address is the Service's cluster IP: a sandbox has no DNS server, so its proxy URL names
	// the gateway by address.
	// +required
	Address string `json:"address"`
	// Port is the Service's port, in the proxy URL.
	// +required
	Port int32 `json:"port"`
	// TargetPort is the gateway pods' port the Service sends it to, opened by the NetworkPolicy.
	// +required
	TargetPort intstr.IntOrString `json:"targetPort"`
	// PodSelector is the Service's selector: the gateway's pods.
	// +required
	PodSelector map[string]string `json:"podSelector"`
	// CABundleConfigMap, when set, is the ConfigMap of the claim's namespace (key ca.crt) that
	// holds the bundle the sandbox trusts: public roots and the gateway's terminating CA.
	// +optional
	CABundleConfigMap string `json:"caBundleConfigMap,omitempty"`
}

// ServiceReference names an in-cluster Service.
type ServiceReference struct {
	// Namespace of the Service.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`
	// Name of the Service.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
}

// SandboxClassStatus is the observed state of a SandboxClass.
type SandboxClassStatus struct {
	// ObservedGeneration is the generation the status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions of the class.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// SandboxClassList is a list of SandboxClasses.
type SandboxClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []SandboxClass `json:"items"`
}

// WorkspaceMode says how claims share workspace directories.
// +kubebuilder:validation:Enum=claim;session
type WorkspaceMode string

const (
	// WorkspaceClaim gives every claim its own directory.
	WorkspaceClaim WorkspaceMode = "claim"
	// WorkspaceSession shares one directory between every claim of one session and handle.
	WorkspaceSession WorkspaceMode = "session"
)

// AllocationMode says when a sandbox is claimed.
// +kubebuilder:validation:Enum=lazy;eager
type AllocationMode string

const (
	// AllocationLazy claims the sandbox on its first tool call.
	AllocationLazy AllocationMode = "lazy"
	// AllocationEager claims the sandbox when the session opens.
	AllocationEager AllocationMode = "eager"
)

// ToolName is the name of one sandboxd tool.
// +kubebuilder:validation:Enum=Read;Write;Edit;Glob;Grep;Bash;BashOutput;KillShell;run_tests;run_lint;run_typecheck;MultiEdit;LS;snapshot_create;snapshot_list;snapshot_restore;snapshot_diff;run_failing_tests;last_test_failures;find_definition;find_references;rename_symbol;change_function_signature;edit_function_body;insert_after_method;tests_covering;run_script;search_code
type ToolName string

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:shortName=tr,categories=airlock
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Sandboxes",type=integer,JSONPath=`.status.sandboxCount`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readySandboxes`
// +kubebuilder:printcolumn:name="Warm-Ready",type=integer,JSONPath=`.status.warmReady`
// +kubebuilder:printcolumn:name="Warm-Wanted",type=integer,JSONPath=`.status.warmWanted`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// ToolRegistry lists the sandboxes a runtime may ask for, by name.
type ToolRegistry struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ToolRegistrySpec `json:"spec"`
	// +optional
	Status ToolRegistryStatus `json:"status,omitempty"`
}

// ToolRegistrySpec is the set of sandboxes of a registry.
type ToolRegistrySpec struct {
	// Sandboxes a runtime may ask for; handles are <name>/<instance>.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Sandboxes []RegistrySandbox `json:"sandboxes,omitempty"`
}

// RegistrySandbox is one sandbox a runtime may ask for.
// +kubebuilder:validation:XValidation:rule="!has(self.warm) || self.warm == 0 || ((!has(self.workspace) || self.workspace != 'session') && (!has(self.mountRole) || size(self.mountRole) == 0))",message="warm members serve fresh workspaces only: warm must be 0 with workspace: session or a mountRole"
// +kubebuilder:validation:XValidation:rule="!has(self.warmPolicy) || ((!has(self.workspace) || self.workspace != 'session') && (!has(self.mountRole) || size(self.mountRole) == 0))",message="warm members serve fresh workspaces only: no warmPolicy with workspace: session or a mountRole"
// +kubebuilder:validation:XValidation:rule="!has(self.warmPolicy) || !has(self.warm) || self.warm == 0",message="warm and warmPolicy are exclusive: warm is a static pool, warmPolicy one that follows demand (warm: N is warmPolicy min N, max N)"
// +kubebuilder:validation:XValidation:rule="!has(self.warmPolicy) || !has(self.maxInstances) || self.warmPolicy.max <= self.maxInstances",message="warmPolicy.max may not exceed maxInstances: more members than live claims can never be adopted at once"
type RegistrySandbox struct {
	// Name is the first part of the sandbox's handles, e.g. "codegen" in "codegen/default".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Class is the SandboxClass that the sandbox's pods are built from.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Class string `json:"class"`

	// MaxInstances caps the live claims of this sandbox across every session and runtime that
	// uses this registry.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	MaxInstances int32 `json:"maxInstances,omitempty"`

	// Workspace is "claim" (each claim its own directory) or "session" (every claim of one
	// session and handle shares one directory).
	// +optional
	// +kubebuilder:default=claim
	Workspace WorkspaceMode `json:"workspace,omitempty"`

	// Allocation is "lazy" (claimed on first tool call) or "eager" (claimed when a session opens).
	// +optional
	// +kubebuilder:default=lazy
	Allocation AllocationMode `json:"allocation,omitempty"`

	// TargetPath is where sync-back copies the workspace inside the content PVC, relative to its
	// root; empty means no sync-back.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._/-]+$`
	// +kubebuilder:validation:XValidation:rule="self.split('/').all(s, s != '' && s != '.' && s != '..')",message="must be a relative path without empty, '.' or '..' segments"
	TargetPath string `json:"targetPath,omitempty"`

	// TargetVersions is how many previous contents of the targetPath a sync-back keeps, next to
	// it in ".<target>.airlock-versions/", newest first: every sync-back that replaces the target
	// moves what it held there and removes the oldest beyond this many (docs/nothing-lost.md,
	// "What a target holds").
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	TargetVersions *int32 `json:"targetVersions,omitempty"`

	// MountRole makes the workspace the directory that the runtime's connection for this role names.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	MountRole string `json:"mountRole,omitempty"`

	// AllowedTools are the tools this sandbox exposes; omitted, it exposes all. Given, it names
	// one tool at least: an empty list is refused rather than read as "all". With Bash allowed
	// this is least privilege, not a boundary: the pod is the boundary.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	AllowedTools []ToolName `json:"allowedTools,omitempty"`

	// Warm is how many sandboxes of this entry the operator keeps Ready, built ahead of any
	// claim, each with a fresh workspace of its own: a static pool, whatever the demand. An
	// acquire that one can serve (a fresh workspace: not workspace "session", no mountRole)
	// adopts it instead of waiting for a pod. Exclusive with warmPolicy.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Warm int32 `json:"warm,omitempty"`

	// WarmPolicy keeps a warm pool that follows demand instead of a static count: as many
	// members as the entry's claims arrive during the time a member takes to become Ready, with
	// headroom, never fewer than min nor more than max (docs/decisions.md, "Warm pools that follow
	// demand"). Exclusive with warm; the same fresh-workspace rule applies.
	// +optional
	WarmPolicy *WarmPolicy `json:"warmPolicy,omitempty"`

	// ResumeWindow is how long after a workspace of this sandbox is kept (a session closed, a
	// claim reaped) a warm member waits Ready on it, its kept directory already mounted: the next
	// claim of the same runtime, session and handle adopts that member with its files, instead of
	// starting a pod (docs/nothing-lost.md, "Resume members"). Only with warm or warmPolicy; at
	// most as many such members as the pool's size bound (warm, or warmPolicy.max), never past
	// the runtime's workspaceRetention. 0 starts none: a resume starts a pod, as without a pool.
	// +optional
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('24h')",message="must be between 0s and 24h"
	ResumeWindow *metav1.Duration `json:"resumeWindow,omitempty"`
}

// WarmPolicy bounds and tunes a warm pool that follows demand. Its size, recomputed on every
// claim of the entry and as the measured rate decays, is
// clamp(ceil(rate × readyTime × (1 + headroomPercent/100)) + 1, min, max), where rate is the
// entry's claims per second (the larger of a one-minute moving average and the last five
// seconds' rate), readyTime the time its members take from creation to Ready (a moving average),
// and the + 1 is there only while claims arrive (none for a while: min).
// +kubebuilder:validation:XValidation:rule="!has(self.min) || self.min <= self.max",message="min may not exceed max"
type WarmPolicy struct {
	// Min is the fewest members kept Ready or starting, with no claims arriving at all.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Min int32 `json:"min,omitempty"`

	// Max is the most members kept, however fast claims arrive. At most maxInstances.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Max int32 `json:"max"`

	// HeadroomPercent is how much the pool keeps beyond what the measured demand needs while a
	// member starts (Little's law: rate × readyTime), for arrivals faster than the average.
	// +optional
	// +kubebuilder:default=50
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	HeadroomPercent *int32 `json:"headroomPercent,omitempty"`
}

// WarmPoolStatus is the state of one sandbox's warm members.
type WarmPoolStatus struct {
	// Name is the registry sandbox's name.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Wanted is the pool's target: the sandbox's warm, or what its warmPolicy computed now.
	Wanted int32 `json:"wanted"`
	// Ready is the number of members Ready and idle, built from the sandbox's current class and
	// entry.
	Ready int32 `json:"ready"`
	// Starting is the number of members created and not Ready yet.
	// +optional
	Starting int32 `json:"starting,omitempty"`
	// Resuming is the number of resume members: warm members waiting, Ready or starting, on a
	// kept workspace of this sandbox for the claim that resumes it (resumeWindow). They are not
	// in Ready, Starting or Wanted.
	// +optional
	Resuming int32 `json:"resuming,omitempty"`
	// Message says why members are missing, when something keeps them from being built.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
	// ArrivalsPerMinute is the rate of the sandbox's claims that could adopt a member (a fresh
	// workspace), per minute, as the warmPolicy measured it (two significant digits): the larger
	// of a one-minute moving average and the last five seconds' rate. Only with a warmPolicy.
	// +optional
	ArrivalsPerMinute *resource.Quantity `json:"arrivalsPerMinute,omitempty"`
	// ReadyMilliseconds is the time a member takes from creation to Ready that the warmPolicy
	// used: a moving average of the members this operator created, or a default before any
	// was measured (Sizing says which). Only with a warmPolicy.
	// +optional
	ReadyMilliseconds int32 `json:"readyMilliseconds,omitempty"`
	// Sizing says how Wanted was computed from the arrival rate and the ready time, and
	// whether members beyond it are kept for a while (scale-down waits). Only with a warmPolicy.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Sizing string `json:"sizing,omitempty"`
	// Key is the pool key (label airlock.dev/warm-pool) of the members the operator creates now:
	// a hash of the registry, the entry and Record.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Key string `json:"key,omitempty"`
	// Record is what the members of Key are built from: the class and the entry frozen as a
	// claim's record is. The operator writes it before it creates a member of Key, and the
	// admission policy airlock-operator-warm-record holds every member it creates to it (image,
	// arguments, runtime class, workspace PVC, ConfigMaps), as a claim's pod is held to its
	// claim's status.frozen (docs/security.md, "Warm members are tied to their pool's record").
	// Its schema is not repeated here: the record's validation rules, once per entry of a list
	// of 64, would exceed the API server's budget for a CRD's rules; only the operator writes a
	// status.
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	Record *FrozenSandbox `json:"record,omitempty"`
}

// RegistrySandboxStatus says whether sandboxes of one registry entry can be built now.
type RegistrySandboxStatus struct {
	// Name is the registry sandbox's name.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Ready is true when the entry's class exists and a sandbox can be built from it (the checks
	// admission makes).
	Ready bool `json:"ready"`
	// Message says why not, when Ready is false.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
}

// ToolRegistryStatus is the observed state of a ToolRegistry.
type ToolRegistryStatus struct {
	// ObservedGeneration is the generation the status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// SandboxCount is the number of sandboxes in the registry.
	// +optional
	SandboxCount int32 `json:"sandboxCount,omitempty"`
	// ReadySandboxes is the number of the registry's sandboxes whose class exists and can be built.
	// +optional
	ReadySandboxes int32 `json:"readySandboxes,omitempty"`
	// Sandboxes says, per registry sandbox, whether it can be built now, and why not.
	// +optional
	// +listType=map
	// +listMapKey=name
	Sandboxes []RegistrySandboxStatus `json:"sandboxes,omitempty"`
	// WarmReady is the number of warm members Ready and idle, across the registry's sandboxes.
	// +optional
	WarmReady int32 `json:"warmReady,omitempty"`
	// WarmWanted is the sum of the pools' targets (their status.warm[].wanted).
	// +optional
	WarmWanted int32 `json:"warmWanted,omitempty"`
	// Warm is, per sandbox with warm members wanted (warm or warmPolicy), how many are Ready
	// and idle, the pool's target and, with a warmPolicy, what it was computed from.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Warm []WarmPoolStatus `json:"warm,omitempty"`
	// Conditions of the registry.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ToolRegistryList is a list of ToolRegistries.
type ToolRegistryList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []ToolRegistry `json:"items"`
}

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:shortName=ar,categories=airlock
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Service-Account",type=string,JSONPath=`.spec.serviceAccountName`
// +kubebuilder:printcolumn:name="Registry",type=string,JSONPath=`.spec.toolRegistryRef.name`
// +kubebuilder:printcolumn:name="Enabled",type=boolean,JSONPath=`.spec.sandbox.enabled`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Bound",type=integer,JSONPath=`.status.claims.bound`
// +kubebuilder:printcolumn:name="Queued",type=integer,JSONPath=`.status.claims.queued`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// AgentRuntime is the policy and identity of one agent runtime. airlock does not run the runtime;
// the runtime's pod runs as spec.serviceAccountName and calls the Sandbox API with its token.
type AgentRuntime struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec AgentRuntimeSpec `json:"spec"`
	// +optional
	Status AgentRuntimeStatus `json:"status,omitempty"`
}

// AgentRuntimeSpec is the policy of a runtime.
type AgentRuntimeSpec struct {
	// ServiceAccountName is the only identity allowed to acquire this runtime's sandboxes.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ServiceAccountName string `json:"serviceAccountName"`

	// ToolRegistryRef names the ToolRegistry, in the runtime's namespace, of the sandboxes it may use.
	// +required
	ToolRegistryRef LocalObjectReference `json:"toolRegistryRef"`

	// Sandbox is the runtime's sandbox policy.
	// +optional
	// +kubebuilder:default={}
	Sandbox SandboxPolicy `json:"sandbox,omitempty"`
}

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	// Name of the object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// SandboxPolicy limits the sandboxes of one runtime.
type SandboxPolicy struct {
	// Enabled says whether this runtime may hold any sandbox.
	// +optional
	// +kubebuilder:default=false
	Enabled bool `json:"enabled"`

	// MaxConcurrent caps the runtime's claims that are Binding or Bound at once; more are Queued.
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	MaxConcurrent int32 `json:"maxConcurrent,omitempty"`

	// MaxPerSession caps the live claims (handles) of one session; one more is Refused.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	MaxPerSession int32 `json:"maxPerSession,omitempty"`

	// IdleTimeout is how long a Bound claim may go unused before it is reaped.
	// +optional
	// +kubebuilder:default="30m"
	IdleTimeout *metav1.Duration `json:"idleTimeout,omitempty"`

	// WorkspaceRetention is how long the workspace of a reaped or closed claim is kept, after its
	// sync-back, for a new claim of this runtime (the same UID), session and handle to resume with
	// its files; past it the workspace is removed. 0 removes it as soon as the claim is gone. A
	// mount role's directory is never removed (docs/nothing-lost.md).
	// +optional
	// +kubebuilder:default="24h"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="must not be negative"
	WorkspaceRetention *metav1.Duration `json:"workspaceRetention,omitempty"`

	// Connections bind content directories (relative paths in the content PVC) to mount roles.
	// +optional
	// +listType=map
	// +listMapKey=role
	// +kubebuilder:validation:MaxItems=32
	Connections []Connection `json:"connections,omitempty"`
}

// Connection binds a content directory to a mount role.
type Connection struct {
	// Role is the mount role a registry sandbox names in mountRole.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Role string `json:"role"`
	// Path is the directory, relative to the content PVC's root.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._/-]+$`
	// +kubebuilder:validation:XValidation:rule="self.split('/').all(s, s != '' && s != '.' && s != '..')",message="must be a relative path without empty, '.' or '..' segments"
	Path string `json:"path"`
}

// AgentRuntimeStatus is the observed state of a runtime.
type AgentRuntimeStatus struct {
	// ObservedGeneration is the generation the status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions of the runtime; Ready means its registry and classes resolve.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Claims counts the runtime's claims by phase.
	// +optional
	Claims ClaimCounts `json:"claims,omitempty"`
	// HeldWorkspaces are the runtime's kept workspaces whose sync-back gave up: never collected
	// until a person retries or releases them (the annotation airlock.dev/held-action on the
	// record Job; docs/nothing-lost.md, "A sync-back that gave up"), oldest first, at most 32.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	HeldWorkspaces []HeldWorkspace `json:"heldWorkspaces,omitempty"`
	// HeldWorkspaceCount counts them all (HeldWorkspaces lists at most 32).
	// +optional
	HeldWorkspaceCount int32 `json:"heldWorkspaceCount,omitempty"`
	// Usage is what the runtime's sessions used, summed (docs/record.md §3): written by the
	// leader at most once a minute, carried across a leader's change.
	// +optional
	Usage *RuntimeUsage `json:"usage,omitempty"`
}

// RuntimeUsage sums the usage of a runtime's sessions since the runtime was created.
type RuntimeUsage struct {
	// CPUMillis is CPU time, in milliseconds (CPU-seconds × 1000), from the sandboxes' cgroups.
	// +optional
	// +kubebuilder:validation:Minimum=0
	CPUMillis int64 `json:"cpuMillis,omitempty"`
	// MemoryMiBSeconds is memory in use integrated over time, in MiB-seconds (GiB-seconds × 1024).
	// +optional
	// +kubebuilder:validation:Minimum=0
	MemoryMiBSeconds int64 `json:"memoryMiBSeconds,omitempty"`
	// WorkspaceBytes sums the size of each session's workspace at its sandbox's last stop.
	// +optional
	// +kubebuilder:validation:Minimum=0
	WorkspaceBytes int64 `json:"workspaceBytes,omitempty"`
	// EgressBytes counts bytes through the egress gateway, both ways.
	// +optional
	// +kubebuilder:validation:Minimum=0
	EgressBytes int64 `json:"egressBytes,omitempty"`
	// ToolCalls counts tool calls.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ToolCalls int64 `json:"toolCalls,omitempty"`
	// Sessions counts the claims whose usage is summed here.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Sessions int64 `json:"sessions,omitempty"`
	// UpdateTime is when the leader last wrote these figures.
	// +optional
	UpdateTime *metav1.Time `json:"updateTime,omitempty"`
}

// HeldWorkspace is a kept workspace whose sync-back gave up.
type HeldWorkspace struct {
	// Record is the name of its record Job (annotate it to retry or release).
	// +required
	// +kubebuilder:validation:MaxLength=63
	Record string `json:"record"`
	// WorkspaceDir is the workspace inside the content PVC.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	WorkspaceDir string `json:"workspaceDir"`
	// Claim is the claim whose sync-back gave up.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Claim string `json:"claim,omitempty"`
	// TargetPath is where its sync-back copies it.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	TargetPath string `json:"targetPath,omitempty"`
	// Message is why it is held: the last failure, or the last retry's.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
	// Since is when it was held.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
}

// ClaimCounts counts claims by phase.
type ClaimCounts struct {
	// +optional
	Pending int32 `json:"pending,omitempty"`
	// +optional
	Queued int32 `json:"queued,omitempty"`
	// +optional
	Binding int32 `json:"binding,omitempty"`
	// +optional
	Bound int32 `json:"bound,omitempty"`
	// +optional
	Reaping int32 `json:"reaping,omitempty"`
	// +optional
	Refused int32 `json:"refused,omitempty"`
	// +optional
	Failed int32 `json:"failed,omitempty"`
	// Stuck counts the runtime's claims that wait on something that may not end by itself
	// (docs/nothing-lost.md, "Stuck waits are counted"); a claim may count in more than one.
	// +optional
	Stuck StuckCounts `json:"stuck,omitempty"`
}

// StuckCounts counts claims by what holds them up.
type StuckCounts struct {
	// PodLost counts claims whose PodLost condition is True: a pod on a Node that is not Ready,
	// is unreachable or gone, or a pod stuck terminating (or a predecessor's such pod).
	// +optional
	PodLost int32 `json:"podLost,omitempty"`
	// SyncBackFailing counts Reaping claims whose last sync-back (or cleanup) attempt failed and
	// that retry it, and Failed claims whose sync-back gave up (SyncBackFailed).
	// +optional
	SyncBackFailing int32 `json:"syncBackFailing,omitempty"`
	// JobNotStarted counts Reaping claims whose sync-back Job's pod has not started within the
	// sync start timeout (the last failure was SyncJobNotStarted).
	// +optional
	JobNotStarted int32 `json:"jobNotStarted,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// AgentRuntimeList is a list of AgentRuntimes.
type AgentRuntimeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []AgentRuntime `json:"items"`
}

// ClaimPhase is where a claim is in its lifecycle (SPEC section 3).
// +kubebuilder:validation:Enum=Pending;Queued;Binding;Bound;Reaping;Refused;Failed
type ClaimPhase string

const (
	// ClaimPending is created, not yet decided.
	ClaimPending ClaimPhase = "Pending"
	// ClaimQueued waits for a slot under the runtime's maxConcurrent.
	ClaimQueued ClaimPhase = "Queued"
	// ClaimBinding has its children built; its pod is not ready yet.
	ClaimBinding ClaimPhase = "Binding"
	// ClaimBound has a ready pod and addresses.
	ClaimBound ClaimPhase = "Bound"
	// ClaimReaping is being scaled down, synced back and deleted.
	ClaimReaping ClaimPhase = "Reaping"
	// ClaimRefused would have exceeded a limit; it is deleted shortly.
	ClaimRefused ClaimPhase = "Refused"
	// ClaimFailed could not start.
	ClaimFailed ClaimPhase = "Failed"
)

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:shortName=sbx,categories=airlock
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Runtime",type=string,JSONPath=`.spec.runtimeName`
// +kubebuilder:printcolumn:name="Handle",type=string,JSONPath=`.spec.handle`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`
// +kubebuilder:printcolumn:name="Warm",type=string,JSONPath=`.status.warm.member`
// +kubebuilder:printcolumn:name="Last-Used",type=date,JSONPath=`.status.lastUsedAt`
// +kubebuilder:printcolumn:name="Resumed",type=date,JSONPath=`.status.resumedWorkspace.keptAt`
// +kubebuilder:printcolumn:name="Isolation",type=string,JSONPath=`.status.isolation.kernel`
// +kubebuilder:printcolumn:name="Session",type=string,JSONPath=`.spec.session`,priority=1
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.spec.className`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// SandboxClaim is one sandbox for one session. Only the operator writes claims.
type SandboxClaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec SandboxClaimSpec `json:"spec"`
	// +optional
	Status SandboxClaimStatus `json:"status,omitempty"`
}

// SandboxClaimSpec is what was claimed. It cannot change after creation.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable"
type SandboxClaimSpec struct {
	// RuntimeName is the AgentRuntime, in the claim's namespace, that the claim is for.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	RuntimeName string `json:"runtimeName"`

	// RuntimeUID is the metadata.uid of that AgentRuntime: the claim is that runtime's, and
	// never another's of the same name (one deleted and created again is someone else). Set by
	// the Sandbox API; a claim written before it existed is the runtime's its controller
	// ownerReference names.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=128
	RuntimeUID types.UID `json:"runtimeUID,omitempty"`

	// Session is the runtime's session id.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[\x21-\x7e]+$`
	Session string `json:"session"`

	// Handle is <sandbox>/<instance>, e.g. "codegen/default".
	// +required
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=127
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Handle string `json:"handle"`

	// Sandbox is the ToolRegistry entry the handle names.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Sandbox string `json:"sandbox"`

	// ClassName is the SandboxClass the claim was built from.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ClassName string `json:"className"`

	// TargetPath is where sync-back copies the workspace; empty means no sync-back.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._/-]+$`
	// +kubebuilder:validation:XValidation:rule="self.split('/').all(s, s != '' && s != '.' && s != '..')",message="must be a relative path without empty, '.' or '..' segments"
	TargetPath string `json:"targetPath,omitempty"`

	// WorkspaceDir is the claim's directory inside the content PVC.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._/-]+$`
	// +kubebuilder:validation:XValidation:rule="self.split('/').all(s, s != '' && s != '.' && s != '..')",message="must be a relative path without empty, '.' or '..' segments"
	WorkspaceDir string `json:"workspaceDir"`

	// MountRole is the registry sandbox's mount role, if it has one.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	MountRole string `json:"mountRole,omitempty"`

	// Replaces is the name of the Failed claim this claim replaces.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Replaces string `json:"replaces,omitempty"`
}

// SandboxClaimStatus is the observed state of a claim.
type SandboxClaimStatus struct {
	// Phase is where the claim is in its lifecycle.
	// +optional
	Phase ClaimPhase `json:"phase,omitempty"`
	// Reason is a CamelCase word for the phase, e.g. MaxPerSession or ImagePullBackOff. While
	// the claim is Binding it is the Ready condition's reason: why it waits (Binding,
	// WaitingForPredecessorPod, WaitingForWorkspaceCollection, a lost pod's Node reason).
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Reason string `json:"reason,omitempty"`
	// Message is a human-readable explanation.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Message string `json:"message,omitempty"`
	// Conditions of the claim.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// QueuedAt is when the claim was first Queued.
	// +optional
	QueuedAt *metav1.Time `json:"queuedAt,omitempty"`
	// BoundAt is when the claim became Bound.
	// +optional
	BoundAt *metav1.Time `json:"boundAt,omitempty"`
	// LastUsedAt is the last renewal that the operator wrote.
	// +optional
	LastUsedAt *metav1.Time `json:"lastUsedAt,omitempty"`
	// Addresses are the sandbox's addresses, one per class port.
	// +optional
	// +listType=map
	// +listMapKey=name
	Addresses []ClaimAddress `json:"addresses,omitempty"`
	// ReplacedBy is the name of the claim that replaced this Failed one.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ReplacedBy string `json:"replacedBy,omitempty"`
	// ObservedGeneration is the generation the status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Frozen is what the claim runs, recorded by the operator when it admitted the claim
	// (Binding): its class and registry entry as they were then, defaults spelled out. The
	// claim's children are built and repaired from it only, so later edits of the class or the
	// registry (or their deletion) never reach a running sandbox; a replacement gets its own.
	// +optional
	Frozen *FrozenSandbox `json:"frozen,omitempty"`
	// Warm is set when the claim adopted a warm member of its sandbox instead of getting a pod
	// of its own: the member's pod runs the claim, on the member's workspace.
	// +optional
	Warm *WarmAdoption `json:"warm,omitempty"`
	// ResumedWorkspace is set when the claim resumed the workspace an earlier claim of the same
	// runtime, session and handle left (kept after its sync-back for the runtime's
	// workspaceRetention): the claim's sandbox starts with its files.
	// +optional
	ResumedWorkspace *ResumedWorkspace `json:"resumedWorkspace,omitempty"`

	// Isolation is what the operator read of the sandbox's boundary before it wrote Bound: the
	// verdict on its kernel and the signed statement a runtime verifies (docs/isolation.md).
	// +optional
	Isolation *ClaimIsolation `json:"isolation,omitempty"`
	// WorkspaceDir is set when the claim works in another directory than spec.workspaceDir: the
	// kept workspace of a warm member that an earlier claim of the same runtime, session and
	// handle adopted, which this claim resumes (written before the claim takes its record;
	// docs/nothing-lost.md). Its pod, sync-back and keeping use it.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._/-]+$`
	WorkspaceDir string `json:"workspaceDir,omitempty"`
}

// ResumedWorkspace is the kept workspace a claim resumed.
type ResumedWorkspace struct {
	// KeptAt is when the earlier claim's workspace was kept (its claim was done with it).
	// +required
	KeptAt metav1.Time `json:"keptAt"`
	// KeptBy is the name of the claim that left it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	KeptBy string `json:"keptBy,omitempty"`
}

// WarmAdoption is the warm member a claim adopted.
type WarmAdoption struct {
	// Member is the member's name: its pod's, and the name its bearer token is derived under.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Member string `json:"member"`
	// WorkspaceDir is the member's workspace inside the content PVC: sync-back and removal use it
	// instead of spec.workspaceDir.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._/-]+$`
	WorkspaceDir string `json:"workspaceDir"`
	// AdoptedAt is when the claim adopted the member.
	// +required
	AdoptedAt metav1.Time `json:"adoptedAt"`
}

// FrozenSandbox is what a claim runs, as its class and registry entry said when it was
// admitted. Every field is explicit: a default of the class or the entry is written out (the
// full tool list when the entry allows every tool), so nothing here is read as "everything".
type FrozenSandbox struct {
	// ClassGeneration is the metadata.generation of the SandboxClass it was taken from.
	// +required
	ClassGeneration int64 `json:"classGeneration"`

	// Image is the container image of the sandbox.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Image string `json:"image"`

	// Args are the class's container arguments (the per-claim switches of sandboxd are added
	// when the pod is built).
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Args []string `json:"args"`

	// Ports are the container ports; the claim has one address per port, at its pod's IP.
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Ports []SandboxPort `json:"ports"`

	// Env is the container's environment.
	// +optional
	// +listType=map
	// +listMapKey=name
	Env []corev1.EnvVar `json:"env,omitempty"`

	// Resources are the container's compute resources.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// RuntimeClassName selects the pod's RuntimeClass.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	RuntimeClassName *string `json:"runtimeClassName,omitempty"`

	// Isolation is the class's isolation need, as admission froze it.
	// +optional
	Isolation *SandboxIsolation `json:"isolation,omitempty"`

	// Volumes are the pod's workspace and scratch volumes.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Volumes []SandboxVolume `json:"volumes,omitempty"`

	// WorkspaceClaimName is the content PVC the workspace volume and sync-back mount.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	WorkspaceClaimName string `json:"workspaceClaimName"`

	// AllowedTools are the tools sandboxd lists and accepts, always explicit: every tool when
	// the registry entry allowed all. Never empty.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	AllowedTools []ToolName `json:"allowedTools"`

	// AllowedServices are the in-cluster Services the sandbox may reach; empty reaches nothing.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	AllowedServices []ServiceReference `json:"allowedServices,omitempty"`

	// Egress is the class's egress and its gateway; absent, the sandbox reaches nothing outside.
	// +optional
	Egress *FrozenEgress `json:"egress,omitempty"`

	// StartupTimeout is how long the claim may take to become Bound before it is Failed.
	// +required
	StartupTimeout metav1.Duration `json:"startupTimeout"`

	// WorkspacePath is the directory sandboxd serves, the workspace volume's mountPath
	// (/workspace without one): the operator passes it as --workspace, with the claim's tools
	// and token, right after the subcommand, so that no arg of the class can change their
	// meaning. Empty in a record frozen before airlock decided it (such a record's args carry
	// --workspace, and the operator's flags follow them, as when it was frozen).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	WorkspacePath string `json:"workspacePath,omitempty"`

	// SyncImage is the image the claim's workspace Jobs run (`airlock sync`: the sync-back, the
	// kept workspace's record and its collection): the operator's --sync-image at admission, so
	// that the admission policy can hold those Jobs to the record, and an operator upgraded
	// under a running claim does not change what its sync-back runs. Empty in a record frozen
	// before airlock froze it (its Jobs run the operator's --sync-image of the moment). Not part
	// of a warm pool's key: members run no Job.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	SyncImage string `json:"syncImage,omitempty"`
}

// ClaimAddress is one reachable address of a sandbox.
type ClaimAddress struct {
	// Name is the class port's name.
	// +required
	Name string `json:"name"`
	// URL is the address, e.g. http://10.244.0.17:8080: the sandbox pod's IP and the port.
	// +required
	URL string `json:"url"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// SandboxClaimList is a list of SandboxClaims.
type SandboxClaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []SandboxClaim `json:"items"`
}

// ClaimIsolation is the boundary a claim's sandbox showed before it was Bound.
type ClaimIsolation struct {
	// Kernel is Dedicated (the sandbox's kernel is not the node's) or Shared.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	Kernel string `json:"kernel,omitempty"`
	// Runtime is what sandboxd saw it ran under: gVisor, or kernel (the node's or a VM's).
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Runtime string `json:"runtime,omitempty"`
	// KernelRelease is the kernel release the sandbox saw.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	KernelRelease string `json:"kernelRelease,omitempty"`
	// EvidenceDigest is the sha256 of the evidence sandboxd served, which its MCP server
	// metadata carries too.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	EvidenceDigest string `json:"evidenceDigest,omitempty"`
	// Attestation is the operator's signed statement (pkg/attestation), which the acquire
	// answer carries.
	// +optional
	Attestation *IsolationAttestation `json:"attestation,omitempty"`
}

// IsolationAttestation is a signed isolation statement: the statement's bytes (base64), the
// Ed25519 signature over them (base64) and the signing key's ID.
type IsolationAttestation struct {
	// +kubebuilder:validation:MaxLength=16384
	Statement string `json:"statement"`
	// +kubebuilder:validation:MaxLength=128
	Signature string `json:"signature"`
	// +kubebuilder:validation:MaxLength=64
	KeyID string `json:"keyID"`
}
