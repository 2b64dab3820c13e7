//go:build !sandboxd_only

package cmd

import (
	"github.com/airlock-dev/airlock/pkg/tracing"

	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/airlock-dev/airlock/pkg/claimtoken"
	"github.com/airlock-dev/airlock/pkg/egress"
	airlockclientset "github.com/airlock-dev/airlock/pkg/generated/clientset/versioned"
	"github.com/airlock-dev/airlock/pkg/version"
)

// EgressOptions are the flags of `airlock egress`, the egress gateway (docs/egress.md).
type EgressOptions struct {
	ProxyBindAddress       string
	HealthProbeBindAddress string
	MetricsBindAddress     string
	DecisionsBindAddress   string
	ClaimsFile             string
	ClusterCIDRs           []string
	DNSServer              string
	HeadTimeout            time.Duration
	DialTimeout            time.Duration
	IdleTimeout            time.Duration
	ShutdownGrace          time.Duration
	// Termination and credentials: the CA's two files together, or its directory, or none.
	TerminateCACertFile string
	TerminateCAKeyFile  string
	TerminateCADir      string
	UpstreamCAFile      string
	CredentialsDir      string
	// The cluster (without --claims-file): how to reach it, and where the proxy key is.
	KubeClient        *KubeClientOptions
	TokenKeyNamespace string
	// Tracing: an egress span per decision (docs/record.md §1), off by default.
	Tracing *TracingOptions
}

// NewEgressOptions returns the gateway's options with their defaults.
func NewEgressOptions() *EgressOptions { return newEgressOptionsWithEnv(os.Getenv) }

func newEgressOptionsWithEnv(getenv func(string) string) *EgressOptions {
	return &EgressOptions{
		ProxyBindAddress:       ":3128",
		HealthProbeBindAddress: ":8081",
		MetricsBindAddress:     ":8080",
		DecisionsBindAddress:   egress.DisabledAddress,
		HeadTimeout:            30 * time.Second,
		DialTimeout:            10 * time.Second,
		IdleTimeout:            10 * time.Minute,
		ShutdownGrace:          30 * time.Second,
		KubeClient:             &KubeClientOptions{QPS: 20, Burst: 40},
		Tracing:                newTracingOptions(),
		TokenKeyNamespace:      defaultNamespace(getenv),
	}
}

// defaultNamespace is $POD_NAMESPACE, else airlock-system.
func defaultNamespace(getenv func(string) string) string {
	if ns := getenv(podNamespaceEnv); ns != "" {
		return ns
	}
	return defaultLeaseNamespace
}

func (o *EgressOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.ProxyBindAddress, "proxy-bind-address", o.ProxyBindAddress, "Address (host:port) of the HTTP proxy (CONNECT and absolute-URI requests) that sandboxes reach.")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress, "Address (host:port) /healthz and /readyz listen on; /readyz fails until the claims are known.")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, `Address (host:port) /metrics listens on; "0" serves no metrics.`)
	fs.StringVar(&o.DecisionsBindAddress, "decisions-bind-address", o.DecisionsBindAddress, `Address (host:port) GET /decisions listens on: each claim's egress decisions for the operator's leader, which writes them into the claim's session record (docs/record.md §2.1); the reader authenticates with a token derived from the proxy key for this read only. Give it a port that sandboxes cannot reach (not the proxy's: a sandbox's NetworkPolicy admits only that one). "0" serves none. Needs the cluster (no --claims-file).`)
	fs.StringVar(&o.ClaimsFile, "claims-file", o.ClaimsFile, "JSON list of the claims the gateway serves: namespace, claim, runtime, password (the proxy credential), sources (the addresses it may be used from) and policy (rules of host, ports, methods, pathPrefixes, allowPrivate, allowNonTLS), for a gateway run beside a cluster. Empty: the claims, their pods and the proxy key are read from the cluster (--kubeconfig, or in-cluster).")
	fs.StringVar(&o.TokenKeyNamespace, "token-key-namespace", o.TokenKeyNamespace, "Namespace of the proxy key Secret ("+claimtoken.ProxySecretName+"), which the operator derives from its token key and from which claims' proxy credentials are derived; the operator's. Defaults to $"+podNamespaceEnv+" when it is set, else "+defaultLeaseNamespace+".")
	fs.StringSliceVar(&o.ClusterCIDRs, "cluster-cidrs", o.ClusterCIDRs, "The cluster's pod and Service ranges (comma list of CIDRs): an allowed name that resolves into them is refused unless its rule allows private addresses. Private ranges are refused anyway: list the ranges that are not.")
	fs.StringVar(&o.DNSServer, "dns-server", o.DNSServer, "DNS server (ip:port) the gateway resolves allowed names with. Empty: the system's resolver (the pod's /etc/resolv.conf).")
	fs.DurationVar(&o.HeadTimeout, "head-timeout", o.HeadTimeout, "Time a client has to send a request's head, or a tunnel's TLS ClientHello (> 0); also how long a kept connection may wait for its next request.")
	fs.DurationVar(&o.DialTimeout, "dial-timeout", o.DialTimeout, "Time given to resolving an allowed name and to dialing it (> 0).")
	fs.DurationVar(&o.IdleTimeout, "idle-timeout", o.IdleTimeout, "A tunnel or exchange in which no byte moved either way for this long is closed (> 0).")
	fs.DurationVar(&o.ShutdownGrace, "shutdown-grace", o.ShutdownGrace, "Time open connections may go on after SIGTERM before they are closed (>= 0).")
	fs.StringVar(&o.TerminateCACertFile, "terminate-ca-cert-file", o.TerminateCACertFile, "PEM CA certificate with which the gateway terminates the TLS of tunnels to hosts whose rules restrict methods or paths or inject a credential (sandboxes trust it). Empty: such tunnels are refused.")
	fs.StringVar(&o.TerminateCAKeyFile, "terminate-ca-key-file", o.TerminateCAKeyFile, "PEM private key of --terminate-ca-cert-file.")
	fs.StringVar(&o.TerminateCADir, "terminate-ca-dir", o.TerminateCADir, "Instead of --terminate-ca-cert-file and --terminate-ca-key-file: a directory with the CA's tls.crt and tls.key, the mounted Secret airlock-egress-ca that the operator keeps (--manage-egress-ca). It may hold no CA yet: until it does, what would be terminated is refused. Both ways, the files are followed as they change (checked at each certificate minted), without a restart.")
	fs.StringVar(&o.UpstreamCAFile, "upstream-ca-file", o.UpstreamCAFile, "With --terminate-ca-cert-file or --terminate-ca-dir, optional: PEM certificates trusted for terminated tunnels' upstreams beside the system's roots.")
	fs.StringVar(&o.CredentialsDir, "credentials-dir", o.CredentialsDir, "With --terminate-ca-cert-file or --terminate-ca-dir: directory of the credentials rules inject, one file per credential named as the rule's secret (a mounted Secret); read each time it is injected, so an updated Secret is used from the next request on.")
}

// Validate returns one error for each invalid flag value.
func (o *EgressOptions) Validate() []error {
	var errs []error
	if err := validateBindAddress(o.ProxyBindAddress, false); err != nil {
		errs = append(errs, invalidFlag("proxy-bind-address", "%v", err))
	}
	if err := validateBindAddress(o.HealthProbeBindAddress, false); err != nil {
		errs = append(errs, invalidFlag("health-probe-bind-address", "%v", err))
	}
	if err := validateBindAddress(o.MetricsBindAddress, true); err != nil {
		errs = append(errs, invalidFlag("metrics-bind-address", "%v", err))
	}
	if err := validateBindAddress(o.DecisionsBindAddress, true); err != nil {
		errs = append(errs, invalidFlag("decisions-bind-address", "%v", err))
	} else if o.DecisionsBindAddress != egress.DisabledAddress && o.ClaimsFile != "" {
		errs = append(errs, invalidFlag("decisions-bind-address", "needs the cluster's proxy key: not with --claims-file"))
	}
	errs = append(errs, validateDistinctAddresses(
		bindAddress{"proxy-bind-address", o.ProxyBindAddress},
		bindAddress{"health-probe-bind-address", o.HealthProbeBindAddress},
		bindAddress{"metrics-bind-address", o.MetricsBindAddress},
		bindAddress{"decisions-bind-address", o.DecisionsBindAddress},
	)...)
	if o.ClaimsFile == "" {
		errs = append(errs, o.KubeClient.Validate()...)
		if msgs := validation.IsDNS1123Label(o.TokenKeyNamespace); len(msgs) > 0 {
			errs = append(errs, invalidFlag("token-key-namespace", "%q: %s", o.TokenKeyNamespace, strings.Join(msgs, "; ")))
		}
	} else if err := checkReadableFile(o.ClaimsFile); err != nil {
		errs = append(errs, invalidFlag("claims-file", "%v", err))
	}
	if _, err := o.clusterPrefixes(); err != nil {
		errs = append(errs, invalidFlag("cluster-cidrs", "%v", err))
	}
	if o.DNSServer != "" {
		if host, port, err := net.SplitHostPort(o.DNSServer); err != nil || net.ParseIP(host) == nil || port == "" || port == "0" {
			errs = append(errs, invalidFlag("dns-server", "must be ip:port, like 10.96.0.10:53, got %q", o.DNSServer))
		}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"head-timeout", o.HeadTimeout}, {"dial-timeout", o.DialTimeout}, {"idle-timeout", o.IdleTimeout}} {
		if d.v <= 0 {
			errs = append(errs, invalidFlag(d.flag, "must be greater than zero"))
		}
	}
	if o.ShutdownGrace < 0 {
		errs = append(errs, invalidFlag("shutdown-grace", "must not be negative"))
	}
	return append(errs, o.validateTermination()...)
}

// validateTermination checks the termination flags: the CA's certificate and key together, the
// others only with them.
func (o *EgressOptions) validateTermination() []error {
	var errs []error
	files := []struct{ flag, name string }{{"terminate-ca-cert-file", o.TerminateCACertFile}, {"terminate-ca-key-file", o.TerminateCAKeyFile}, {"upstream-ca-file", o.UpstreamCAFile}}
	for _, f := range files {
		if f.name != "" {
			if err := checkReadableFile(f.name); err != nil {
				errs = append(errs, invalidFlag(f.flag, "%v", err))
			}
		}
	}
	if o.TerminateCADir != "" {
		if o.TerminateCACertFile != "" || o.TerminateCAKeyFile != "" {
			errs = append(errs, invalidFlag("terminate-ca-dir", "is not used with --terminate-ca-cert-file and --terminate-ca-key-file: give the CA one way"))
		} else if fi, err := os.Stat(o.TerminateCADir); err != nil {
			errs = append(errs, invalidFlag("terminate-ca-dir", "%v", err))
		} else if !fi.IsDir() {
			errs = append(errs, invalidFlag("terminate-ca-dir", "%s is not a directory", o.TerminateCADir))
		}
	}
	switch {
	case o.TerminateCACertFile != "" && o.TerminateCAKeyFile == "":
		errs = append(errs, invalidFlag("terminate-ca-key-file", "must be set with --terminate-ca-cert-file"))
	case o.TerminateCACertFile == "" && o.TerminateCAKeyFile != "":
		errs = append(errs, invalidFlag("terminate-ca-cert-file", "must be set with --terminate-ca-key-file"))
	case o.TerminateCACertFile == "" && o.TerminateCADir == "":
		if o.UpstreamCAFile != "" {
			errs = append(errs, invalidFlag("upstream-ca-file", "is used only with --terminate-ca-cert-file or --terminate-ca-dir"))
		}
		if o.CredentialsDir != "" {
			errs = append(errs, invalidFlag("credentials-dir", "is used only with --terminate-ca-cert-file or --terminate-ca-dir"))
		}
	}
	if o.CredentialsDir != "" {
		if fi, err := os.Stat(o.CredentialsDir); err != nil {
			errs = append(errs, invalidFlag("credentials-dir", "%v", err))
		} else if !fi.IsDir() {
			errs = append(errs, invalidFlag("credentials-dir", "%s is not a directory", o.CredentialsDir))
		}
	}
	errs = append(errs, o.Tracing.Validate()...)
	return errs
}

// clusterPrefixes parses --cluster-cidrs; each must be a network address with its length.
func (o *EgressOptions) clusterPrefixes() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, text := range o.ClusterCIDRs {
		p, err := netip.ParsePrefix(text)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR, like 10.96.0.0/12", text)
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("%q has host bits set: did you mean %s?", text, p.Masked())
		}
		out = append(out, p)
	}
	return out, nil
}

// Config returns the gateway's configuration, reading --claims-file, or, without it, building
// the cluster's claim lookup, whose informers (nil with a claims file) the caller starts and
// stops. Call it after Validate.
func (o *EgressOptions) Config() (egress.ServeConfig, *egress.ClusterInformers, error) {
	cfg, informers, _, err := o.configAndClient()
	return cfg, informers, err
}

// configAndClient is Config, with the cluster's client (nil with --claims-file).
func (o *EgressOptions) configAndClient() (egress.ServeConfig, *egress.ClusterInformers, kubernetes.Interface, error) {
	claims, informers, kube, err := o.claimLookup()
	if err != nil {
		return egress.ServeConfig{}, nil, nil, err
	}
	cfg, err := o.gatewayConfig(claims)
	return cfg, informers, kube, err
}

// config is Config for the command; in the cluster it also records the claims' Warning events
// for their first refused hosts (egress.SharedDenialEvents: one event per claim and host across
// the replicas), written until stop is called (a no-op with --claims-file).
func (o *EgressOptions) config(ctx context.Context) (egress.ServeConfig, *egress.ClusterInformers, func(), error) {
	cfg, informers, kube, err := o.configAndClient()
	if err != nil || kube == nil {
		return cfg, informers, func() {}, err
	}
	instance, err := os.Hostname()
	if err != nil {
		return egress.ServeConfig{}, nil, nil, fmt.Errorf("getting the hostname for the events' reporting instance: %w", err)
	}
	events := egress.NewSharedDenialEvents(kube.CoreV1(), clock.RealClock{}, instance)
	cfg.Gateway.Observe = events.Observe
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		events.Run(ctx)
	}()
	return cfg, informers, func() { cancel(); <-done }, nil
}

// claimLookup is --claims-file's lookup, or the cluster's (with its client).
func (o *EgressOptions) claimLookup() (egress.ClaimLookup, *egress.ClusterInformers, kubernetes.Interface, error) {
	if o.ClaimsFile != "" {
		claims, err := egress.LoadClaimsFile(o.ClaimsFile)
		if err != nil {
			return nil, nil, nil, invalidFlag("claims-file", "%s", strings.ReplaceAll(err.Error(), "\n", "; "))
		}
		return claims, nil, nil, nil
	}
	restConfig, err := o.KubeClient.restConfig()
	if err != nil {
		return nil, nil, nil, err
	}
	restConfig.UserAgent = "airlock-egress/" + version.Get().Version
	kube, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("building the Kubernetes client: %w", err)
	}
	air, err := airlockclientset.NewForConfig(restConfig)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("building the airlock client: %w", err)
	}
	claims, informers, err := egress.NewClusterLookup(kube, air, o.TokenKeyNamespace)
	if err != nil {
		return nil, nil, nil, err
	}
	return claims, informers, kube, nil
}

// gatewayConfig is the gateway's configuration with claims.
func (o *EgressOptions) gatewayConfig(claims egress.ClaimLookup) (egress.ServeConfig, error) {
	prefixes, err := o.clusterPrefixes()
	if err != nil {
		return egress.ServeConfig{}, invalidFlag("cluster-cidrs", "%v", err)
	}
	cfg := egress.Config{
		Claims:        claims,
		ClusterCIDRs:  prefixes,
		HeadTimeout:   o.HeadTimeout,
		DialTimeout:   o.DialTimeout,
		IdleTimeout:   o.IdleTimeout,
		ShutdownGrace: o.ShutdownGrace,
	}
	if o.DNSServer != "" {
		cfg.Resolver = egress.DNSResolver(o.DNSServer)
	}
	switch {
	case o.TerminateCACertFile != "":
		if cfg.Terminate, err = egress.LoadTerminator(o.TerminateCACertFile, o.TerminateCAKeyFile, o.UpstreamCAFile, o.CredentialsDir); err != nil {
			return egress.ServeConfig{}, invalidFlag("terminate-ca-cert-file", "%v", err)
		}
	case o.TerminateCADir != "":
		if cfg.Terminate, err = egress.LoadTerminatorDir(o.TerminateCADir, o.UpstreamCAFile, o.CredentialsDir); err != nil {
			return egress.ServeConfig{}, invalidFlag("terminate-ca-dir", "%v", err)
		}
	}
	if cfg.Terminate != nil {
		logger := klog.Background().WithName("terminating-ca")
		cfg.Terminate.Logger = &logger
	}
	sc := egress.ServeConfig{
		Gateway:          cfg,
		ProxyAddress:     o.ProxyBindAddress,
		HealthAddress:    o.HealthProbeBindAddress,
		MetricsAddress:   o.MetricsBindAddress,
		DecisionsAddress: o.DecisionsBindAddress,
	}
	if cluster, ok := claims.(*egress.ClusterClaims); ok && o.DecisionsBindAddress != egress.DisabledAddress {
		log := egress.NewDecisionLog(0, 0)
		cluster.OnDelete(log.Forget)
		sc.Gateway.Decisions, sc.ReaderToken = log, cluster.ReaderToken
	}
	return sc, nil
}

func newEgressCommand(o *EgressOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "egress",
		Short: "Run the egress gateway: the HTTP proxy through which sandboxes reach the hosts their policy lists",
		Long: `Run the egress gateway: an HTTP proxy (CONNECT tunnels and absolute-URI requests) through which a
sandbox reaches the hosts its claim's policy lists, and nothing else. A request must carry the
claim's proxy credential (Proxy-Authorization: Basic) from the claim's pod's address; the target
is checked against the policy before anything is resolved; the gateway resolves an allowed name
itself, refuses answers in loopback, link-local, private and the cluster's ranges unless the rule
allows private addresses, and dials the address it checked; a tunnel's TLS ClientHello must name
the CONNECT host. docs/egress.md is the contract.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if errs := o.Validate(); len(errs) > 0 {
				return utilerrors.NewAggregate(errs)
			}
			cliflag.PrintFlags(cmd.Flags())
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			cfg, informers, stopEvents, err := o.config(ctx)
			if err != nil {
				return err
			}
			defer stopEvents()
			tp, err := tracing.New(ctx, o.Tracing.Config(), tracing.ServiceEgress)
			if err != nil {
				return err
			}
			defer shutdownTracing(tp)
			if tp.SDK() != nil {
				cfg.Gateway.Tracer = tp.Tracer(tracing.ServiceEgress)
			}
			if informers != nil {
				// The gateway refuses everything, and is not ready, until they have synced.
				informersDone := make(chan struct{})
				informers.Start(informersDone)
				defer informers.Shutdown()
				defer close(informersDone)
			}
			return egress.Run(ctx, cfg)
		},
	}
	fss := newNamedFlagSets()
	o.AddFlags(fss.FlagSet("egress"))
	o.KubeClient.AddFlags(fss.FlagSet("kubernetes client"))
	o.Tracing.AddFlags(fss.FlagSet("tracing"))
	addLogsFlags(fss.FlagSet("logs"))
	setFlags(cmd, fss)
	return cmd
}
