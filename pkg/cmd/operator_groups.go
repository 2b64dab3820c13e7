//go:build !sandboxd_only

package cmd

// The operator's option groups (operator.go): each with its flags and their validation.

import (
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	componentbaseconfig "k8s.io/component-base/config"
	componentbaseoptions "k8s.io/component-base/config/options"

	"github.com/airlock-dev/airlock/pkg/controller/egressca"
	"github.com/airlock-dev/airlock/pkg/operator"
	"github.com/airlock-dev/airlock/pkg/sandboxpod"
	"github.com/airlock-dev/airlock/pkg/servingcert"
)

// KubeClientOptions are how the operator reaches the Kubernetes API server.
type KubeClientOptions struct {
	Kubeconfig string
	QPS        float32
	Burst      int
}

func (o *KubeClientOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig file. Empty: the in-cluster configuration of the pod's ServiceAccount.")
	fs.Float32Var(&o.QPS, "kube-api-qps", o.QPS, "Queries per second to the Kubernetes API server, sustained (> 0).")
	fs.IntVar(&o.Burst, "kube-api-burst", o.Burst, "Queries to the Kubernetes API server in a burst (>= 1).")
}

func (o *KubeClientOptions) Validate() []error {
	var errs []error
	if o.Kubeconfig != "" {
		if err := checkRegularFile(o.Kubeconfig); err != nil {
			errs = append(errs, invalidFlag("kubeconfig", "%v", err))
		}
	}
	if o.QPS <= 0 {
		errs = append(errs, invalidFlag("kube-api-qps", "must be greater than 0"))
	}
	if o.Burst < 1 {
		errs = append(errs, invalidFlag("kube-api-burst", "must be at least 1"))
	}
	return errs
}

// restConfig loads --kubeconfig, or the in-cluster configuration without it.
func (o *KubeClientOptions) restConfig() (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if o.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("loading --kubeconfig=%s: %w", o.Kubeconfig, err)
		}
	} else {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig given and not in a cluster: %w", err)
		}
	}
	cfg.QPS = o.QPS
	cfg.Burst = o.Burst
	return cfg, nil
}

// LeaderElectionOptions are the component-base --leader-elect* flags.
type LeaderElectionOptions struct {
	componentbaseconfig.LeaderElectionConfiguration
}

func (o *LeaderElectionOptions) AddFlags(fs *pflag.FlagSet) {
	componentbaseoptions.BindLeaderElectionFlags(&o.LeaderElectionConfiguration, fs)
	fs.Lookup("leader-elect").Usage += " With it off, every replica runs the controllers: run a single replica."
	fs.Lookup("leader-elect-resource-namespace").Usage += " Defaults to $" + podNamespaceEnv + " when it is set, else " + defaultLeaseNamespace + "."
}

// Validate checks the lease flags when leader election is on (they are unused otherwise),
// including client-go's LeaseDuration > RenewDeadline > 1.2 × RetryPeriod.
func (o *LeaderElectionOptions) Validate() []error {
	c := o.LeaderElectionConfiguration
	if !c.LeaderElect {
		return nil
	}
	var errs []error
	lease, renew, retry := c.LeaseDuration.Duration, c.RenewDeadline.Duration, c.RetryPeriod.Duration
	if lease <= 0 {
		errs = append(errs, invalidFlag("leader-elect-lease-duration", "must be greater than zero"))
	}
	if renew <= 0 {
		errs = append(errs, invalidFlag("leader-elect-renew-deadline", "must be greater than zero"))
	}
	if retry <= 0 {
		errs = append(errs, invalidFlag("leader-elect-retry-period", "must be greater than zero"))
	}
	if lease > 0 && renew > 0 && lease <= renew {
		errs = append(errs, invalidFlag("leader-elect-renew-deadline", "must be less than --leader-elect-lease-duration (%v), got %v", lease, renew))
	}
	// The same arithmetic as client-go's NewLeaderElector.
	if renew > 0 && retry > 0 && renew <= time.Duration(1.2*float64(retry)) {
		errs = append(errs, invalidFlag("leader-elect-retry-period", "1.2 times it (%v) must be less than --leader-elect-renew-deadline (%v)", time.Duration(1.2*float64(retry)), renew))
	}
	if c.ResourceLock != "leases" {
		errs = append(errs, invalidFlag("leader-elect-resource-lock", `must be "leases", the only lock airlock supports`))
	}
	if msgs := validation.IsDNS1123Subdomain(c.ResourceName); len(msgs) > 0 {
		errs = append(errs, invalidFlag("leader-elect-resource-name", "%s", strings.Join(msgs, "; ")))
	}
	if msgs := validation.IsDNS1123Label(c.ResourceNamespace); len(msgs) > 0 {
		errs = append(errs, invalidFlag("leader-elect-resource-namespace", "%s", strings.Join(msgs, "; ")))
	}
	return errs
}

// The values of --tls-mode.
const (
	TLSModeSelfSigned = string(operator.TLSModeSelfSigned)
	TLSModeFiles      = string(operator.TLSModeFiles)
	TLSModeNone       = string(operator.TLSModeNone)
)

// defaultTLSSANs are the names of the Sandbox API Service the manifests install, in the
// operator's namespace.
func defaultTLSSANs(namespace string) []string {
	svc := operator.SandboxAPIServiceName + "." + namespace
	return []string{svc + ".svc", svc + ".svc.cluster.local", svc}
}

// SandboxAPIOptions are the Sandbox API's listener, TLS and authentication.
type SandboxAPIOptions struct {
	BindAddress    string
	TLSMode        string
	TLSCertFile    string
	TLSKeyFile     string
	TLSCAFile      string
	TLSSANs        []string
	TokenAudiences []string
}

func (o *SandboxAPIOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.BindAddress, "api-bind-address", o.BindAddress, "Address (host:port) the Sandbox API listens on.")
	fs.StringVar(&o.TLSMode, "tls-mode", o.TLSMode, `How the Sandbox API gets its serving certificate. "self-signed": the operator keeps its own CA and certificate in the Secret `+servingcert.SecretName+` of its namespace, renews them, and publishes the CA bundle in a ConfigMap airlock-ca in every namespace with an AgentRuntime. "files": --tls-cert-file and --tls-key-file (e.g. from cert-manager), re-read when they change. "none": plain HTTP, for a network you trust (runtimes' tokens cross it in clear).`)
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "With --tls-mode=files: PEM certificate (chain) of the Sandbox API.")
	fs.StringVar(&o.TLSKeyFile, "tls-key-file", o.TLSKeyFile, "With --tls-mode=files: PEM private key matching --tls-cert-file.")
	fs.StringVar(&o.TLSCAFile, "tls-ca-file", o.TLSCAFile, "With --tls-mode=files, optional: PEM CA bundle that verifies the certificate (cert-manager's ca.crt); the operator publishes it in the ConfigMap airlock-ca of every namespace with an AgentRuntime.")
	fs.StringSliceVar(&o.TLSSANs, "tls-sans", o.TLSSANs, "With --tls-mode=self-signed: DNS names and IP addresses of the serving certificate (comma list). Defaults to the Sandbox API Service's names in the operator's namespace. Give every replica the same: a certificate that already covers a replica's names is kept.")
	fs.StringSliceVar(&o.TokenAudiences, "token-audiences", o.TokenAudiences, "Audiences a runtime's ServiceAccount token must carry (comma list): runtimes mount a projected ServiceAccount token with one of them. Tokens for the Kubernetes API server's audience are refused unless its audience is listed here.")
}

func (o *SandboxAPIOptions) Validate() []error {
	var errs []error
	if err := validateBindAddress(o.BindAddress, false); err != nil {
		errs = append(errs, invalidFlag("api-bind-address", "%v", err))
	}
	switch o.TLSMode {
	case TLSModeFiles:
		if o.TLSCertFile == "" {
			errs = append(errs, invalidFlag("tls-cert-file", "must be set with --tls-mode=files"))
		} else if err := checkReadableFile(o.TLSCertFile); err != nil {
			errs = append(errs, invalidFlag("tls-cert-file", "%v", err))
		}
		if o.TLSKeyFile == "" {
			errs = append(errs, invalidFlag("tls-key-file", "must be set with --tls-mode=files"))
		} else if err := checkReadableFile(o.TLSKeyFile); err != nil {
			errs = append(errs, invalidFlag("tls-key-file", "%v", err))
		}
		if o.TLSCAFile != "" {
			if err := checkReadableFile(o.TLSCAFile); err != nil {
				errs = append(errs, invalidFlag("tls-ca-file", "%v", err))
			}
		}
	case TLSModeSelfSigned, TLSModeNone:
		for flag, v := range map[string]string{"tls-cert-file": o.TLSCertFile, "tls-key-file": o.TLSKeyFile, "tls-ca-file": o.TLSCAFile} {
			if v != "" {
				errs = append(errs, invalidFlag(flag, "is used only with --tls-mode=files, not --tls-mode=%s", o.TLSMode))
			}
		}
	default:
		errs = append(errs, invalidFlag("tls-mode", "must be %s, %s or %s, got %q", TLSModeSelfSigned, TLSModeFiles, TLSModeNone, o.TLSMode))
	}
	if o.TLSMode == TLSModeSelfSigned {
		if len(o.TLSSANs) == 0 {
			errs = append(errs, invalidFlag("tls-sans", "must name at least one DNS name or IP address with --tls-mode=self-signed"))
		}
		for _, name := range o.TLSSANs {
			if net.ParseIP(name) == nil && len(validation.IsDNS1123Subdomain(name)) > 0 {
				errs = append(errs, invalidFlag("tls-sans", "%q is neither a DNS name (lower case, like airlock-sandbox-api.airlock-system.svc) nor an IP address", name))
				break
			}
		}
	}
	for _, a := range o.TokenAudiences {
		if strings.TrimSpace(a) == "" || strings.ContainsAny(a, " \t\n") {
			errs = append(errs, invalidFlag("token-audiences", "audiences must be non-empty and contain no spaces, got %q", o.TokenAudiences))
			break
		}
	}
	return errs
}

// ServingOptions are the listeners of the health probes and the metrics.
type ServingOptions struct {
	MetricsBindAddress     string
	HealthProbeBindAddress string
	Profiling              bool
}

func (o *ServingOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, `Address (host:port) /metrics listens on; "0" serves no metrics (not on the Sandbox API's address either).`)
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress, "Address (host:port) /healthz and /readyz listen on.")
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "Serve Go's profiles (net/http/pprof, /debug/pprof/) on the metrics address too. Off by default: they are unauthenticated; open the metrics port to nobody else while they are on.")
}

func (o *ServingOptions) Validate() []error {
	var errs []error
	if err := validateBindAddress(o.MetricsBindAddress, true); err != nil {
		errs = append(errs, invalidFlag("metrics-bind-address", "%v", err))
	}
	if err := validateBindAddress(o.HealthProbeBindAddress, false); err != nil {
		errs = append(errs, invalidFlag("health-probe-bind-address", "%v", err))
	}
	return errs
}

// ControllerOptions tune the controllers the leader runs.
type ControllerOptions struct {
	Workers        int
	SyncImage      string
	WarmRefillRate float64
	// EgressGatewayService and EgressCABundleConfigMap name the egress gateway (docs/egress.md).
	EgressGatewayService    string
	EgressCABundleConfigMap string
	// ManageEgressCA and EgressCARootsFile: the operator keeps the gateway's terminating CA and
	// the bundle ConfigMaps (pkg/controller/egressca, pkg/controller/cabundle).
	ManageEgressCA    bool
	EgressCARootsFile string
	// OperatorPodLabels are the labels of the operator's own pods (the operator's stop).
	OperatorPodLabels string
	// ReadIsolationEvidence, with OperatorPodLabels: read each sandbox's isolation evidence
	// before Bound (docs/isolation.md).
	ReadIsolationEvidence bool
}

func (o *ControllerOptions) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.Workers, "workers", o.Workers, "Workers of each controller: claims synced at once (>= 1).")
	fs.StringVar(&o.SyncImage, "sync-image", o.SyncImage, "Image of the sync-back Jobs, which run \"airlock sync\".")
	fs.StringVar(&o.EgressGatewayService, "egress-gateway-service", o.EgressGatewayService, "The egress gateway's Service, namespace/name:port (like airlock-system/airlock-egress:3128): sandboxes of classes with egress reach it at its cluster IP, and their NetworkPolicy opens its pods' target port. Empty: a class with egress is refused (its claims fail, EgressUnavailable).")
	fs.StringVar(&o.EgressCABundleConfigMap, "egress-ca-bundle-configmap", o.EgressCABundleConfigMap, "With --egress-gateway-service, optional: the ConfigMap (key ca.crt, in each claim's namespace) mounted into sandboxes with egress and named by SSL_CERT_FILE and the like: public roots and the gateway's terminating CA. The operator keeps it with --manage-egress-ca; else it is yours to make. Empty: no bundle is mounted.")
	fs.BoolVar(&o.ManageEgressCA, "manage-egress-ca", o.ManageEgressCA, "With --egress-ca-bundle-configmap: keep the egress gateway's terminating CA in the Secret "+egressca.SecretName+" of the operator's namespace (made, rotated before it expires, the next CA published for "+egressca.DefaultPropagation.String()+" before it signs), which the gateway mounts (--terminate-ca-dir), and the bundle ConfigMap, the public roots and the terminating CAs, in every namespace with a claim frozen with it.")
	fs.StringVar(&o.EgressCARootsFile, "egress-ca-roots-file", o.EgressCARootsFile, "With --manage-egress-ca: PEM file of the public roots the bundle ConfigMaps hold after the terminating CAs (read at start). Empty: the system's bundle ("+strings.Join(systemRootFiles, ", ")+", the first that exists).")
	fs.StringVar(&o.OperatorPodLabels, "operator-pod-labels", o.OperatorPodLabels, "The labels of this operator's own pods, key=value[,key=value] (like app.kubernetes.io/name=airlock,app.kubernetes.io/component=operator), in its namespace. Set: each sandbox's NetworkPolicy lets those pods reach sandboxd's port, and a reaped claim's pod is stopped through sandboxd (POST /stop, with the claim's token) and deleted at once instead of waiting for the kubelet to stop it (docs/nothing-lost.md, \"The operator's stop\"). Empty: reaping waits for the kubelet.")
	fs.BoolVar(&o.ReadIsolationEvidence, "read-isolation-evidence", o.ReadIsolationEvidence, "With --operator-pod-labels: before a claim is Bound, read its sandboxd's isolation evidence (GET /isolation, with the claim's token), judge it against the class's isolation and the Node's kernel, and sign it for the runtime (docs/isolation.md); a claim whose evidence does not hold fails (IsolationNotMet). false: claims are Bound without a statement, and a class that needs a kernel of its own is refused. Only for planes where no sandboxd runs (kwok).")
	fs.Float64Var(&o.WarmRefillRate, "warm-refill-rate", o.WarmRefillRate, "Warm members the leader creates per second at most, across every pool (> 0), unless the pools with a warmPolicy measure claims arriving faster: then as fast as they arrive; they are written with a client of their own, so that refills never take the claims' turn.")
}

func (o *ControllerOptions) Validate() []error {
	var errs []error
	if o.Workers < 1 {
		errs = append(errs, invalidFlag("workers", "must be at least 1"))
	}
	if !(o.WarmRefillRate > 0) || o.WarmRefillRate > 1000 {
		errs = append(errs, invalidFlag("warm-refill-rate", "must be > 0 and at most 1000, got %v", o.WarmRefillRate))
	}
	if o.SyncImage == "" || strings.ContainsAny(o.SyncImage, " \t\n") {
		errs = append(errs, invalidFlag("sync-image", "must be an image reference, like ghcr.io/airlock-dev/airlock:v0.1.0"))
	}
	if _, err := o.egressGateway(); err != nil {
		errs = append(errs, err)
	}
	if _, err := o.operatorPodLabels(); err != nil {
		errs = append(errs, err)
	}
	if o.EgressCARootsFile != "" {
		if err := checkReadableFile(o.EgressCARootsFile); err != nil {
			errs = append(errs, invalidFlag("egress-ca-roots-file", "%v", err))
		}
	}
	return errs
}

// egressGateway is the gateway the flags name, nil for none; its error names the flag.
func (o *ControllerOptions) egressGateway() (*sandboxpod.GatewayRef, error) {
	if o.ManageEgressCA && o.EgressCABundleConfigMap == "" {
		return nil, invalidFlag("manage-egress-ca", "needs --egress-ca-bundle-configmap (and --egress-gateway-service)")
	}
	if o.EgressCARootsFile != "" && !o.ManageEgressCA {
		return nil, invalidFlag("egress-ca-roots-file", "is used only with --manage-egress-ca")
	}
	if o.EgressGatewayService == "" {
		if o.EgressCABundleConfigMap != "" {
			return nil, invalidFlag("egress-ca-bundle-configmap", "is used only with --egress-gateway-service")
		}
		return nil, nil
	}
	ref, err := sandboxpod.ParseGatewayRef(o.EgressGatewayService)
	if err != nil {
		return nil, invalidFlag("egress-gateway-service", "%v", err)
	}
	for _, name := range []string{ref.Namespace, ref.Name} {
		if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
			return nil, invalidFlag("egress-gateway-service", "%q: %s", name, strings.Join(msgs, "; "))
		}
	}
	if cm := o.EgressCABundleConfigMap; cm != "" {
		if msgs := validation.IsDNS1123Subdomain(cm); len(msgs) > 0 {
			return nil, invalidFlag("egress-ca-bundle-configmap", "%q: %s", cm, strings.Join(msgs, "; "))
		}
	}
	ref.CABundleConfigMap = o.EgressCABundleConfigMap
	return ref, nil
}

// operatorPodLabels are the labels --operator-pod-labels names, nil for none; its error names the
// flag.
func (o *ControllerOptions) operatorPodLabels() (map[string]string, error) {
	if o.OperatorPodLabels == "" {
		return nil, nil
	}
	set, err := labels.ConvertSelectorToLabelsMap(o.OperatorPodLabels)
	if err != nil {
		return nil, invalidFlag("operator-pod-labels", "%v", err)
	}
	for k, v := range set {
		msgs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...)
		if len(msgs) > 0 {
			return nil, invalidFlag("operator-pod-labels", "%s=%s: %s", k, v, strings.Join(msgs, "; "))
		}
	}
	return set, nil
}

// operatorPeer is the operator's own pods as --operator-pod-labels names them, in namespace (the
// operator's), for the claims' NetworkPolicies to let in to sandboxd (the operator's stop); nil
// without the flag.
func (o *ControllerOptions) operatorPeer(namespace string) (*sandboxpod.OperatorPeer, error) {
	set, err := o.operatorPodLabels()
	if err != nil || set == nil {
		return nil, err
	}
	return &sandboxpod.OperatorPeer{Namespace: namespace, Labels: set}, nil
}

// systemRootFiles are where the public roots are looked for without --egress-ca-roots-file (as
// Go's crypto/x509 does on Linux; the operator's distroless image has the first).
var systemRootFiles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// egress is the gateway the flags name and what the egress CA controller keeps (nil, nil for
// none).
func (o *ControllerOptions) egress() (*sandboxpod.GatewayRef, *egressca.Config, error) {
	gateway, err := o.egressGateway()
	if err != nil {
		return nil, nil, err
	}
	ca, err := o.egressCA()
	return gateway, ca, err
}

// egressCA is what the egress CA controller keeps (nil without --manage-egress-ca), its roots
// read from --egress-ca-roots-file or the system's bundle. Call it after Validate.
func (o *ControllerOptions) egressCA() (*egressca.Config, error) {
	if !o.ManageEgressCA {
		return nil, nil
	}
	cfg := &egressca.Config{ConfigMapName: o.EgressCABundleConfigMap, Policy: egressca.DefaultPolicy()}
	if o.EgressCARootsFile != "" {
		b, err := os.ReadFile(o.EgressCARootsFile)
		if err != nil {
			return nil, invalidFlag("egress-ca-roots-file", "%v", err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(b) {
			return nil, invalidFlag("egress-ca-roots-file", "%s holds no PEM certificate", o.EgressCARootsFile)
		}
		cfg.Roots = b
		return cfg, nil
	}
	for _, name := range systemRootFiles {
		if b, err := os.ReadFile(name); err == nil && x509.NewCertPool().AppendCertsFromPEM(b) {
			cfg.Roots = b
			break
		}
	}
	return cfg, nil
}

type bindAddress struct {
	flag, addr string
}

// validateDistinctAddresses reports a listener whose address is one that an earlier listener
// already takes. Invalid, disabled and any-port (:0) addresses are left alone.
func validateDistinctAddresses(addrs ...bindAddress) []error {
	var errs []error
	for i, a := range addrs {
		for _, earlier := range addrs[:i] {
			if sameListenAddress(a.addr, earlier.addr) {
				errs = append(errs, invalidFlag(a.flag, "%s is already the address of --%s", a.addr, earlier.flag))
				break
			}
		}
	}
	return errs
}

func sameListenAddress(a, b string) bool {
	hostA, portA, errA := net.SplitHostPort(a)
	hostB, portB, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || portA != portB || portA == "0" {
		return false
	}
	unspecified := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return hostA == hostB || unspecified(hostA) || unspecified(hostB)
}
