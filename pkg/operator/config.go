// Package operator is the composition root of `airlock operator`: it turns a Config into running
// informers, HTTP servers, leader election and controllers, and owns their shutdown order.
package operator

import (
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-dev/airlock/pkg/recordtrace"
	"github.com/airlock-dev/airlock/pkg/tracing"

	"time"

	"k8s.io/client-go/kubernetes"
	componentbaseconfig "k8s.io/component-base/config"

	"github.com/airlock-dev/airlock/pkg/controller/egressca"
	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
)

// ComponentName names the operator in events, field managers, user agents and the lease.
const ComponentName = "airlock-operator"

// SandboxAPIServiceName is the Service of the Sandbox API that the manifests install in the
// operator's namespace; the default serving certificate is for its names.
const SandboxAPIServiceName = "airlock-sandbox-api"

// TLSMode is how the Sandbox API gets its serving certificate (--tls-mode).
type TLSMode string

const (
	// TLSModeSelfSigned: the operator keeps its own CA and serving certificate (pkg/servingcert)
	// and publishes the CA bundle (pkg/controller/cabundle).
	TLSModeSelfSigned TLSMode = "self-signed"
	// TLSModeFiles: a certificate and key from files, re-read when they change.
	TLSModeFiles TLSMode = "files"
	// TLSModeNone: plain HTTP.
	TLSModeNone TLSMode = "none"
)

// DisabledBindAddress turns off the server of a bind address that may be disabled (metrics).
const DisabledBindAddress = "0"

// Config is everything Run needs: the validated flags, with the clients already built.
type Config struct {
	// KubeClient talks to the core APIs; its rate limit is the --kube-api-qps/--kube-api-burst pair.
	KubeClient kubernetes.Interface
	// AirlockClient talks to the airlock.dev APIs.
	AirlockClient airlockclientset.Interface
	// ReviewClient makes the Sandbox API's TokenReviews, with a rate limiter of its own (the same
	// QPS and burst as KubeClient's): a burst of children writes by the leader never makes an
	// acquire wait for its authentication (make bench saw 503s for that). Nil: KubeClient.
	ReviewClient kubernetes.Interface
	// EventClient records events, with a rate limiter of its own (the same QPS and burst as
	// KubeClient's): a burst of events never queues the controllers' writes, nor the other way
	// round. Nil: KubeClient.
	EventClient kubernetes.Interface
	// LeaderElectionClient renews the lease. It has a rate limiter of its own, so that a busy
	// controller cannot starve the renewals.
	LeaderElectionClient kubernetes.Interface

	// LeaderElection is the --leader-elect* flags.
	LeaderElection componentbaseconfig.LeaderElectionConfiguration
	// Identity is this replica's name as a lease holder: hostname + "_" + a UUID.
	Identity string
	// Namespace is the operator's own namespace ($POD_NAMESPACE, else airlock-system): the claim
	// token key Secret lives there.
	Namespace string

	// APIBindAddress is where the Sandbox API listens (host:port).
	APIBindAddress string
	// TLSMode is how the Sandbox API gets its certificate.
	TLSMode TLSMode
	// TLSCertFile and TLSKeyFile are the certificate of TLSModeFiles; TLSCAFile, optional, the
	// CA bundle published for runtimes in that mode.
	TLSCertFile, TLSKeyFile, TLSCAFile string
	// TLSSANs are the names of the serving certificate of TLSModeSelfSigned.
	TLSSANs []string
	// MetricsBindAddress is where /metrics listens (host:port), or DisabledBindAddress.
	MetricsBindAddress string
	// Profiling serves net/http/pprof's /debug/pprof/ on the metrics address too.
	Profiling bool
	// HealthProbeBindAddress is where /healthz and /readyz listen (host:port).
	HealthProbeBindAddress string
	// ShutdownTimeout bounds the wait for in-flight HTTP requests on shutdown.
	ShutdownTimeout time.Duration
	// APIServerTimeout bounds the wait at start for the Kubernetes API server to answer and to
	// serve the airlock.dev API.
	APIServerTimeout time.Duration

	// Workers is the number of workers each controller runs.
	Workers int
	// TokenAudiences are the audiences the Sandbox API asks TokenReview for (--token-audiences,
	// default "airlock"); empty means the API server's own.
	TokenAudiences []string
	// SyncImage is the image of sync-back Jobs.
	SyncImage string
	// PoolKubeClient and PoolAirlockClient are the warm pool controller's (nil: KubeClient and
	// AirlockClient); WarmRefillRate bounds its member creations per second (0: the default).
	PoolKubeClient    kubernetes.Interface
	PoolAirlockClient airlockclientset.Interface
	WarmRefillRate    float64
	// RecordAirlockClient is the session record controller's (nil: AirlockClient): its writes of
	// SessionRecords have a rate limiter of their own.
	RecordAirlockClient airlockclientset.Interface
	// EgressGateway is the egress gateway claims of classes with egress are frozen with
	// (--egress-gateway-service); nil: such claims fail (docs/egress.md).
	EgressGateway *sandboxpod.GatewayRef
	// OperatorPeer, when set (--operator-pod-labels), is the operator's own pods: sandboxes'
	// NetworkPolicies let them reach sandboxd, and Reaping claims' pods are stopped through
	// sandboxd and deleted at once (pkg/sandboxstop).
	OperatorPeer *sandboxpod.OperatorPeer
	// ReadIsolationEvidence, with OperatorPeer, reads each sandbox's isolation evidence before
	// Bound (--read-isolation-evidence).
	ReadIsolationEvidence bool
	// EgressCA, when set (--manage-egress-ca), is what the leader keeps: the gateway's terminating
	// CA in the operator's namespace (the egress CA controller) and the bundle ConfigMaps (the CA
	// bundle distributor).
	EgressCA *egressca.Config
	// Tracing is where the operator's spans go (--tracing-*): the Sandbox API's acquire spans,
	// and the spans of collected record entries (pkg/recordtrace.New(ctx, Tracing)). Off by
	// default.
	Tracing tracing.Config
	// TracerProvider is the provider of Tracing, built by the command (nil: no spans); the
	// Sandbox API's acquire spans go through it.
	TracerProvider trace.TracerProvider
	// RecordSpans exports the spans of collected record entries (tool calls, their files and
	// processes), built by the command from Tracing (nil: none); the leader's record controller
	// feeds it every entry it appends.
	RecordSpans *recordtrace.Exporter
}
